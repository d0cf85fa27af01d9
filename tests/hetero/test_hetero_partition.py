"""partition(HeteroData): every edge of every type lands once, in its
target's owner, its column on the source type's [owned ; halo]; each node
type's halo is the union over the relations reading it; what a peer sends
is exactly the halo block it is asked for; errors name the fix."""
import numpy as np
import pytest
import torch
from hetero_graphs import small_hetero
from torch_geometric.nn import SAGEConv, to_hetero

import pyg_dist
from pyg_dist.nn import to_distributed
from pyg_dist.partitioning import read_meta, read_part
from pyg_dist.partitioning.hetero import edge_key


@pytest.fixture(scope="module")
def graph():
    return small_hetero()


def load_parts(folder):
    meta = read_meta(folder)
    return meta, [read_part(folder, p, meta) for p in range(meta.num_parts)]


@pytest.mark.parametrize("method,num_parts", [("metis", 3), ("random", 4), ("metis-coarse", 2),
                                              ("random", 1)])
def test_parts_hold_every_edge_once_on_the_union_halo(graph, tmp_path, method, num_parts):
    meta = pyg_dist.partition(graph, num_parts, tmp_path / "parts", method=method, seed=1)
    meta, parts = load_parts(tmp_path / "parts")
    assert meta.types.node_types == graph.node_types
    assert [tuple(e) for e in meta.types.edge_types] == graph.edge_types
    owner = {}
    for t in graph.node_types:
        owner[t] = torch.full((graph[t].num_nodes,), -1)
        for p, part in enumerate(parts):
            gid = part["node_types"][t]["graph"]["global_id"]
            assert torch.equal(gid, gid.sort().values), "owned rows ascend within the type"
            assert (owner[t][gid] == -1).all(), "a node has one owner"
            owner[t][gid] = p
            for key in ("x", "y", "train_mask"):
                if key in graph[t]:
                    assert torch.equal(part["node_types"][t]["attrs"][key], graph[t][key][gid])
        assert (owner[t] >= 0).all()
        assert meta.types.part_sizes[t] == torch.bincount(owner[t], minlength=num_parts).tolist()
    for e in graph.edge_types:
        src_t, _, dst_t = e
        seen = []
        for part in parts:
            g = part["edge_types"][edge_key(e)]["graph"]
            node = part["node_types"][src_t]["graph"]
            ids = torch.cat([node["global_id"], node["halo_global_id"]])
            row = torch.repeat_interleave(torch.arange(g["rowptr"].numel() - 1),
                                          g["rowptr"].diff())
            dst_ids = part["node_types"][dst_t]["graph"]["global_id"][row]
            expected = graph[e].edge_index[:, g["edge_id"]]
            assert torch.equal(ids[g["col"]], expected[0]), f"{e}: columns name the sources"
            assert torch.equal(dst_ids, expected[1]), f"{e}: rows name the targets"
            seen.append(g["edge_id"])
        all_ids = torch.cat(seen).sort().values
        assert torch.equal(all_ids, torch.arange(graph[e].num_edges)), f"{e}: every edge once"
    for t in graph.node_types:
        readers = [e for e in graph.edge_types if e[0] == t]
        for p, part in enumerate(parts):
            union = set()
            for e in readers:
                src, dst = graph[e].edge_index
                mine = owner[e[2]][dst] == p
                union |= set(src[mine & (owner[t][src] != p)].tolist())
            halo = part["node_types"][t]["graph"]["halo_global_id"]
            assert set(halo.tolist()) == union, f"{t}: the halo is the union over {readers}"
            assert meta.types.halo_sizes[t][p] == len(union)
            ptr = part["node_types"][t]["graph"]["halo_ptr"]
            for q in range(num_parts):  # q sends p exactly p's block from q, in order
                block = halo[ptr[q]:ptr[q + 1]]
                assert (owner[t][block] == q).all()
                sender = parts[q]["node_types"][t]["graph"]
                sent = sender["global_id"][sender["send_idx"][
                    sender["send_ptr"][p]:sender["send_ptr"][p + 1]]]
                assert torch.equal(sent, block)
    assert not any(meta.types.halo_sizes["institution"]), "no relation reads institution"


def test_self_relation_halo_degrees(graph, tmp_path):
    pyg_dist.partition(graph, 3, tmp_path / "parts", seed=0)
    _, parts = load_parts(tmp_path / "parts")
    e = ("paper", "cites", "paper")
    src, dst = graph[e].edge_index
    degree = torch.bincount(dst, minlength=graph["paper"].num_nodes)
    loops = torch.bincount(dst[src == dst], minlength=graph["paper"].num_nodes)
    for part in parts:
        halo = part["node_types"]["paper"]["graph"]["halo_global_id"]
        g = part["edge_types"][edge_key(e)]["graph"]
        assert torch.equal(g["halo_in_degree"], degree[halo])
        assert torch.equal(g["halo_self_loops"], loops[halo])
        other = part["edge_types"][edge_key(("author", "writes", "paper"))]["graph"]
        assert not other["halo_in_degree"].any(), "authors are no targets of writes"


def test_load_reads_like_hetero_data(graph, tmp_path):
    pyg_dist.partition(graph, 2, tmp_path / "parts", method="random")
    data = pyg_dist.DistHeteroData.load(tmp_path / "parts", rank=1)
    assert data.metadata() == graph.metadata()
    gid = data["paper"].global_id
    assert torch.equal(data["paper"].x, graph["paper"].x[gid])
    assert torch.equal(data.x_dict["author"], graph["author"].x[data["author"].global_id])
    assert set(data.edge_index_dict) == set(graph.edge_types)
    rel = data["author", "writes", "paper"].edge_index
    src, dst = rel.global_edges()
    expected = graph["author", "writes", "paper"].edge_index[:, rel.edge_id]
    assert torch.equal(torch.stack([src, dst]), expected)
    assert rel.num_src == data["author"].num_nodes and rel.num_owned == gid.numel()
    with pytest.raises(ValueError, match="DistData.load"):
        pyg_dist.DistHeteroData.load(_homogeneous(tmp_path), rank=0)
    with pytest.raises(ValueError, match=r"DistHeteroData.load"):
        pyg_dist.DistData.load(tmp_path / "parts", rank=0)
    with pytest.raises(KeyError, match="node types"):
        _ = data["venue"]
    with pytest.raises(AttributeError, match="holds x, y, train_mask"):
        _ = data["paper"].z


def _homogeneous(tmp_path):
    from torch_geometric.data import Data
    out = tmp_path / "homogeneous"
    pyg_dist.partition(Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2), 1, out)
    return out


def test_bad_input_names_the_fix(graph, tmp_path):
    bad = graph.clone()
    bad["paper", "cites", "paper"].edge_index = torch.tensor([[0], [99]])
    with pytest.raises(ValueError, match="num_nodes"):
        pyg_dist.partition(bad, 2, tmp_path / "a")
    unknown = graph.clone()
    unknown["venue", "hosts", "paper"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=r"'partition' found relation \('venue', 'hosts', "
                                         r"'paper'\) whose source type 'venue' is no node type.*"
                                         r"give it nodes \(data\['venue'\]\.num_nodes = N"):
        pyg_dist.partition(unknown, 2, tmp_path / "a")
    with pytest.raises(ValueError, match="clusters_per_part=1"):
        pyg_dist.partition(graph, 2, tmp_path / "b", clusters_per_part=2)
    with pytest.raises(ValueError, match="choose 1 <= num_parts"):
        pyg_dist.partition(graph, 0, tmp_path / "c")
    nan = graph.clone()
    nan["author"].x[3, 1] = float("nan")
    with pytest.raises(ValueError, match="nan_to_num"):
        pyg_dist.partition(nan, 2, tmp_path / "d")
    assert not np.any([p.exists() for p in (tmp_path / "a", tmp_path / "d")])


class _Sage(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = SAGEConv((-1, -1), 4)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


def test_model_errors_name_the_fix(graph, tmp_path):
    featureless = graph.clone()
    featureless["field"].num_nodes = featureless["field"].x.size(0)
    del featureless["field"].x
    del featureless["paper"].y
    pyg_dist.partition(featureless, 1, tmp_path / "a")
    data = pyg_dist.DistHeteroData.load(tmp_path / "a")
    model = to_distributed(to_hetero(_Sage(), data.metadata()))
    with pytest.raises(KeyError, match=r"'DistHeteroData\['field'\]' has no 'x'; give every"):
        model(data.x_dict, data.edge_index_dict)
    with pytest.raises(ValueError, match="set data\\[node_type\\].y on exactly one type"):
        data.labelled_type()
    pyg_dist.partition(graph, 1, tmp_path / "b")
    data = pyg_dist.DistHeteroData.load(tmp_path / "b")
    assert data.labelled_type() == "paper"
    other = (data.node_types, [*data.edge_types, ("paper", "reviews", "author")])
    model = to_distributed(to_hetero(_Sage(), other))
    with pytest.raises(KeyError, match=r"to_hetero\(model, data.metadata\(\)\)"):
        model(data.x_dict, data.edge_index_dict)
