"""Graphs by name: what ``load_dataset`` and the CLI's ``--dataset`` accept."""
from __future__ import annotations

import os
from typing import Any

from pyg_dist.datasets.community import PRESETS, community_graph, preset
from pyg_dist.datasets.hetero import synthetic_mag
from pyg_dist.datasets.ogb import OGB, ogbn
from pyg_dist.datasets.ogb_mag import MAG_FOLDER, MAG_NAME, ogbn_mag
from pyg_dist.datasets.ogbl import OGBL, ogbl
from pyg_dist.datasets.planetoid import PLANETOID, planetoid
from pyg_dist.datasets.recsys import synthetic_recommendation
from pyg_dist.datasets.sbm import synthetic

__all__ = ["load_dataset", "dataset_name", "DATASETS", "HETERO_DATASETS", "LINK_DATASETS",
           "RECOMMEND_DATASETS", "recommendation_sizes"]

DATASETS = ("synthetic", *PRESETS, "synthetic-mag", *PLANETOID, *OGB, MAG_NAME)
#: The datasets that are a ``HeteroData``.
HETERO_DATASETS = ("synthetic-mag", MAG_NAME)
#: OGB's link datasets: ``load_dataset`` gives the ``(data, split_edge)`` pair
#: that :func:`pyg_dist.partition` cuts as a link split.
LINK_DATASETS = tuple(OGBL)
#: Bipartite user-item graphs: ``load_dataset`` gives them split, as
#: :func:`~pyg_dist.datasets.synthetic_recommendation` does (users first).
RECOMMEND_DATASETS = ("synthetic-rec",)
_BY_LOWER = {name.lower(): name for name in (*DATASETS, *LINK_DATASETS, *RECOMMEND_DATASETS)}


def dataset_name(name: str) -> str:
    """The name in :data:`DATASETS` that ``name`` spells in any case
    (``"Cora"``, PyG's spelling, is ``"cora"``; ``"ogbn-papers100m"`` is
    ``"ogbn-papers100M"``); an unknown ``name`` comes back as it is.

    Args:
        name (str): A dataset's name.
    """
    return _BY_LOWER.get(name.lower(), name) if isinstance(name, str) else name


def load_dataset(name: str, root: str | os.PathLike | None = None, seed: int = 0,
                 **kwargs: Any) -> Any:
    """The graph called ``name``, as a :class:`torch_geometric.data.Data`, or a
    :class:`torch_geometric.data.HeteroData` for those in ``HETERO_DATASETS``.

    Args:
        name (str): :obj:`"synthetic"` (the small embedded stochastic block
            model, :func:`synthetic`), :obj:`"synthetic-arxiv"`,
            :obj:`"synthetic-products"` or :obj:`"synthetic-collab"`
            (:func:`community_graph` presets shaped like ogbn-arxiv,
            ogbn-products and ogbl-collab), or a Planetoid name
            (:obj:`"cora"`, :obj:`"citeseer"`, :obj:`"pubmed"`) loaded from ``root``,
            or an OGB node-property dataset (:obj:`"ogbn-arxiv"`,
            :obj:`"ogbn-products"`, :obj:`"ogbn-papers100M"`) read from the
            folder OGB downloaded into, with its official split
            (:func:`~pyg_dist.datasets.ogb.ogbn`; nothing is downloaded), or
            :obj:`"synthetic-mag"` (:func:`synthetic_mag`) and :obj:`"ogbn-mag"`
            (:func:`~pyg_dist.datasets.ogb_mag.ogbn_mag`, from OGB's folder),
            heterogeneous, or an OGB link dataset (:obj:`"ogbl-collab"`,
            :obj:`"ogbl-citation2"`, :obj:`"ogbl-ddi"`): the ``(data,
            split_edge)`` pair :func:`pyg_dist.partition` cuts as a link split
            (:func:`~pyg_dist.datasets.ogbl.ogbl`), or :obj:`"synthetic-rec"`,
            the user-item graph of
            :func:`~pyg_dist.datasets.synthetic_recommendation`, already split
            (``num_nodes`` users and items, two users an item, see
            ``recommendation_sizes``; ``avg_degree`` interactions per
            user). Any case is taken (``"Cora"``).
        root (str or os.PathLike, optional): Folder holding Planetoid data as
            ``root/Cora/raw/...`` or OGB data as ``root/ogbn_arxiv/raw/...``.
            (default: :obj:`None`)
        seed (int, optional): Seed of the synthetic graphs. (default: :obj:`0`)
        **kwargs (optional): Parameters of the synthetic graphs (e.g.
            ``num_nodes``, ``avg_degree``), of ogbn-mag (``to_undirected``,
            ``features``) and of the Planetoid graphs (``download=True``
            fetches missing raw files; nothing downloads otherwise);
            :obj:`None` values keep the default.
    """
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    name = dataset_name(name)
    if name == "synthetic":
        return synthetic(seed=seed, **kwargs)
    if name == "synthetic-mag":
        return synthetic_mag(seed=seed, **kwargs)
    if name in PRESETS:
        return community_graph(preset(name, **kwargs), seed=seed)
    if name in RECOMMEND_DATASETS:
        if "num_nodes" in kwargs:
            kwargs["num_users"], kwargs["num_items"] = recommendation_sizes(
                kwargs.pop("num_nodes"))
        return synthetic_recommendation(seed=seed, **kwargs)
    if name in PLANETOID:
        if root is None:
            raise ValueError(
                f"dataset '{name}' needs a root folder holding {PLANETOID[name]}/raw; pass --root"
            )
        return planetoid(name, root, download=kwargs.get("download", False))
    if name in OGB:
        if root is None:
            raise ValueError(f"dataset '{name}' needs the folder OGB downloaded it into "
                             f"(holding {OGB[name].folder}/raw); pass root= (--root)")
        return ogbn(name, root)
    if name in OGBL:
        if root is None:
            raise ValueError(f"dataset '{name}' needs the folder OGB downloaded it into "
                             f"(holding {OGBL[name].folder}/raw); pass root=")
        return ogbl(name, root)
    if name == MAG_NAME:
        if root is None:
            raise ValueError(f"dataset '{name}' needs the folder OGB downloaded it into "
                             f"(holding {MAG_FOLDER}/raw); pass root= (--root)")
        return ogbn_mag(root, **kwargs)
    raise ValueError(f"unknown dataset '{name}'; use one of "
                     f"{', '.join((*DATASETS, *LINK_DATASETS, *RECOMMEND_DATASETS))}")


def recommendation_sizes(num_nodes: int) -> tuple[int, int]:
    """The users and items of a ``num_nodes``-node ``"synthetic-rec"``
    graph: two users an item (its default, 200 and 100), the rounding to the
    items.

    Args:
        num_nodes (int): Users and items together, at least 2.
    """
    if num_nodes < 2:
        raise ValueError(f"'synthetic-rec' got num_nodes={num_nodes}; give at least 2 "
                         f"(users and items together)")
    users = 2 * num_nodes // 3
    return users, num_nodes - users
