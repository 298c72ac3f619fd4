"""TSO segmentation and GRO coalescing for the udp backend: valid, flannel-framed packets."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_runtime.backend.udp.offload import (
    GSO_TCPV4,
    VNET_F_NEEDS_CSUM,
    VNET_HDR,
    VNET_HDR_LEN,
    Offload,
    complete_checksum,
    python_offload,
)
from pyflannel_runtime.backend.udp.packet import (
    fold,
    ip_header_checksum,
    ones_sum,
    pseudo_header_sum,
)
from pyflannel_runtime.backend.udp.worker import best_offload

SRC = IPv4Address("10.244.1.10")
DST = IPv4Address("10.244.2.10")
ACK, PSH, FIN, CWR = 0x10, 0x08, 0x01, 0x80

ENGINES = [python_offload(), best_offload()]


def super_packet(
    payload: bytes, seq: int = 1000, flags: int = ACK | PSH, options: bytes = b"", ttl: int = 63
) -> memoryview:
    thl = 20 + len(options)
    tcp = struct.pack("!HHIIBBHHH", 40000, 5201, seq, 4242, (thl // 4) << 4, flags, 502, 0, 0)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + thl + len(payload),
        0xFFFE,
        0x4000,
        ttl,
        6,
        0,
        SRC.packed,
        DST.packed,
    )
    packet = bytearray(ip + tcp + options + payload)
    packet[10:12] = ip_header_checksum(packet[:20]).to_bytes(2, "big")
    return memoryview(packet)


def split(data: bytes | bytearray, size: int) -> list[bytes]:
    return [bytes(data[i : i + size]) for i in range(0, len(data), size)]


def assert_valid(packet: bytes) -> None:
    assert ones_sum(packet[:20]) == 0xFFFF, "IP header checksum"
    length = len(packet) - 20
    assert fold(ones_sum(packet[20:]) + pseudo_header_sum(packet, 6, length)) == 0xFFFF, "TCP"


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: "numpy" if e.vectorized else "python")
@given(
    payload=st.binary(min_size=1, max_size=20000),
    mss=st.integers(500, 1460),
    seq=st.integers(0, 2**32 - 1),
    flags=st.sampled_from([ACK, ACK | PSH, ACK | PSH | FIN, ACK | CWR, ACK | PSH | CWR]),
    options=st.sampled_from([b"", b"\x01\x01\x08\x0a" + bytes(range(8))]),
)
@settings(max_examples=60, deadline=None)
def test_segments_are_valid_flannel_packets(
    engine: Offload, payload: bytes, mss: int, seq: int, flags: int, options: bytes
) -> None:
    packet = super_packet(payload, seq, flags, options)
    segments = engine.segment(packet, mss)
    assert segments is not None
    hlen = 40 + len(options)
    packets = split(segments.data, segments.size)
    assert len(packets) == segments.count == -(-len(payload) // mss)
    assert segments.size == hlen + mss
    carried = b""
    for i, seg in enumerate(packets):
        assert_valid(seg)
        assert int.from_bytes(seg[2:4], "big") == len(seg)
        assert int.from_bytes(seg[4:6], "big") == (0xFFFE + i) & 0xFFFF
        assert seg[8] == 62  # flannel decrements the TTL on encapsulation
        assert int.from_bytes(seg[24:28], "big") == (seq + i * mss) & 0xFFFFFFFF
        seg_flags = seg[33]
        assert seg_flags & CWR == (flags & CWR if i == 0 else 0)
        last = i == len(packets) - 1
        assert seg_flags & (PSH | FIN) == (flags & (PSH | FIN) if last else 0)
        assert seg[40:hlen] == options
        carried += seg[hlen:]
    assert carried == payload


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: "numpy" if e.vectorized else "python")
@given(payload=st.binary(min_size=1, max_size=30000), mss=st.integers(536, 1460))
@settings(max_examples=40, deadline=None)
def test_coalescing_restores_the_super_packet(engine: Offload, payload: bytes, mss: int) -> None:
    segments = engine.segment(super_packet(payload), mss)
    assert segments is not None
    joined = engine.coalesce(memoryview(segments.data), segments.size)
    if segments.count < 2:
        assert joined is None
        return
    assert joined is not None
    flags, gso_type, hdr_len, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(joined)
    assert (flags, gso_type, hdr_len, gso_size, csum_start, csum_offset) == (
        VNET_F_NEEDS_CSUM,
        GSO_TCPV4,
        40,
        mss,
        20,
        16,
    )
    packet = joined[VNET_HDR_LEN:]
    assert packet[40:] == payload
    assert int.from_bytes(packet[2:4], "big") == len(packet)
    assert ones_sum(packet[:20]) == 0xFFFF
    assert packet[8] == 61  # decremented again on decapsulation
    assert packet[33] == ACK | PSH
    # CHECKSUM_PARTIAL: the TCP field holds the pseudo-header sum of the whole segment
    partial = fold(pseudo_header_sum(packet, 6, len(packet) - 20))
    assert int.from_bytes(packet[36:38], "big") == partial


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: "numpy" if e.vectorized else "python")
def test_runs_that_are_not_one_valid_stream_are_left_alone(engine: Offload) -> None:
    segments = engine.segment(super_packet(bytes(range(256)) * 60), 1400)
    assert segments is not None
    size = segments.size
    good = bytes(segments.data)
    corrupted = bytearray(good)
    corrupted[size * 3 + 100] ^= 0x01
    assert engine.coalesce(memoryview(corrupted), size) is None
    packets = split(good, size)
    swapped = [*packets[:2], packets[3], packets[2], *packets[4:]]
    assert engine.coalesce(memoryview(bytearray(b"".join(swapped))), size) is None
    other_flow = bytearray(good)
    other_flow[size * 2 + 20] ^= 0x01  # a different source port (checksum now invalid too)
    assert engine.coalesce(memoryview(other_flow), size) is None
    assert engine.coalesce(memoryview(bytearray(good)), size) is not None


def test_engines_produce_identical_bytes() -> None:
    if len(ENGINES) < 2:
        pytest.skip("numpy is not installed")
    packet = super_packet(bytes(range(251)) * 250, seq=2**32 - 5000, flags=ACK | PSH | CWR)
    python, numpy = ENGINES
    a, b = python.segment(packet, 1448), numpy.segment(packet, 1448)
    assert a is not None and b is not None
    assert (a.data, a.size, a.count) == (b.data, b.size, b.count)
    assert python.coalesce(memoryview(a.data), a.size) == numpy.coalesce(memoryview(a.data), a.size)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: "numpy" if e.vectorized else "python")
def test_expired_ttl_is_not_segmented(engine: Offload) -> None:
    assert engine.segment(super_packet(b"x" * 5000, ttl=1), 1400) is None


def test_complete_checksum_finishes_a_partial_packet() -> None:
    packet = super_packet(b"hello, flannel")
    length = len(packet) - 20
    packet[36:38] = fold(pseudo_header_sum(packet, 6, length)).to_bytes(2, "big")
    complete_checksum(packet, 20, 16)
    assert_valid(bytes(packet))
