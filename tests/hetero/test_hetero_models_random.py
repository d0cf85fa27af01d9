"""The heterogeneous model cases of test_hetero_models on four ranks of a
random cut (most boundary rows, relations with no edge on some ranks)."""
from test_hetero_models import check_models


def test_hetero_models_equal_pyg_on_a_random_cut(tmp_path_factory):
    check_models(tmp_path_factory, 4, "random")
