"""Reading back the entries a flannel datapath owns (pyroute2 dumps; the cold path).

Ownership is what any flannel-style agent would have written, so that entries left behind by
an earlier run (or by Go flanneld) are found too (flannel issue #2554):

* routes in the main table that are not the kernel's own and either leave through a flannel
  device, or are protocol-boot gateway routes into the cluster network (host-gw,
  DirectRouting);
* permanent neighbours on a flannel device;
* permanent `self` FDB entries with a remote (NDA_DST) on a flannel device.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from typing import Any

from pyroute2 import IPRoute

from pyflannel_runtime.netlink.encoder import (
    AF_BRIDGE,
    NTF_SELF,
    NUD_PERMANENT,
    RT_TABLE_MAIN,
    RTN_UNICAST,
    RTNH_F_ONLINK,
    RTPROT_BOOT,
)
from pyflannel_runtime.netlink.entries import DatapathState, Fdb, IPNetwork, Neigh, Route

RTPROT_KERNEL = 2


@dataclass(frozen=True)
class Ownership:
    devices: frozenset[int] = frozenset()  # flannel.<VNI>, flannel-v6.<VNI>
    networks: tuple[IPNetwork, ...] = ()  # the cluster Network / IPv6Network


@dataclass(frozen=True)
class RouteFacts:
    """The parts of a dumped route that decide ownership, next to the route itself."""

    route: Route
    table: int
    protocol: int
    kind: int


def owns_route(facts: RouteFacts, ownership: Ownership) -> bool:
    if facts.table != RT_TABLE_MAIN or facts.kind != RTN_UNICAST:
        return False
    if facts.protocol == RTPROT_KERNEL:
        return False
    route = facts.route
    if route.oif in ownership.devices:
        return True
    return (
        facts.protocol == RTPROT_BOOT
        and route.gateway is not None
        and any(
            route.dst.version == net.version and route.dst.subnet_of(net)  # type: ignore[arg-type]
            for net in ownership.networks
        )
    )


def _route_facts(msg: Any) -> RouteFacts | None:
    oif = msg.get("oif")
    if oif is None:  # multipath or blackhole: never a flannel route
        return None
    family = msg["family"]
    default = "0.0.0.0" if family == socket.AF_INET else "::"
    dst = ip_network(f"{msg.get('dst') or default}/{msg['dst_len']}")
    gateway = msg.get("gateway")
    route = Route(
        dst=dst,
        gateway=ip_address(gateway) if gateway is not None else None,
        oif=oif,
        onlink=bool(msg["flags"] & RTNH_F_ONLINK),
        priority=msg.get("priority") or 0,
    )
    return RouteFacts(route, msg.get("table"), msg["proto"], msg["type"])


def owned_routes(ipr: IPRoute, ownership: Ownership) -> frozenset[Route]:
    found = set()
    for family in _families(ownership):
        for msg in ipr.get_routes(family=family, table=RT_TABLE_MAIN):
            facts = _route_facts(msg)
            if facts is not None and owns_route(facts, ownership):
                found.add(facts.route)
    return frozenset(found)


def owned_neighbours(ipr: IPRoute, ownership: Ownership) -> frozenset[Neigh]:
    found = set()
    for family in _families(ownership):
        for msg in ipr.get_neighbours(family=family):
            lladdr = msg.get("lladdr")
            if (
                msg["ifindex"] in ownership.devices
                and msg["state"] & NUD_PERMANENT
                and lladdr is not None
            ):
                found.add(Neigh(msg["ifindex"], ip_address(msg.get("dst")), lladdr.lower()))
    return frozenset(found)


def owned_fdb(ipr: IPRoute, ownership: Ownership) -> frozenset[Fdb]:
    if not ownership.devices:
        return frozenset()
    found = set()
    for msg in ipr.get_neighbours(family=AF_BRIDGE):
        dst = msg.get("dst")
        if (
            msg["ifindex"] in ownership.devices
            and msg["flags"] & NTF_SELF
            and msg["state"] & NUD_PERMANENT
            and dst is not None
        ):
            found.add(Fdb(msg["ifindex"], msg.get("lladdr").lower(), ip_address(dst)))
    return frozenset(found)


def owned_state(ipr: IPRoute, ownership: Ownership) -> DatapathState:
    return DatapathState(
        routes=owned_routes(ipr, ownership),
        neighs=owned_neighbours(ipr, ownership) if ownership.devices else frozenset(),
        fdbs=owned_fdb(ipr, ownership),
    )


def _families(ownership: Ownership) -> Iterable[int]:
    versions = {net.version for net in ownership.networks}
    return [socket.AF_INET if v == 4 else socket.AF_INET6 for v in sorted(versions)]
