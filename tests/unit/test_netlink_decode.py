"""The hand-unpacked dump replies read the same fields pyroute2 decodes from the same bytes."""

from __future__ import annotations

import errno
import socket
import struct
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pyroute2.netlink.rtnl.ndmsg import ndmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from pyflannel_runtime.netlink.decoder import (
    NLM_F_DUMP_INTR,
    RTM_NEWNEIGH,
    RTM_NEWROUTE,
    NeighRecord,
    RouteRecord,
    decode_neigh,
    decode_route,
    neigh_dump_request,
    parse_dump,
    route_dump_request,
)
from pyflannel_runtime.netlink.dump import Ownership, RouteFacts, owns_route, route_facts
from pyflannel_runtime.netlink.entries import Route
from tests.netlink_reference import neigh_record, route_record

NLM_F_MULTI = 0x2
NLMSG_ERROR, NLMSG_DONE = 2, 3
HEADER = 16


def encoded(cls: Any, msg_type: int, seq: int, fields: dict[str, Any],
            attrs: list[tuple[str, Any]], flags: int = NLM_F_MULTI) -> bytes:  # fmt: skip
    msg = cls()
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = flags
    msg["header"]["sequence_number"] = seq
    for key, value in fields.items():
        msg[key] = value
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data)


def done(seq: int, status: int = 0, msg_type: int = NLMSG_DONE, flags: int = NLM_F_MULTI) -> bytes:
    return struct.pack("=IHHIIi", HEADER + 4, msg_type, flags, seq, 0, status)


def pyroute2_route(data: bytes) -> RouteRecord:
    """What pyroute2 makes of the same message, in the decoder's terms."""
    msg = rtmsg(data)
    msg.decode()
    return route_record(msg)


def pyroute2_neigh(data: bytes) -> NeighRecord:
    msg = ndmsg(data)
    msg.decode()
    return neigh_record(msg)


def decode_one(data: bytes, decode: Any) -> Any:
    out: list[Any] = []
    msg_type, _flags, seq = struct.unpack_from("=HHI", data, 4)
    progress = parse_dump(data + done(seq), seq, msg_type, decode, out)
    assert progress.done and progress.errno == 0 and len(out) == 1
    return out[0]


v4 = st.builds(IPv4Address, st.integers(0, 2**32 - 1))
v6 = st.builds(IPv6Address, st.integers(0, 2**128 - 1))
u8 = st.integers(0, 255)
u32 = st.integers(0, 2**32 - 1)
ifindex = st.integers(1, 2**31 - 1)  # signed in the kernel's structs


@st.composite
def routes(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    family = draw(st.sampled_from([socket.AF_INET, socket.AF_INET6]))
    addr = v4 if family == socket.AF_INET else v6
    fields = {
        "family": family,
        "dst_len": draw(st.integers(0, 32 if family == socket.AF_INET else 128)),
        "table": draw(u8),
        "proto": draw(u8),
        "scope": draw(u8),
        "type": draw(st.integers(0, 11)),
        "flags": draw(st.sampled_from([0, 0x4, 0x200, 0x204])),
    }
    attrs: list[tuple[str, Any]] = []
    if draw(st.booleans()):
        attrs.append(("RTA_TABLE", draw(u32)))
    if draw(st.booleans()):
        attrs.append(("RTA_DST", str(draw(addr))))
    if draw(st.booleans()):
        attrs.append(("RTA_PRIORITY", draw(u32)))
    if draw(st.booleans()):
        attrs.append(("RTA_PREFSRC", str(draw(addr))))
    if draw(st.booleans()):
        hops = [{"oif": draw(ifindex), "attrs": [("RTA_GATEWAY", str(draw(addr)))]}]
        attrs.append(("RTA_MULTIPATH", hops))
    else:
        if draw(st.booleans()):
            attrs.append(("RTA_GATEWAY", str(draw(addr))))
        if draw(st.booleans()):
            attrs.append(("RTA_OIF", draw(ifindex)))
    return fields, draw(st.permutations(attrs))


@given(routes())
def test_routes_decode_as_pyroute2_decodes_them(route: tuple[dict[str, Any], list[Any]]) -> None:
    data = encoded(rtmsg, RTM_NEWROUTE, 1, *route)
    assert decode_one(data, decode_route) == pyroute2_route(data)


@st.composite
def neighbours(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    family = draw(st.sampled_from([socket.AF_INET, socket.AF_INET6, 7]))
    fields = {
        "family": family,
        "ifindex": draw(ifindex),
        "state": draw(st.integers(0, 0xFF)),
        "flags": draw(u8),
        "ndm_type": draw(u8),
    }
    attrs: list[tuple[str, Any]] = []
    if draw(st.booleans()):
        remote = v6 if family == socket.AF_INET6 or draw(st.booleans()) else v4
        attrs.append(("NDA_DST", str(draw(remote))))
    if draw(st.booleans()):
        mac = draw(st.binary(min_size=6, max_size=6))
        attrs.append(("NDA_LLADDR", mac.hex(":").upper()))
    if draw(st.booleans()):
        attrs.append(("NDA_VNI", draw(st.integers(0, 2**24 - 1))))
    if draw(st.booleans()):
        attrs.append(("NDA_IFINDEX", draw(u32)))
    return fields, draw(st.permutations(attrs))


@given(neighbours())
def test_neighbours_and_fdb_decode_as_pyroute2_decodes_them(
    neigh: tuple[dict[str, Any], list[Any]],
) -> None:
    data = encoded(ndmsg, RTM_NEWNEIGH, 1, *neigh)
    assert decode_one(data, decode_neigh) == pyroute2_neigh(data)


ROUTE = encoded(
    rtmsg,
    RTM_NEWROUTE,
    9,
    {"family": socket.AF_INET, "dst_len": 24, "table": 254, "proto": 3, "type": 1, "flags": 4},
    [("RTA_TABLE", 254), ("RTA_DST", "10.244.2.0"), ("RTA_GATEWAY", "10.244.2.0"), ("RTA_OIF", 5)],
)


def test_a_datagram_yields_only_its_dump_and_stops_at_done() -> None:
    stale = ROUTE[:8] + struct.pack("=I", 8) + ROUTE[12:]  # same message, sequence 8
    out: list[RouteRecord] = []
    progress = parse_dump(
        stale + ROUTE + ROUTE + done(9) + ROUTE, 9, RTM_NEWROUTE, decode_route, out
    )
    assert progress == (True, 0, False)
    assert len(out) == 2 and out[0] == pyroute2_route(ROUTE)
    out.clear()
    assert parse_dump(ROUTE + ROUTE[:30], 9, RTM_NEWROUTE, decode_route, out) == (False, 0, False)
    assert len(out) == 1  # a truncated tail is left alone


def test_done_and_error_carry_the_status_and_interruptions_are_reported() -> None:
    out: list[RouteRecord] = []
    assert parse_dump(done(9, -errno.ENOENT), 9, RTM_NEWROUTE, decode_route, out) == (
        True,
        errno.ENOENT,
        False,
    )
    error = done(9, -errno.EINVAL, msg_type=NLMSG_ERROR, flags=0)
    assert parse_dump(error, 9, RTM_NEWROUTE, decode_route, out).errno == errno.EINVAL
    interrupted = ROUTE[:6] + struct.pack("=H", NLM_F_MULTI | NLM_F_DUMP_INTR) + ROUTE[8:]
    assert parse_dump(interrupted + done(9), 9, RTM_NEWROUTE, decode_route, out).interrupted
    bare_done = struct.pack("=IHHII", HEADER, NLMSG_DONE, NLM_F_MULTI, 9, 0)
    assert parse_dump(bare_done, 9, RTM_NEWROUTE, decode_route, out) == (True, 0, False)


def test_dump_requests_are_what_iproute2_sends_under_strict_checking() -> None:
    route = rtmsg(route_dump_request(socket.AF_INET6, 5, 254, 1))
    route.decode()
    assert route["header"]["flags"] == 0x301 and route["header"]["type"] == 26
    assert (route["family"], route["type"], route["table"], route["dst_len"]) == (10, 1, 0, 0)
    assert route.get_attr("RTA_TABLE") == 254
    neigh = ndmsg(neigh_dump_request(7, 6, 42))
    neigh.decode()
    assert neigh["header"]["type"] == 30 and neigh["header"]["sequence_number"] == 6
    assert (neigh["family"], neigh["ifindex"], neigh.get_attr("NDA_IFINDEX")) == (7, 0, 42)


OWN = Ownership(frozenset({5}), (ip_network("10.244.0.0/16"),))


def record(**changes: Any) -> RouteRecord:
    return decode_one(ROUTE, decode_route)._replace(**changes)  # type: ignore[no-any-return]


def test_route_facts_turn_records_into_routes() -> None:
    facts = route_facts(record())
    assert facts == RouteFacts(
        Route(ip_network("10.244.2.0/24"), ip_address("10.244.2.0"), 5, onlink=True), 254, 3, 1
    )
    assert owns_route(facts, OWN)
    default = route_facts(record(dst=None, dst_len=0, flags=0, priority=7))
    assert default is not None and default.route.dst == ip_network("0.0.0.0/0")
    assert default.route.priority == 7 and not default.route.onlink
    v6 = route_facts(record(family=socket.AF_INET6, dst=ip_address("fd00::"), dst_len=64))
    assert v6 is not None and v6.route.dst == ip_network("fd00::/64")


def test_routes_without_a_single_output_device_or_cached_are_never_ours() -> None:
    assert route_facts(record(oif=None)) is None  # blackhole, unreachable
    assert route_facts(record(multipath=True)) is None
    assert route_facts(record(flags=0x200)) is None  # a PMTU exception
