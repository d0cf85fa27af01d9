"""OGB link datasets written in OGB's own on-disk layout
(``<root>/ogbl_collab/raw/*.csv.gz`` and ``split/<kind>/{train,valid,test}.pt``),
for the loader's tests and the command line's: small hand-made ones, and
random ones large enough for Hits@50 to rank."""
import gzip

import numpy as np
import torch


def write_csv(path, rows):
    """``rows`` as OGB's gzipped CSV: one row a line (a 1-D array: one value a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in np.atleast_2d(rows) if np.ndim(rows) > 1 else [[r] for r in rows]:
            f.write(",".join(str(v) for v in row) + "\n")


def write_ogbl(root, folder, split, num_nodes, edges, features, splits):
    """A dataset's folder under ``root``: its nodes, stored edges, features
    (``features``: an array, ``True`` for ``arange / 10`` in 3 columns, or
    ``False`` for none) and the official split's three files."""
    raw = root / folder / "raw"
    write_csv(raw / "num-node-list.csv.gz", [num_nodes])
    write_csv(raw / "num-edge-list.csv.gz", [len(edges)])
    write_csv(raw / "edge.csv.gz", np.array(edges))
    if features is True:
        features = np.arange(num_nodes * 3).reshape(num_nodes, 3) / 10
    if features is not False:
        write_csv(raw / "node-feat.csv.gz", np.asarray(features))
    for name, content in splits.items():
        path = root / folder / "split" / split / f"{name}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(content, path)


def _pairs(gen, num_nodes, count):
    """``count`` distinct pairs of distinct nodes, each once in either direction."""
    seen, out = set(), []
    while len(out) < count:
        u, v = torch.randint(0, num_nodes, (2,), generator=gen).tolist()
        if u != v and (u, v) not in seen and (v, u) not in seen:
            seen.add((u, v))
            out.append([u, v])
    return torch.tensor(out)


def random_collab(root, num_nodes=80, edges=240, held=(30, 30), negatives=100, seed=0):
    """An ogbl-collab of ``num_nodes`` authors with 4 random features each:
    the graph's stored edges are the training split (OGB's collab adds their
    reverses), ``held`` more pairs are validation and test positives, each
    split with ``negatives`` random pairs (more than Hits@50's 50)."""
    gen = torch.Generator().manual_seed(seed)
    pairs = _pairs(gen, num_nodes, edges + sum(held))
    train, val, test = pairs[:edges], pairs[edges:edges + held[0]], pairs[edges + held[0]:]
    neg = [torch.randint(0, num_nodes, (negatives, 2), generator=gen) for _ in range(2)]
    x = torch.randn(num_nodes, 4, generator=gen).numpy().round(4)
    write_ogbl(root, "ogbl_collab", "time", num_nodes, train.tolist(), x,
               {"train": {"edge": train}, "valid": {"edge": val, "edge_neg": neg[0]},
                "test": {"edge": test, "edge_neg": neg[1]}})


def random_citation2(root, num_nodes=60, edges=180, held=(20, 20), per_source=6, seed=0):
    """An ogbl-citation2 of ``num_nodes`` papers (directed citations, 4
    random features): validation and test hold ``held`` citations, each
    with ``per_source`` negative targets of its own (``target_node_neg``)."""
    gen = torch.Generator().manual_seed(seed)
    pairs = _pairs(gen, num_nodes, edges + sum(held))
    train = pairs[:edges]
    x = torch.randn(num_nodes, 4, generator=gen).numpy().round(4)

    def held_out(part):
        return {"source_node": part[:, 0], "target_node": part[:, 1],
                "target_node_neg": torch.randint(0, num_nodes, (len(part), per_source),
                                                 generator=gen)}

    write_ogbl(root, "ogbl_citation2", "time", num_nodes, train.tolist(), x,
               {"train": {"source_node": train[:, 0], "target_node": train[:, 1]},
                "valid": held_out(pairs[edges:edges + held[0]]),
                "test": held_out(pairs[edges + held[0]:])})
