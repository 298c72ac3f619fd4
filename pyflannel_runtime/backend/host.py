"""What a host's datapath programs peers with, read from its kernel without changing it.

`HostDatapath` holds the devices and lookups `backend.peers` needs to compute a peer's entries
the way the running agent does; the inspectors fill it in for one backend each. They take an
open pyroute2 handle (from `netlink.netns.iproute`), so this module imports no pyroute2 itself.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from typing import Any

from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend_spec.options import UdpOptions, VxlanOptions
from pyflannel_runtime.netlink.entries import IPAddress, IPNetwork
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig


@dataclass(frozen=True)
class HostDatapath:
    """What this host's backend programs a peer with, as far as its kernel tells.

    A device the backend needs but the kernel lacks gets a negative index, which no kernel
    entry has: every entry on it then shows as missing, which is what the host lacks.
    """

    backend_type: str
    devices: VxlanDevices = field(default_factory=lambda: VxlanDevices(None, None))
    direct_oifs: Mapping[IPAddress, int] = field(default_factory=dict)
    ext_index: int = -1
    ipv4: bool = True
    ipv6: bool = False
    ownership_devices: frozenset[int] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    names: Mapping[int, str] = field(default_factory=dict)  # ifindex -> device name
    problems: tuple[str, ...] = ()
    # Devices whose MTU is checked although the datapath owns no entries on them (flannel0).
    mtu_devices: frozenset[int] = frozenset()
    checked: tuple[str, ...] = ()  # what was found right, beyond the entries (for the report)
    # A userspace forwarder's routes, peer subnet -> public IP, as the agent publishes them
    # (the udp backend's); None: not published, so the peers cannot be checked.
    forwarder: Mapping[IPNetwork, IPAddress] | None = None


def direct_oif(ipr: Any, ip: IPAddress) -> int | None:
    """DirectRouting applies when `ip route get <ip>` gives exactly one route, gateway-less."""
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        routes = ipr.route("get", dst=str(ip))
    except NetlinkError:
        return None
    if len(routes) != 1 or routes[0].get("gateway") is not None:
        return None
    oif = routes[0].get("oif")
    return oif if isinstance(oif, int) else None


def link_names(ipr: Any) -> dict[int, str]:
    """ifindex -> name of every link."""
    return {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}


def inspect_vxlan(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """flannel.<VNI> and flannel-v6.<VNI>, and with DirectRouting which peers are direct."""
    opts = VxlanOptions.of(config)
    names = link_names(ipr)
    by_name = {name: index for index, name in names.items()}
    problems = []
    indexes: dict[int, int | None] = {}
    for version, enabled, name, absent in (
        (4, config.enable_ipv4, f"flannel.{opts.vni}", -1),
        (6, config.enable_ipv6, f"flannel-v6.{opts.vni}", -2),
    ):
        if not enabled:
            indexes[version] = None
            continue
        index = by_name.get(name)
        if index is None:
            problems.append(f"device {name} does not exist")
            names[absent] = name
        indexes[version] = index if index is not None else absent
    return HostDatapath(
        backend_type="vxlan",
        devices=VxlanDevices(indexes[4], indexes[6]),
        direct_oifs=_direct_oifs(ipr, config, leases) if opts.direct_routing else {},
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        ownership_devices=frozenset(i for i in indexes.values() if i is not None and i > 0),
        networks=config.enabled_networks,
        names=names,
        problems=tuple(problems),
    )


def _direct_oifs(ipr: Any, config: NetworkConfig, leases: Sequence[Lease]) -> dict[IPAddress, int]:
    """The route lookup the agent's DirectRouting makes for each peer's public IPs."""
    ips: set[IPAddress | None] = set()
    for lease in leases:
        ips.add(lease.attrs.public_ip if config.enable_ipv4 else None)
        ips.add(lease.attrs.public_ipv6 if config.enable_ipv6 else None)
    found = {ip: direct_oif(ipr, ip) for ip in ips if ip is not None}
    return {ip: oif for ip, oif in found.items() if oif is not None}


def inspect_hostgw(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """The interface holding the own lease's public IP: host-gw's routes leave through it."""
    names = link_names(ipr)
    public = own.attrs.public_ip if config.enable_ipv4 else own.attrs.public_ipv6
    ext_index = -1
    problems = []
    found = ipr.get_addr(address=str(public)) if public is not None else []
    if found:
        ext_index = found[0]["index"]
    else:
        problems.append(f"no interface holds the public IP {public} of this host's lease")
        names[-1] = f"<interface of {public}>"
    return HostDatapath(
        backend_type=config.backend_type,
        ext_index=ext_index,
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        networks=config.enabled_networks,
        names=names,
        problems=tuple(problems),
    )


# --- udp --------------------------------------------------------------------------------------

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
