"""The reference the hand-written netlink decoder is checked against: pyroute2's decoding of
the same messages, expressed as the decoder's records. Shared by unit and live tests."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

from pyflannel_runtime.netlink.decoder import NeighRecord, RouteRecord


def route_record(msg: Any) -> RouteRecord:
    """A decoded pyroute2 rtmsg as a RouteRecord."""

    def addr(name: str) -> IPv4Address | IPv6Address | None:
        value = msg.get_attr(name)
        return ip_address(value) if value is not None else None

    table = msg.get_attr("RTA_TABLE")
    return RouteRecord(
        family=msg["family"],
        dst_len=msg["dst_len"],
        table=msg["table"] if table is None else table,
        protocol=msg["proto"],
        scope=msg["scope"],
        kind=msg["type"],
        flags=msg["flags"],
        dst=addr("RTA_DST"),
        gateway=addr("RTA_GATEWAY"),
        oif=msg.get_attr("RTA_OIF"),
        priority=msg.get_attr("RTA_PRIORITY"),
        multipath=msg.get_attr("RTA_MULTIPATH") is not None,
    )


def neigh_record(msg: Any) -> NeighRecord:
    """A decoded pyroute2 ndmsg as a NeighRecord."""
    dst = msg.get_attr("NDA_DST")
    lladdr = msg.get_attr("NDA_LLADDR")
    return NeighRecord(
        family=msg["family"],
        ifindex=msg["ifindex"],
        state=msg["state"],
        flags=msg["flags"],
        kind=msg["ndm_type"],
        dst=ip_address(dst) if dst is not None else None,
        lladdr=lladdr.lower() if lladdr is not None else None,
    )
