"""Reading back the entries a flannel datapath owns (raw netlink dumps, see `decoder`).

Ownership is what any flannel-style agent would have written, so that entries left behind by
an earlier run (or by Go flanneld) are found too (flannel issue #2554):

* routes in the main table that are not the kernel's own and either leave through a flannel
  device, or are protocol-boot gateway routes into the cluster network (host-gw,
  DirectRouting);
* permanent neighbours on a flannel device;
* permanent `self` FDB entries with a remote (NDA_DST) on a flannel device.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from pyflannel_runtime.netlink.batch import SOL_NETLINK, open_route_socket
from pyflannel_runtime.netlink.decoder import (
    NETLINK_GET_STRICT_CHK,
    RTM_F_CLONED,
    RTM_NEWNEIGH,
    RTM_NEWROUTE,
    NeighRecord,
    RouteRecord,
    decode_neigh,
    decode_route,
    neigh_dump_request,
    network,
    parse_dump,
    route_dump_request,
)
from pyflannel_runtime.netlink.encoder import (
    AF_BRIDGE,
    NTF_SELF,
    NUD_PERMANENT,
    RT_TABLE_MAIN,
    RTN_UNICAST,
    RTNH_F_ONLINK,
    RTPROT_BOOT,
)
from pyflannel_runtime.netlink.entries import (
    DatapathState,
    Fdb,
    Held,
    IPNetwork,
    Neigh,
    Route,
    as_decoded,
)

if TYPE_CHECKING:
    from pyroute2 import IPRoute

RTPROT_KERNEL = 2
# A dump the kernel flags as interrupted (the table changed under it) is taken again; only
# constant churn on the same table exhausts this.
_DUMP_ATTEMPTS = 5
_RECV_SIZE = 1 << 16

R = TypeVar("R")
_seq = itertools.count(1)


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


# --- dumping ----------------------------------------------------------------------------------


def open_dump_socket(netns: str | None = None) -> socket.socket:
    """A NETLINK_ROUTE socket in the namespace with strict checking on, as the dump requests
    expect (the kernel then filters by table and device)."""
    sock = open_route_socket(netns)
    sock.setsockopt(SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1)
    return sock


def dump(
    sock: socket.socket,
    request: Callable[[int], bytes],
    reply_type: int,
    decode: Callable[[bytes, int, int], R],
) -> list[R]:
    """Send the dump request built for a fresh sequence number and decode its replies.

    A table the kernel does not have (ENOENT) dumps as empty; other errors raise OSError.
    """
    for _ in range(_DUMP_ATTEMPTS):
        seq = next(_seq) & 0xFFFFFFFF or next(_seq)
        sock.send(request(seq))
        records: list[R] = []
        interrupted = False
        while True:
            progress = parse_dump(sock.recv(_RECV_SIZE), seq, reply_type, decode, records)
            interrupted = interrupted or progress.interrupted
            if progress.done:
                break
        if progress.errno == errno.ENOENT:
            return []
        if progress.errno:
            raise OSError(progress.errno, f"netlink dump: {os.strerror(progress.errno)}")
        if not interrupted:
            return records
    raise OSError(errno.EINTR, "netlink dump kept being interrupted by changes")


def dump_routes(sock: socket.socket, family: int) -> list[RouteRecord]:
    """Unicast routes of the main table."""

    def request(seq: int) -> bytes:
        return route_dump_request(family, seq, RT_TABLE_MAIN, RTN_UNICAST)

    return dump(sock, request, RTM_NEWROUTE, decode_route)


def dump_neighbours(sock: socket.socket, family: int, ifindex: int) -> list[NeighRecord]:
    """Neighbours (or, for AF_BRIDGE, FDB entries) of one device."""

    def request(seq: int) -> bytes:
        return neigh_dump_request(family, seq, ifindex)

    return dump(sock, request, RTM_NEWNEIGH, decode_neigh)


# --- ownership --------------------------------------------------------------------------------


def main_route_key(record: RouteRecord) -> tuple[IPNetwork, int] | None:
    """The key (`Route.key`) of a main-table route of any type, a blackhole or unreachable one
    too: what takes a flannel route's place in the kernel, or gives it back."""
    if record.table != RT_TABLE_MAIN or record.flags & RTM_F_CLONED:
        return None
    return (network(record.family, record.dst, record.dst_len), record.priority or 0)


def route_facts(record: RouteRecord) -> RouteFacts | None:
    """None for what can never be a flannel route: multipath, blackhole and friends (no
    output device), and cached exceptions."""
    if record.oif is None or record.multipath or record.flags & RTM_F_CLONED:
        return None
    route = Route(
        dst=network(record.family, record.dst, record.dst_len),
        gateway=record.gateway,
        oif=record.oif,
        onlink=bool(record.flags & RTNH_F_ONLINK),
        priority=record.priority or 0,
    )
    return RouteFacts(route, record.table, record.protocol, record.kind)


def owned_routes(
    sock: socket.socket, ownership: Ownership, held: Held = as_decoded
) -> frozenset[Route]:
    found = set()
    for family in _families(ownership):
        for record in dump_routes(sock, family):
            facts = route_facts(record)
            if facts is not None and owns_route(facts, ownership):
                found.add(held(facts.route))
    return frozenset(found)


def owned_neighbours(
    sock: socket.socket, ownership: Ownership, held: Held = as_decoded
) -> frozenset[Neigh]:
    found = set()
    for family in _families(ownership):
        for device in sorted(ownership.devices):
            for record in dump_neighbours(sock, family, device):
                if (
                    record.ifindex in ownership.devices
                    and record.state & NUD_PERMANENT
                    and record.lladdr is not None
                    and record.dst is not None
                ):
                    found.add(held(Neigh(record.ifindex, record.dst, record.lladdr)))
    return frozenset(found)


def owned_fdb(sock: socket.socket, ownership: Ownership, held: Held = as_decoded) -> frozenset[Fdb]:
    found = set()
    for device in sorted(ownership.devices):
        for record in dump_neighbours(sock, AF_BRIDGE, device):
            if (
                record.ifindex in ownership.devices
                and record.flags & NTF_SELF
                and record.state & NUD_PERMANENT
                and record.dst is not None
                and record.lladdr is not None
            ):
                found.add(held(Fdb(record.ifindex, record.lladdr, record.dst)))
    return frozenset(found)


def read_owned_state(
    sock: socket.socket, ownership: Ownership, held: Held = as_decoded
) -> DatapathState:
    """The owned entries, dumped over a socket from `open_dump_socket`; each one equal to an
    entry of `held`'s is that entry."""
    return DatapathState(
        routes=owned_routes(sock, ownership, held),
        neighs=owned_neighbours(sock, ownership, held),
        fdbs=owned_fdb(sock, ownership, held),
    )


def owned_state(ipr: IPRoute, ownership: Ownership, held: Held = as_decoded) -> DatapathState:
    """The owned entries in the namespace of a handle from `netns.iproute` (dumped over a
    socket of our own: decoding with pyroute2 is what made reconciles slow)."""
    return owned_state_in(ipr.status.get("netns"), ownership, held)


def owned_state_in(
    netns: str | None, ownership: Ownership, held: Held = as_decoded
) -> DatapathState:
    """`owned_state` in the named namespace, over a socket used for this dump alone."""
    return _read_in(netns, lambda sock: read_owned_state(sock, ownership, held))


def owned_kernel_routes(ipr: IPRoute, ownership: Ownership) -> frozenset[Route]:
    """The owned routes alone, as `owned_state` reads them: deciding whether a route may be
    replaced needs no neighbour or FDB dump."""
    return _read_in(ipr.status.get("netns"), lambda sock: owned_routes(sock, ownership))


def _read_in(netns: str | None, read: Callable[[socket.socket], R]) -> R:
    sock = open_dump_socket(netns)
    try:
        return read(sock)
    finally:
        sock.close()


def _families(ownership: Ownership) -> Iterable[int]:
    versions = {net.version for net in ownership.networks}
    return [socket.AF_INET if v == 4 else socket.AF_INET6 for v in sorted(versions)]
