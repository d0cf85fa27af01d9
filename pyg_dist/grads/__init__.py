"""Summing parameter gradients over the ranks, plainly or compressed, as DDP
communication hooks that overlap with backward."""
from pyg_dist.grads.covap import CovapState, covap_hook
from pyg_dist.grads.spec import GradCompress, parse_grad_compress
from pyg_dist.grads.sync import GradientSync

__all__ = ["GradientSync", "GradCompress", "parse_grad_compress", "CovapState", "covap_hook"]
