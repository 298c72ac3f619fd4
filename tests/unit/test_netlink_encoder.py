"""The hand-packed messages are byte-identical to pyroute2's encoding of the same request."""

from __future__ import annotations

import struct
from ipaddress import ip_address, ip_network
from typing import Any

import pytest
from pyroute2.netlink.rtnl.ndmsg import ndmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from pyflannel_runtime.netlink.encoder import Ack, _attr, encode_op, parse_acks
from pyflannel_runtime.netlink.entries import Action, Fdb, Neigh, Op, Route
from pyflannel_runtime.netlink.monitor import LinkEvent, parse_events

NEW = 0x1 | 0x4 | 0x400 | 0x100  # REQUEST | ACK | CREATE | REPLACE
DEL = 0x1 | 0x4


def pyroute2_bytes(cls: Any, msg_type: int, flags: int, seq: int, fields: dict[str, Any],
                   attrs: list[tuple[str, Any]]) -> bytes:  # fmt: skip
    msg = cls()
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = flags
    msg["header"]["sequence_number"] = seq
    for key, value in fields.items():
        msg[key] = value
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data)


def decoded(cls: Any, data: bytes) -> Any:
    msg = cls(data)
    msg.decode()
    return msg


V4_ROUTE = Route(ip_network("10.244.2.0/24"), ip_address("10.244.2.0"), 5, onlink=True)
V6_ROUTE = Route(ip_network("fd00:10:244:2::/64"), ip_address("2001:db8::12"), 3, priority=1024)


def test_route_replace_v4_onlink() -> None:
    ours = encode_op(Op(Action.REPLACE, V4_ROUTE), 7)
    fields = dict(family=2, dst_len=24, table=254, proto=3, scope=0, type=1, flags=4)
    attrs = [("RTA_DST", "10.244.2.0"), ("RTA_GATEWAY", "10.244.2.0"), ("RTA_OIF", 5)]
    assert ours == pyroute2_bytes(rtmsg, 24, NEW, 7, fields, attrs)
    msg = decoded(rtmsg, ours)
    assert msg.get("dst") == "10.244.2.0" and msg.get("gateway") == "10.244.2.0"
    assert msg.get("oif") == 5 and msg["flags"] & 4


def test_route_replace_v6_with_metric() -> None:
    ours = encode_op(Op(Action.REPLACE, V6_ROUTE), 8)
    fields = dict(family=10, dst_len=64, table=254, proto=3, scope=0, type=1, flags=0)
    attrs = [("RTA_DST", "fd00:10:244:2::"), ("RTA_PRIORITY", 1024),
             ("RTA_GATEWAY", "2001:db8::12"), ("RTA_OIF", 3)]  # fmt: skip
    assert ours == pyroute2_bytes(rtmsg, 24, NEW, 8, fields, attrs)


@pytest.mark.parametrize("route", [V4_ROUTE, V6_ROUTE])
def test_route_delete_names_the_key_only(route: Route) -> None:
    ours = encode_op(Op(Action.DELETE, route), 9)
    family = 2 if route.dst.version == 4 else 10
    fields = dict(family=family, dst_len=route.dst.prefixlen, table=254, scope=255)
    attrs: list[tuple[str, Any]] = [("RTA_DST", str(route.dst.network_address))]
    if route.priority:
        attrs.append(("RTA_PRIORITY", route.priority))
    assert ours == pyroute2_bytes(rtmsg, 25, DEL, 9, fields, attrs)


@pytest.mark.parametrize("ip", ["10.244.2.0", "fd00:10:244:2::"])
def test_neigh_replace_and_delete(ip: str) -> None:
    neigh = Neigh(4, ip_address(ip), "0a:58:0a:f4:02:00")
    family = 2 if ":" not in ip else 10
    ours = encode_op(Op(Action.REPLACE, neigh), 1)
    fields = dict(family=family, ifindex=4, state=0x80, flags=0, ndm_type=1)
    attrs = [("NDA_DST", ip), ("NDA_LLADDR", "0a:58:0a:f4:02:00")]
    assert ours == pyroute2_bytes(ndmsg, 28, NEW, 1, fields, attrs)
    ours = encode_op(Op(Action.DELETE, neigh), 2)
    fields = dict(family=family, ifindex=4, state=0, flags=0, ndm_type=0)
    assert ours == pyroute2_bytes(ndmsg, 29, DEL, 2, fields, [("NDA_DST", ip)])


@pytest.mark.parametrize("dst", ["192.0.2.12", "2001:db8::12"])
def test_fdb_replace_and_delete(dst: str) -> None:
    fdb = Fdb(4, "0a:58:0a:f4:02:00", ip_address(dst))
    fields = dict(family=7, ifindex=4, state=0x80, flags=2, ndm_type=0)
    attrs = [("NDA_LLADDR", "0a:58:0a:f4:02:00"), ("NDA_DST", dst)]
    ours = encode_op(Op(Action.REPLACE, fdb), 3)
    assert ours == pyroute2_bytes(ndmsg, 28, NEW, 3, fields, attrs)
    ours = encode_op(Op(Action.DELETE, fdb), 4)
    assert ours == pyroute2_bytes(ndmsg, 29, DEL, 4, fields, attrs)
    msg = decoded(ndmsg, ours)
    assert msg.get("dst") == dst and msg.get("lladdr") == "0a:58:0a:f4:02:00"


def ack(seq: int, error: int, message: str = "") -> bytes:
    """An NLMSG_ERROR as the kernel sends it with CAP_ACK (+ EXT_ACK when there is a text)."""
    echoed = struct.pack("=IHHII", 52, 24, NEW, seq, 0)
    tlvs = b""
    flags = 0x100  # NLM_F_CAPPED
    if message:
        text = message.encode() + b"\0"
        tlvs = struct.pack("=HH", 4 + len(text), 1) + text + b"\0" * (-len(text) & 3)
        flags |= 0x200
    body = struct.pack("=i", -error) + echoed + tlvs
    return struct.pack("=IHHII", 16 + len(body), 2, flags, seq, 1234) + body


def test_parse_acks_maps_errors_and_messages_to_sequence_numbers() -> None:
    data = ack(1, 0) + ack(2, 19, "Nexthop device required for onlink") + ack(3, 17)
    assert list(parse_acks(data)) == [
        Ack(1, 0),
        Ack(2, 19, "Nexthop device required for onlink"),
        Ack(3, 17),
    ]


def test_parse_link_events() -> None:
    name = b"flannel.1\0"
    attr = struct.pack("=HH", 4 + len(name), 3) + name + b"\0" * (-len(name) & 3)
    body = struct.pack("=BxHiII", 0, 1, 6, 0, 0) + attr
    msg = struct.pack("=IHHII", 16 + len(body), 17, 0, 0, 0) + body
    assert list(parse_events(msg)) == [LinkEvent(True, 6, "flannel.1")]


# --- what the mutation run showed untested ----------------------------------------------------


def test_attributes_are_padded_to_four_bytes() -> None:
    """NLA_ALIGN: the length counts the payload, the padding does not."""
    for payload, padded in ((b"", 4), (b"a", 8), (b"abc", 8), (b"abcd", 8), (b"abcde", 12)):
        attr = _attr(7, payload)
        assert len(attr) == padded
        assert attr[:4] == struct.pack("=HH", 4 + len(payload), 7)
        assert attr[4:] == payload + b"\0" * (padded - 4 - len(payload))


def test_without_ack_the_kernel_is_asked_to_answer_only_failures() -> None:
    for entry in (V4_ROUTE, Neigh(4, ip_address("10.244.2.0"), "0a:58:0a:f4:02:00"),
                  Fdb(4, "0a:58:0a:f4:02:00", ip_address("192.0.2.12"))):  # fmt: skip
        for action in Action:
            with_ack = encode_op(Op(action, entry), 5)
            without = encode_op(Op(action, entry), 5, ack=False)
            flags = struct.unpack_from("=H", without, 6)[0]
            assert flags & 0x4 == 0 and flags & 0x1
            assert struct.unpack_from("=H", with_ack, 6)[0] == flags | 0x4
            assert without[8:] == with_ack[8:] and without[:6] == with_ack[:6]


def test_a_route_without_gateway_has_no_gateway_attribute() -> None:
    route = Route(ip_network("10.244.2.0/24"), None, 5)
    ours = encode_op(Op(Action.REPLACE, route), 7)
    fields = dict(family=2, dst_len=24, table=254, proto=3, scope=0, type=1, flags=0)
    attrs = [("RTA_DST", "10.244.2.0"), ("RTA_OIF", 5)]
    assert ours == pyroute2_bytes(rtmsg, 24, NEW, 7, fields, attrs)


def tlv(kind: int, payload: bytes) -> bytes:
    return struct.pack("=HH", 4 + len(payload), kind) + payload + b"\0" * (-len(payload) & 3)


def full_ack(seq: int, error: int, tlvs: bytes) -> bytes:
    """An NLMSG_ERROR echoing the whole 52-byte request (no CAP_ACK), with extended TLVs."""
    echoed = struct.pack("=IHHII", 52, 24, NEW, seq, 0) + bytes(36)
    body = struct.pack("=i", -error) + echoed + tlvs
    return struct.pack("=IHHII", 16 + len(body), 2, 0x200, seq, 1234) + body


def capped_ack(seq: int, error: int, tlvs: bytes) -> bytes:
    body = struct.pack("=i", -error) + struct.pack("=IHHII", 52, 24, NEW, seq, 0) + tlvs
    return struct.pack("=IHHII", 16 + len(body), 2, 0x300, seq, 1234) + body


MSG, OFFS = 1, 2


@pytest.mark.parametrize("build", [full_ack, capped_ack])
@pytest.mark.parametrize(
    ("tlvs", "message"),
    [
        (
            tlv(OFFS, struct.pack("=I", 20)) + tlv(MSG, b"Invalid prefix MAX\0"),
            "Invalid prefix MAX",
        ),
        (tlv(9, b"") + tlv(MSG, b"after an empty one\0"), "after an empty one"),
        (tlv(OFFS, b"1234") + tlv(9, b"abcdefgh") + tlv(MSG, b"third\0"), "third"),
        (tlv(MSG, b"bad \xff byte\0"), "bad \ufffd byte"),
        (tlv(OFFS, struct.pack("=I", 20)), ""),
        (struct.pack("=HH", 2, MSG) + b"junk", ""),  # a length under the header: stop
        (b"", ""),
    ],
)
def test_extended_ack_text_is_found_among_the_attributes(
    build: Any, tlvs: bytes, message: str
) -> None:
    assert list(parse_acks(build(3, 22, tlvs))) == [Ack(3, 22, message)]


def test_other_messages_and_short_errors_are_read_past() -> None:
    noop = struct.pack("=IHHII", 16, 1, 0, 0, 0)  # NLMSG_NOOP, header only
    short = struct.pack("=IHHII", 20, 2, 0, 4, 0) + struct.pack("=i", -1)
    data = noop + short + capped_ack(5, 0, b"")
    assert list(parse_acks(data)) == [Ack(4, 1), Ack(5, 0)]
    assert list(parse_acks(short)) == [Ack(4, 1)]  # no extended-ack flag: nothing more is read
    assert list(parse_acks(struct.pack("=IHHII", 8, 2, 0, 6, 0) + bytes(8))) == []


def test_create_refuses_to_overwrite_and_replace_overwrites() -> None:
    """CREATE asks for EXCL (an IPv6 route is not appended as a second next hop), REPLACE for
    REPLACE, whatever the entry."""
    for entry in (V4_ROUTE, V6_ROUTE, Neigh(4, ip_address("10.244.2.0"), "0a:58:0a:f4:02:00"),
                  Fdb(4, "0a:58:0a:f4:02:00", ip_address("192.0.2.12"))):  # fmt: skip
        create = struct.unpack_from("=H", encode_op(Op(Action.CREATE, entry), 1), 6)[0]
        replace = struct.unpack_from("=H", encode_op(Op(Action.REPLACE, entry), 1), 6)[0]
        assert (create, replace) == (0x1 | 0x4 | 0x400 | 0x200, 0x1 | 0x4 | 0x400 | 0x100)
