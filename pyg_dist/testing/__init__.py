"""Tools for testing and measuring distributed training on one machine:
:mod:`pyg_dist.testing.cluster` makes hosts out of network namespaces."""

__all__: list[str] = []
