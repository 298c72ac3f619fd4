"""Link add/delete notifications (RTNLGRP_LINK) on a raw socket the asyncio loop can poll."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from pyflannel_runtime.netlink.netns import run_in_netns

NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTM_NEWLINK = 16
RTM_DELLINK = 17
IFLA_IFNAME = 3

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_NLATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class LinkEvent:
    deleted: bool
    index: int
    name: str


def parse_link_events(buf: bytes) -> Iterator[LinkEvent]:
    offset = 0
    while offset + _NLMSGHDR.size <= len(buf):
        length, msg_type, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, offset)
        if length < _NLMSGHDR.size:
            break
        if msg_type in (RTM_NEWLINK, RTM_DELLINK):
            body = offset + _NLMSGHDR.size
            _family, _type, index, _iflags, _change = _IFINFOMSG.unpack_from(buf, body)
            name = _ifname(buf[body + _IFINFOMSG.size : offset + length])
            yield LinkEvent(msg_type == RTM_DELLINK, index, name)
        offset += (length + 3) & ~3


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


def open_link_monitor(netns: str | None = None) -> socket.socket:
    """A non-blocking socket subscribed to link notifications in the namespace."""

    def create() -> socket.socket:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE
        )
        sock.bind((0, RTMGRP_LINK))
        sock.setblocking(False)
        return sock

    return run_in_netns(netns, create)
