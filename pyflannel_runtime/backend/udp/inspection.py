"""The udp datapath as a host shows it: flannel0, its route, and the forwarding workers serving
its queues, from the kernel and /proc (for verify and `pyflannel status`)."""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Sequence
from ipaddress import IPv4Network
from typing import Any

from pyflannel_runtime.backend.host import HostDatapath, link_names
from pyflannel_runtime.backend_spec.options import UdpOptions
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig

# The udp datapath's worker processes: `python -m <module> <role> ...`, one of each role per
# queue of flannel0 (`udp` starts them; their command line is how /proc tells them).
UDP_WORKER_MODULE = "pyflannel_runtime.backend.udp.worker"
UDP_WORKER_ROLES = ("send", "receive")
_IFF_UP = 0x1


def inspect_udp(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """flannel0 (the TUN device holding the lease's address/32): up, its MTU, the route for
    the whole network through it, and the forwarding workers serving each of its queues.

    udp programs no kernel entry per peer: each peer is a route in the workers' own table,
    which only the agent can tell (`HostDatapath.forwarder`)."""
    opts = UdpOptions.of(config)
    names = link_names(ipr)
    assert own.subnet is not None and config.network is not None  # udp is IPv4 only
    address = own.subnet.network_address
    network = IPv4Network((address, config.network.prefixlen), strict=False)
    holders = [a for a in ipr.get_addr(family=socket.AF_INET, address=str(address))
               if a["prefixlen"] == 32]  # fmt: skip
    if not holders:
        names[-1] = "flannel0"
        return HostDatapath(
            backend_type="udp",
            networks=config.enabled_networks,
            names=names,
            problems=(f"no device holds {address}/32: flannel0 does not exist",),
        )
    index = holders[0]["index"]
    name = names[index]
    (link,) = ipr.get_links(index)
    problems: list[str] = []
    checked: list[str] = []
    if link["flags"] & _IFF_UP:
        checked.append(f"{name} is up with {address}/32")
    else:
        problems.append(f"{name} is down")
    # A dump of the main table, filtered here: pyroute2 turns a `dst` filter into a route
    # lookup, which for the network's first subnet (its address is the network's own, as on a
    # node whose podCIDR is 10.244.0.0/24) answers with the local route through lo.
    route = f"route {network} dev {name}"
    if any(
        r["dst_len"] == network.prefixlen
        and r.get_attr("RTA_DST") == str(network.network_address)
        and r.get_attr("RTA_OIF") == index
        for r in ipr.get_routes(family=socket.AF_INET, table=254)
    ):
        checked.append(route)
    else:
        problems.append(f"{route} is missing")
    queues = _tun_queues(link)
    found = forwarding_workers(opts.port)
    if found is None:
        problems.append("the udp forwarding workers were not checked: seeing them takes root")
    else:
        alive = ", ".join(f"{found[role]} {role}" for role in UDP_WORKER_ROLES)
        wanted = f" for {queues} queue{'s' * (queues != 1)}" if queues is not None else ""
        short = [role for role in UDP_WORKER_ROLES if found[role] < (queues or 1)]
        text = f"udp forwarding workers alive: {alive}{wanted}"
        (problems if short else checked).append(text)
    return HostDatapath(
        backend_type="udp",
        networks=config.enabled_networks,
        names=names,
        problems=tuple(problems),
        mtu_devices=frozenset({index}),
        checked=tuple(checked),
    )


def _tun_queues(link: Any) -> int | None:
    """The queues attached to a TUN device (the agent holds one per worker pair)."""
    info = link.get_attr("IFLA_LINKINFO")
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    queues = data.get_attr("IFLA_TUN_NUM_QUEUES") if data is not None else None
    return queues if isinstance(queues, int) else None


def forwarding_workers(port: int) -> Counter[str] | None:
    """How many udp worker processes of each role serve this network namespace: those
    holding one of its UDP sockets on the backend's port. From /proc, not from the agent,
    so a dead or stuck agent cannot vouch for them; None when /proc does not let us see other
    processes' file descriptors (not root)."""
    sockets = _udp_socket_inodes(port)
    found: Counter[str] = Counter({role: 0 for role in UDP_WORKER_ROLES})
    for pid in (entry for entry in os.listdir("/proc") if entry.isdigit()):
        role = _worker_role(pid)
        if role is None:
            continue
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except PermissionError:
            return None
        except OSError:  # gone meanwhile
            continue
        if links & sockets:
            found[role] += 1
    return found


def _worker_role(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read(4096).split(b"\0")
    except OSError:
        return None
    module = UDP_WORKER_MODULE.encode()
    if module not in argv or argv.index(module) + 1 >= len(argv):
        return None
    role = argv[argv.index(module) + 1].decode(errors="replace")
    return role if role in UDP_WORKER_ROLES else None


def _udp_socket_inodes(port: int) -> set[str]:
    """``socket:[inode]`` of the IPv4 UDP sockets bound to `port` in this thread's network
    namespace."""
    found = set()
    with open("/proc/thread-self/net/udp", encoding="ascii") as handle:
        next(handle)  # the header
        for line in handle:
            fields = line.split()
            local_port = int(fields[1].rpartition(":")[2], 16)
            if local_port == port:
                found.add(f"socket:[{fields[9]}]")
    return found
