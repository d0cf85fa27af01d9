"""Training strategies: how the ranks share the work of :func:`pyg_dist.train.train`."""
