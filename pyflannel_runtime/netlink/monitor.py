"""Kernel change notifications (rtnetlink multicast) on a raw socket the asyncio loop polls:
links (RTNLGRP_LINK), routes (RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE), neighbours and FDB
entries (RTNLGRP_NEIGH carries both), and addresses (RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR:
only which link's changed)."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyflannel_runtime.netlink.decoder import NeighRecord, RouteRecord, decode_neigh, decode_route
from pyflannel_runtime.netlink.netns import run_in_netns

NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTMGRP_NEIGH = 0x4
RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV4_ROUTE = 0x40
RTMGRP_IPV6_IFADDR = 0x100
RTMGRP_IPV6_ROUTE = 0x400
# The same groups by number, as NETLINK_ADD_MEMBERSHIP and NETLINK_DROP_MEMBERSHIP name them
# (group n is bit n - 1 of the mask `bind` takes).
RTNLGRP_NEIGH = 3
RTNLGRP_IPV4_ROUTE = 7
RTNLGRP_IPV6_ROUTE = 11
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
NETLINK_DROP_MEMBERSHIP = 2
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_NEWROUTE = 24
RTM_DELROUTE = 25
RTM_NEWNEIGH = 28
RTM_DELNEIGH = 29
IFLA_IFNAME = 3
RT_SCOPE_LINK = 253
SO_RCVBUFFORCE = 33
# A full sync of 5 000 vxlan peers makes 15 000 notifications of ~100 bytes at once.
_BUFFER = 8 << 20

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
_NLATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class LinkEvent:
    deleted: bool
    index: int
    name: str


@dataclass(frozen=True)
class RouteEvent:
    deleted: bool
    route: RouteRecord


@dataclass(frozen=True)
class NeighEvent:
    """A neighbour, or (family AF_BRIDGE) an FDB entry."""

    deleted: bool
    neigh: NeighRecord


Event = LinkEvent | RouteEvent | NeighEvent


def parse_events(buf: bytes, skip_port: int = 0) -> Iterator[Event]:
    """The notifications in one datagram; those caused by the socket bound to `skip_port` (the
    kernel names the requester's port in them) are left out."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(buf):
        length, msg_type, _flags, _seq, port = _NLMSGHDR.unpack_from(buf, offset)
        end = offset + length
        if length < _NLMSGHDR.size or end > len(buf):
            break
        body = offset + _NLMSGHDR.size
        if skip_port and port == skip_port:
            pass
        elif msg_type in (RTM_NEWLINK, RTM_DELLINK):
            _family, _type, index, _iflags, _change = _IFINFOMSG.unpack_from(buf, body)
            name = _ifname(buf[body + _IFINFOMSG.size : end])
            yield LinkEvent(msg_type == RTM_DELLINK, index, name)
        elif msg_type in (RTM_NEWROUTE, RTM_DELROUTE):
            yield RouteEvent(msg_type == RTM_DELROUTE, decode_route(buf, body, end))
        elif msg_type in (RTM_NEWNEIGH, RTM_DELNEIGH):
            yield NeighEvent(msg_type == RTM_DELNEIGH, decode_neigh(buf, body, end))
        offset += (length + 3) & ~3


@dataclass(frozen=True)
class AddressChange:
    deleted: bool
    index: int  # the link's
    scope: int  # RT_SCOPE_*: 0 universe, 253 link, 254 host

    @property
    def routable(self) -> bool:
        """Not a link-local or host address: routes through other hosts may depend on it."""
        return self.scope < RT_SCOPE_LINK


def address_changes(buf: bytes) -> list[AddressChange]:
    """The address notifications in one datagram: which link's, added or deleted."""
    changes: list[AddressChange] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(buf):
        length, msg_type, _flags, _seq, _port = _NLMSGHDR.unpack_from(buf, offset)
        if length < _NLMSGHDR.size or offset + length > len(buf):
            break
        body = offset + _NLMSGHDR.size
        if msg_type in (RTM_NEWADDR, RTM_DELADDR) and body + _IFADDRMSG.size <= len(buf):
            _family, _prefixlen, _flags, scope, index = _IFADDRMSG.unpack_from(buf, body)
            changes.append(AddressChange(msg_type == RTM_DELADDR, index, scope))
        offset += (length + 3) & ~3
    return changes


def _ifname(attrs: bytes) -> str:
    offset = 0
    while offset + _NLATTR.size <= len(attrs):
        size, kind = _NLATTR.unpack_from(attrs, offset)
        if size < _NLATTR.size:
            break
        if kind & 0x3FFF == IFLA_IFNAME:
            return attrs[offset + _NLATTR.size : offset + size].rstrip(b"\0").decode()
        offset += (size + 3) & ~3
    return ""


@contextlib.contextmanager
def deafened(sock: socket.socket, groups: Iterable[int]) -> Iterator[None]:
    """`sock` out of the multicast `groups` (RTNLGRP_* numbers) meanwhile: the kernel neither
    queues their notifications for it nor wakes its reader, and whatever they would have said
    is never known. Notifications already queued stay; the groups are joined again on the way
    out, whatever happened, unless the socket was closed meanwhile (the datapath stopped)."""
    left: list[int] = []
    try:
        for group in groups:
            sock.setsockopt(SOL_NETLINK, NETLINK_DROP_MEMBERSHIP, group)
            left.append(group)
        yield
    finally:
        for group in left if sock.fileno() >= 0 else ():
            sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)


def open_monitor(netns: str | None = None, groups: int = RTMGRP_LINK) -> socket.socket:
    """A non-blocking socket subscribed to the notification `groups` in the namespace."""

    def create() -> socket.socket:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE
        )
        # Without CAP_NET_ADMIN the default stays, and an overflow costs a full reconcile.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, _BUFFER)
        sock.bind((0, groups))
        sock.setblocking(False)
        return sock

    return run_in_netns(netns, create)
