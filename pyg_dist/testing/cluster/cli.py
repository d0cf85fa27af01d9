"""``python -m pyg_dist.testing.cluster``: a command run on every host of a testbed."""
from __future__ import annotations

import argparse
import signal
import sys

from pyg_dist.testing.cluster.netns import cleanup_stale
from pyg_dist.testing.cluster.testbed import Cluster

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pyg_dist.testing.cluster",
        description="Run a command on every host of a testbed of network namespaces.",
        epilog="Placeholders in COMMAND: {host} {index} {node_rank} {addr} {workdir} {nnodes} "
               "{master_addr} {python} {iface}.",
    )
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--rate", default=None, help="link rate, e.g. 1gbit (default: unshaped)")
    parser.add_argument("--delay", default=None, help="one-way delay per link, e.g. 1ms (netem)")
    parser.add_argument("--loss", default=None, help="loss per link direction, e.g. 1%% (netem)")
    parser.add_argument("--memory", default=None,
                        help="memory cap of each host, e.g. 2G (default: uncapped)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds after which every host's command is stopped")
    parser.add_argument("--workdir", default=None,
                        help="folder holding host<i>/, each host's working folder (kept)")
    parser.add_argument("--torchrun", type=int, default=0, metavar="K",
                        help="prefix COMMAND with torchrun for K ranks per host")
    parser.add_argument("--distribute", default=None, metavar="PARTS",
                        help="copy meta.json and each host's own parts of this partition "
                             "folder to <workdir>/host<i>/parts (K ranks per host, K from "
                             "--torchrun, else 1)")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--cleanup", action="store_true",
                        help="only remove testbeds left behind by killed runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cleanup:
        for name in cleanup_stale():
            print(f"removed {name}")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the command to run after --")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    with Cluster(args.hosts, args.rate, args.delay, args.loss, args.workdir,
                 args.memory) as cluster:
        if args.distribute:
            cluster.distribute(args.distribute, max(args.torchrun, 1))
        if args.torchrun:
            command = cluster.torchrun(command, args.torchrun, args.master_port,
                                       args.max_restarts)
        results = cluster.run(command, timeout=args.timeout)
    for result in results:
        status = "timed out" if result.timed_out else f"exit {result.returncode}"
        if result.memory_peak is not None:
            status += f", peak memory {result.memory_peak / 2**20:.0f} MiB"
        if result.oom_kills:
            status += f", {result.oom_kills} killed for going over the memory cap"
        print(f"== {result.host.name} ({result.host.address}): {status} after "
              f"{result.seconds:.1f} s ==", flush=True)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
    failed = [r for r in results if not r.ok]
    if not failed:
        return 0
    return 124 if failed[0].timed_out else int(failed[0].returncode or 1)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
