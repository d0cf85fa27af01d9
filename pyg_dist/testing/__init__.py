"""Tools for testing and measuring distributed training on one machine:
:mod:`pyg_dist.testing.cluster` makes hosts out of network namespaces."""

from pyg_dist.testing.decorators import (
    onlyCUDA,
    withCPUExtension,
    withMETIS,
    withNamespaces,
    withNetem,
    withTriton,
    withTritonBackend,
    withTritonCompiler,
)

__all__: list[str] = [
    "withTriton", "withTritonBackend", "withTritonCompiler", "withCPUExtension", "withMETIS",
    "withNamespaces", "withNetem", "onlyCUDA",
]
