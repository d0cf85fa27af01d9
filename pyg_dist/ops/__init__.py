"""Local aggregation: SpMM and GAT attention ops with Triton, C++ and PyTorch backends."""
from pyg_dist.ops.backends import available_backends, default_backend
from pyg_dist.ops.csr import csr_transpose, to_csr
from pyg_dist.ops.gat import gat, gat_attention
from pyg_dist.ops.gat_ref import gat_ref
from pyg_dist.ops.spmm import spmm
from pyg_dist.ops.spmm_ref import spmm_ref

__all__ = ["spmm", "spmm_ref", "gat", "gat_attention", "gat_ref", "to_csr", "csr_transpose",
           "available_backends", "default_backend"]
