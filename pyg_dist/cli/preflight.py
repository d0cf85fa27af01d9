"""Checks one machine of a multi-host job before ``torchrun`` starts
(``pyg-dist check``): what ``torchrun`` would otherwise report late, or not at
all, as a hang or a bare socket error.

Each check returns a :class:`Check`; a failed one names the fix. Run on every
machine with the flags its ``torchrun`` gets::

    pyg-dist check --nnodes 2 --node-rank 1 --nproc-per-node 2 \\
        --master-addr 10.0.0.1 --master-port 29500 --parts-dir parts
"""
from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from pyg_dist.partitioning.io import read_meta, read_part
from pyg_dist.runtime.peers import interface_address, package_versions

__all__ = ["Check", "check_host", "check_interface", "check_master", "check_parts",
           "interfaces", "CONNECT_TIMEOUT"]

#: Seconds a machine waits for node 0's address to answer.
CONNECT_TIMEOUT = 3.0


@dataclass
class Check:
    """One check's outcome: ``ok``, and what was found or what to do.

    Args:
        name (str): What was checked (``"interface"``, ``"parts"``, ...).
        ok (bool): Whether the check passed.
        message (str): What was found, or, on failure, what to do.
    """

    name: str
    ok: bool
    message: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.message}"


def check_host(nnodes: int, node_rank: int, nproc_per_node: int, master_addr: str,
               master_port: int, parts_dir: str | os.PathLike | None = None) -> list[Check]:
    """Every check for the machine that runs node ``node_rank``.

    Args:
        nnodes (int): Number of machines (``torchrun --nnodes``).
        node_rank (int): This machine's index, from :obj:`0`
            (``torchrun --node-rank``).
        nproc_per_node (int): Ranks per machine (``torchrun --nproc-per-node``).
        master_addr (str): Node 0's address (``torchrun --master-addr``).
        master_port (int): The rendezvous port on node 0 (``torchrun --master-port``).
        parts_dir (str or os.PathLike, optional): The partition folder to
            check (:func:`check_parts`); :obj:`None` skips it. (default: :obj:`None`)
    """
    checks = [check_interface(nnodes), *check_master(node_rank, master_addr, master_port)]
    if parts_dir is not None:
        checks.append(check_parts(parts_dir, nnodes, node_rank, nproc_per_node))
    versions = ", ".join(f"{k} {v}" for k, v in package_versions().items())
    checks.append(Check("versions", True, f"{versions} (must be the same on every machine)"))
    return checks


def interfaces() -> dict[str, str]:
    """This machine's network interfaces with an IPv4 address: name -> address."""
    found = {}
    for _, name in socket.if_nameindex():
        try:
            found[name] = interface_address(name)
        except OSError:
            continue
    return found


def check_interface(nnodes: int) -> Check:
    """The interface gloo (``GLOO_SOCKET_IFNAME``) and NCCL
    (``NCCL_SOCKET_IFNAME``) listen on must exist; without the variables,
    gloo listens on the address the host name resolves to, which must not be
    a loopback address when other machines take part.

    Args:
        nnodes (int): Number of machines (``torchrun --nnodes``).
    """
    known = interfaces()
    listing = ", ".join(f"{n} {a}" for n, a in known.items()) or "none"
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = os.environ.get(var)
        if value and value.lstrip("^=") not in known and "," not in value:
            return Check("interface", False, f"{var}={value} but this machine has no interface "
                         f"{value} with an IPv4 address (it has: {listing}); set {var} to the "
                         f"interface on the network the machines share")
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        name = os.environ["GLOO_SOCKET_IFNAME"]
        return Check("interface", True, f"gloo uses {name} ({known.get(name, '?')})")
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        address = "nothing"
    if nnodes > 1 and (address == "nothing" or ipaddress.ip_address(address).is_loopback):
        return Check("interface", False, f"GLOO_SOCKET_IFNAME is unset and this machine's name "
                     f"'{host}' resolves to {address}, so gloo would listen where no other "
                     f"machine can connect; set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME "
                     f"on GPUs) to the shared network's interface (here: {listing})")
    return Check("interface", True, f"GLOO_SOCKET_IFNAME is unset; gloo uses {address}, what "
                 f"'{host}' resolves to")


def check_master(node_rank: int, master_addr: str, master_port: int) -> list[Check]:
    """Node 0 must own ``master_addr`` and have ``master_port`` free (its
    torchrun listens there); every other node must reach ``master_addr``.

    Args:
        node_rank (int): This machine's index, from :obj:`0`
            (``torchrun --node-rank``).
        master_addr (str): Node 0's address (``torchrun --master-addr``).
        master_port (int): The rendezvous port on node 0 (``torchrun --master-port``).
    """
    try:
        address = socket.gethostbyname(master_addr)
    except OSError:
        return [Check("master address", False, f"--master-addr {master_addr} does not resolve "
                      f"on this machine; pass node 0's IP address")]
    local = _is_local(address)
    if node_rank == 0:
        if not local:
            return [Check("master address", False, f"--master-addr {master_addr} ({address}) is "
                          f"not an address of this machine, but node 0 hosts the rendezvous; "
                          f"run node 0 on {master_addr}, or pass one of this machine's "
                          f"addresses ({', '.join(interfaces().values())})")]
        return [Check("master address", True, f"{master_addr} is this machine"),
                _check_port_free(address, master_port)]
    if local:
        return [Check("master address", False, f"--master-addr {master_addr} is this machine's "
                      f"own address, but this is node {node_rank}; pass node 0's address")]
    return [_check_reachable(address, master_addr, master_port)]


def _is_local(address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
            return True
        except OSError:
            return False


def _check_port_free(address: str, port: int) -> Check:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return Check("master port", False, f"port {port} is in use on this machine (another "
                         f"job, or torchrun of an earlier run still alive); pass a free port, "
                         f"e.g. --master-port {_free_port(address)}, the same on every machine")
    return Check("master port", True, f"port {port} is free")


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def _check_reachable(address: str, master_addr: str, port: int) -> Check:
    try:
        socket.create_connection((address, port), timeout=CONNECT_TIMEOUT).close()
        return Check("master address", True, f"{master_addr}:{port} answers (node 0 is up)")
    except ConnectionRefusedError:
        return Check("master address", True, f"{master_addr} is reachable; nothing listens on "
                     f"port {port} yet (start node 0's torchrun)")
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        return Check("master address", False, f"cannot reach --master-addr {master_addr} "
                     f"({reason} within {CONNECT_TIMEOUT:g} s); check the address (on node 0: "
                     f"ip -4 addr) and that port {port} is open between the machines")


def check_parts(parts_dir: str | os.PathLike, nnodes: int, node_rank: int,
                nproc_per_node: int) -> Check:
    """``parts_dir`` must hold ``meta.json`` for ``nnodes * nproc_per_node``
    parts and the intact part files of this node's ranks.

    Args:
        parts_dir (str or os.PathLike): The partition folder.
        nnodes (int): Number of machines (``torchrun --nnodes``).
        node_rank (int): This machine's index, from :obj:`0`
            (``torchrun --node-rank``).
        nproc_per_node (int): Ranks per machine (``torchrun --nproc-per-node``).
    """
    world = nnodes * nproc_per_node
    ranks = range(node_rank * nproc_per_node, (node_rank + 1) * nproc_per_node)
    try:
        meta = read_meta(parts_dir)
        if meta.num_parts != world:
            return Check("parts", False, f"'{parts_dir}' holds {meta.num_parts} parts but "
                         f"{nnodes} nodes x {nproc_per_node} ranks make {world}; partition with "
                         f"--parts {world}, or change --nnodes/--nproc-per-node")
        for r in ranks:
            read_part(parts_dir, r, meta)
    except (OSError, ValueError) as exc:
        return Check("parts", False, str(exc))
    files = ", ".join(f"part_{r}.pt" for r in ranks)
    return Check("parts", True, f"{Path(parts_dir) / 'meta.json'} and {files} are intact")
