"""``pyg-dist partition``'s options are checked before anything is loaded,
each bad one refused in one line that names the flag and what it takes."""
import pytest

from pyg_dist.cli import commands, main


@pytest.fixture
def nothing_loads(monkeypatch):
    def loaded(*args, **kwargs):
        raise AssertionError("a graph was loaded or a rank started")

    for name in ("load_graph", "partition_graph", "partition_distributed"):
        monkeypatch.setattr(commands, name, loaded)
    monkeypatch.setattr(commands.pyg_dist, "launch", loaded)


@pytest.mark.parametrize("parts", ["0", "-2"])
@pytest.mark.parametrize("distributed", [False, True], ids=["single", "distributed"])
def test_partition_refuses_fewer_than_one_part(tmp_path, nothing_loads, parts, distributed):
    argv = ["partition", "--parts", parts, "--out", str(tmp_path / "p")]
    if distributed:
        argv += ["--distributed", "--input", str(tmp_path / "graph")]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert str(exc.value) == (f"pyg-dist partition: --parts {parts}: give the number of parts "
                              f"to cut (one per rank), an integer >= 1, or leave it out for 4 "
                              f"(or torchrun's ranks)")
    assert not (tmp_path / "p").exists()


def test_a_bad_graph_option_exits_in_one_line(tmp_path, nothing_loads):
    with pytest.raises(SystemExit) as exc:
        main(["partition", "--num-nodes", "0", "--out", str(tmp_path / "p")])
    assert str(exc.value) == ("pyg-dist partition: Graph(num_nodes=0): num_nodes must be an "
                              "integer >= 1; or None for the dataset's own")
