"""The runtime every rank stands on: the process group and its collectives
(:mod:`~pyg_dist.runtime.distributed`, the one home of ``torch.distributed``),
the peers and what a lost one looks like (:mod:`~pyg_dist.runtime.peers`),
local ranks for scripts and notebooks (:mod:`~pyg_dist.runtime.launch`),
the environment variables read (:mod:`~pyg_dist.runtime.env`) and the C++
kernels' loader and build flags (:mod:`~pyg_dist.runtime.cpu_ext`,
:mod:`~pyg_dist.runtime.cpu_build`)."""
