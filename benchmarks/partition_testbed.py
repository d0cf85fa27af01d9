"""Hosts with capped memory: one host cannot partition a graph that four
hosts partition together.

    sudo python benchmarks/partition_testbed.py [--num-nodes 2000000] [--avg-degree 16]
        [--hosts 4] [--memory 1400M] [--graph-dir DIR] [--out DIR] [--json out.json]

Writes a seeded community graph as a graph folder (or reuses ``--graph-dir``),
then on a testbed of hosts in network namespaces (``pyg_dist.testing.cluster``),
each capped at ``--memory`` (all its processes, page cache included, in a
cgroup of its own; the kernel kills what goes over):

* ``one host``: the single-process ``partition(method="metis-coarse")`` of
  the whole graph (``benchmarks/partition_distributed.py --single``);
* ``H hosts``: ``torchrun`` on every host, one rank each, running
  ``pyg-dist partition --distributed --input GRAPH --parts H``; the folder it
  writes is then checked (every node owned once, every edge stored once).

Prints per run: exit status, kills for memory, each host's peak memory
(the cgroup's high-water mark) and the wall time; ``--json`` also writes them
and the cap to a file. Needs root, iproute2 and a
cgroup memory controller; says what is missing otherwise.
Not a test: numbers depend on the machine.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from partition_distributed import write_graph

from pyg_dist.datasets import GraphFolder
from pyg_dist.partitioning import read_meta, read_part
from pyg_dist.testing.cluster import Cluster, memory_cap_reason, parse_bytes, unavailable_reason

HERE = Path(__file__).resolve().parent


def check_folder(folder, graph):
    """Every node owned once and every edge stored once, read part by part."""
    meta = read_meta(folder)
    owned = torch.zeros(graph.num_nodes, dtype=torch.int8)
    stored = torch.zeros(graph.num_edges, dtype=torch.int8)
    for p in range(meta.num_parts):
        g = read_part(folder, p, meta)["graph"]
        owned[g["global_id"]] += 1
        stored[g["edge_id"]] += 1
    assert bool((owned == 1).all()), "a node is not owned exactly once"
    assert bool((stored == 1).all()), "an edge is not stored exactly once"
    return meta


def report(name, results, cap):
    for r in results:
        peak = "?" if r.memory_peak is None else f"{r.memory_peak / 2**30:.2f}"
        status = "timed out" if r.timed_out else f"exit {r.returncode}"
        print(f"{name:>10} {r.host.name:>6} {status:>10} {r.oom_kills:>10} {peak:>9} "
              f"{cap / 2**30:>8.2f} {r.seconds:>8.1f}", flush=True)
        if not r.ok and not r.oom_kills:
            print(r.describe())


def record(name, results) -> dict:
    """A run's hosts as JSON: exit status, kills, peak memory, seconds."""
    return {"run": name, "hosts": [
        {"host": r.host.name, "returncode": r.returncode, "timed_out": r.timed_out,
         "oom_kills": r.oom_kills, "memory_peak": r.memory_peak, "seconds": r.seconds}
        for r in results]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-nodes", type=int, default=2_000_000)
    parser.add_argument("--avg-degree", type=float, default=16.0)
    parser.add_argument("--num-features", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--memory", default="1400M", help="memory cap of every host")
    parser.add_argument("--graph-dir", default=None, help="reuse this graph folder")
    parser.add_argument("--out", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--json", help="also write the runs and the cap to this file")
    args = parser.parse_args()
    reason = unavailable_reason() or memory_cap_reason()
    if reason:
        raise SystemExit(f"this machine cannot run capped hosts: {reason}")
    cap = parse_bytes(args.memory)

    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        graph_dir = Path(args.graph_dir or Path(tmp) / "graph")
        if not (graph_dir / "graph.json").exists():
            write_graph(args, graph_dir)
        graph = GraphFolder.open(graph_dir)
        print(f"{graph.num_nodes} nodes, {graph.num_edges} edges; every host capped at "
              f"{cap / 2**30:.2f} GiB", flush=True)
        print(f"{'run':>10} {'host':>6} {'status':>10} {'oom kills':>10} {'peak GiB':>9} "
              f"{'cap GiB':>8} {'wall s':>8}")
        with Cluster(hosts=1, memory=cap) as one:
            single = one.run([sys.executable, str(HERE / "partition_distributed.py"),
                              "--single", "metis-coarse", "--graph-dir", str(graph_dir),
                              "--out", str(Path(tmp) / "single"), "--parts", str(args.hosts)],
                             timeout=args.timeout)
        report("one host", single, cap)
        out = Path(tmp) / "parts"
        with Cluster(hosts=args.hosts, memory=cap) as cluster:
            command = cluster.torchrun(["-m", "pyg_dist.cli", "partition", "--distributed",
                                        "--input", str(graph_dir), "--parts", str(args.hosts),
                                        "--out", str(out)])
            results = cluster.run(command, timeout=args.timeout)
        report(f"{args.hosts} hosts", results, cap)
        if all(r.ok for r in results):
            meta = check_folder(out, graph)
            print(f"{args.hosts} hosts: folder checked (every node owned once, every edge "
                  f"stored once); edge cut {meta.edge_cut}, part sizes {meta.part_sizes}")
        if args.json:
            Path(args.json).write_text(json.dumps(
                {"num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "cap": cap,
                 "runs": [record("one host", single), record(f"{args.hosts} hosts", results)],
                 "edge_cut": meta.edge_cut if all(r.ok for r in results) else None},
                indent=1))
        one_fit = single[0].ok
        print(f"verdict: one host {'fits' if one_fit else 'cannot partition the graph'} "
              f"under {cap / 2**30:.2f} GiB; {args.hosts} hosts "
              f"{'partition it' if all(r.ok for r in results) else 'fail too'}")


if __name__ == "__main__":
    main()
