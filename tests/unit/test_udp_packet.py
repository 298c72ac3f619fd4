"""udp backend packet work: checksums, TTL, ICMP errors, the peer table, commands."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address, IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend.udp.packet import (
    COMMAND_SIZE,
    Command,
    CommandMessage,
    Peer,
    RouteTable,
    checksum,
    decode_command,
    decrement_ttl,
    encode_command,
    ip_header_checksum,
    net_unreachable,
    ones_sum,
    wants_net_unreachable,
)


def naive_sum(data: bytes) -> int:
    """RFC 1071 done the slow, obvious way: 16-bit words with end-around carry."""
    if len(data) % 2:
        data += b"\0"
    total = 0
    for (word,) in struct.iter_unpack("!H", data):
        total += word
        total = (total & 0xFFFF) + (total >> 16)
    return total


@st.composite
def ipv4_headers(draw: st.DrawFn, min_ttl: int = 0) -> bytearray:
    options = draw(st.integers(0, 10)) * 4
    header = bytearray(draw(st.binary(min_size=20 + options, max_size=20 + options)))
    header[0] = 0x40 | (5 + options // 4)
    header[8] = draw(st.integers(min_ttl, 255))
    header[10:12] = ip_header_checksum(header).to_bytes(2, "big")
    return header


@given(st.binary(max_size=3000))
def test_ones_sum_matches_rfc1071(data: bytes) -> None:
    assert ones_sum(data) == naive_sum(data)


@given(ipv4_headers(min_ttl=2))
def test_incremental_ttl_checksum_equals_recomputed(header: bytearray) -> None:
    ttl = header[8]
    assert decrement_ttl(header)
    assert header[8] == ttl - 1
    assert int.from_bytes(header[10:12], "big") == ip_header_checksum(header)
    assert naive_sum(bytes(header)) == 0xFFFF  # the header verifies as a receiver checks it


@given(ipv4_headers(), st.integers(0, 1))
def test_ttl_running_out_drops_and_leaves_the_packet_alone(header: bytearray, ttl: int) -> None:
    header[8] = ttl
    before = bytes(header)
    assert not decrement_ttl(header)
    assert bytes(header) == before


def _udp_packet(frag_word: int = 0, proto: int = 17) -> bytes:
    body = struct.pack("!HHHH", 1000, 53, 20, 0) + b"0123456789AB"
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(body),
            7,
            frag_word,
            63,
            proto,
            0,
            IPv4Address("10.244.1.10").packed,
            IPv4Address("10.244.9.10").packed,
        )
    )
    header[10:12] = ip_header_checksum(header).to_bytes(2, "big")
    return bytes(header) + body


def test_net_unreachable_is_flannels_icmp_error() -> None:
    offending = _udp_packet()
    reply = net_unreachable(offending, IPv4Address("10.244.1.0"))
    version, _, length, _, _, ttl, proto, _, src, dst = struct.unpack("!BBHHHBBH4s4s", reply[:20])
    assert (version, ttl, proto, length) == (0x45, 8, 1, len(reply))
    assert IPv4Address(src) == IPv4Address("10.244.1.0")
    assert IPv4Address(dst) == IPv4Address("10.244.1.10")
    assert naive_sum(reply[:20]) == 0xFFFF
    icmp = reply[20:]
    assert icmp[:2] == b"\x03\x00" and icmp[4:8] == bytes(4)
    assert icmp[8:] == offending[:28]  # the header plus the first 8 data bytes
    assert checksum(icmp) == 0


@pytest.mark.parametrize(
    ("frag_word", "proto", "wanted"),
    [
        (0, 17, True),
        (0x4000, 6, True),  # DF
        (0x2000, 17, True),  # first fragment (MF, offset 0)
        (0x0001, 17, False),  # a later fragment
        (0, 1, False),  # ICMP never gets an ICMP error
    ],
)
def test_which_packets_get_an_icmp_error(frag_word: int, proto: int, wanted: bool) -> None:
    assert wants_net_unreachable(_udp_packet(frag_word, proto)) is wanted


def addr(text: str) -> int:
    return int(IPv4Address(text))


def test_route_table_lookup_delete_and_sources() -> None:
    table = RouteTable()
    table.set(IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285))
    table.set(IPv4Network("10.244.3.0/24"), Peer("192.0.2.13", 8285))
    assert table.lookup(addr("10.244.2.77")) == ("192.0.2.12", 8285)
    assert table.lookup(addr("10.244.3.1")) == Peer("192.0.2.13", 8285)
    assert table.lookup(addr("10.244.4.1")) is None
    assert table.is_peer_source("192.0.2.12") and not table.is_peer_source("192.0.2.99")
    table.delete(IPv4Network("10.244.2.0/24"))
    assert table.lookup(addr("10.244.2.77")) is None
    assert not table.is_peer_source("192.0.2.12")
    table.delete(IPv4Network("10.244.2.0/24"))  # absent: nothing happens
    assert table.entries() == {IPv4Network("10.244.3.0/24"): Peer("192.0.2.13", 8285)}


def test_route_table_replacing_a_peer_moves_the_source() -> None:
    table = RouteTable()
    subnet = IPv4Network("10.244.2.0/24")
    table.set(subnet, Peer("192.0.2.12", 8285))
    table.set(subnet, Peer("192.0.2.22", 8285))
    assert not table.is_peer_source("192.0.2.12") and table.is_peer_source("192.0.2.22")


def test_route_table_shared_public_ip_stays_a_source_until_its_last_subnet_goes() -> None:
    table = RouteTable()
    table.set(IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285))
    table.set(IPv4Network("10.244.5.0/24"), Peer("192.0.2.12", 8285))
    table.delete(IPv4Network("10.244.2.0/24"))
    assert table.is_peer_source("192.0.2.12")


def test_route_table_knows_which_peers_take_super_packets() -> None:
    table = RouteTable()
    table.set(IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285), super_packets=True)
    table.set(IPv4Network("10.244.3.0/24"), Peer("192.0.2.13", 8285))
    assert table.takes_super_packets("192.0.2.12") and not table.takes_super_packets("192.0.2.13")
    table.set(IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285))  # it fell back
    assert not table.takes_super_packets("192.0.2.12")
    table.set(IPv4Network("10.244.3.0/24"), Peer("192.0.2.13", 8285), super_packets=True)
    table.delete(IPv4Network("10.244.3.0/24"))
    assert not table.takes_super_packets("192.0.2.13")


def test_route_table_prefers_the_longer_prefix() -> None:
    table = RouteTable()
    table.set(IPv4Network("10.244.0.0/16"), Peer("192.0.2.1", 8285))
    table.set(IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285))
    assert table.lookup(addr("10.244.2.5")) == Peer("192.0.2.12", 8285)
    assert table.lookup(addr("10.244.7.5")) == Peer("192.0.2.1", 8285)


@pytest.mark.parametrize(
    "message",
    [
        CommandMessage(Command.SET_ROUTE, IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285)),
        CommandMessage(Command.DEL_ROUTE, IPv4Network("10.244.2.0/24")),
        CommandMessage(Command.STOP),
        CommandMessage(
            Command.SET_ROUTE_SUPER_PACKETS, IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285)
        ),
    ],
)
def test_commands_round_trip_in_flannels_struct(message: CommandMessage) -> None:
    data = encode_command(message)
    assert len(data) == COMMAND_SIZE == 20
    assert decode_command(data) == message


def test_set_route_layout_is_flannels() -> None:
    data = encode_command(
        CommandMessage(Command.SET_ROUTE, IPv4Network("10.244.2.0/24"), Peer("192.0.2.12", 8285))
    )
    assert data[4:8] == bytes([10, 244, 2, 0])  # in_addr_t, network order
    assert data[12:16] == bytes([192, 0, 2, 12])
    assert data[16:18] == (8285).to_bytes(2, "big")


def test_bad_commands_are_refused() -> None:
    with pytest.raises(ValueError):
        decode_command(b"\x01" * 19)
    with pytest.raises(ValueError):
        decode_command(struct.pack("=i16x", 9))
