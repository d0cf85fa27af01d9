"""Cutting a graph into a folder of parts, one per rank."""
from pyg_dist.partitioning.dist_partitioner import partition_distributed
from pyg_dist.partitioning.io import HeteroTypes, PartitionMeta, read_meta, read_part
from pyg_dist.partitioning.partitioner import partition
from pyg_dist.partitioning.plan import LocalPart, PartPlan

__all__ = ["partition", "partition_distributed", "PartitionMeta", "HeteroTypes", "LocalPart",
           "PartPlan", "read_meta", "read_part"]
