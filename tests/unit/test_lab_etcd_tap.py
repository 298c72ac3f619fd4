"""What the outage bench's tap makes of a packet (pyflannel_lab/fanout.py classify),
the figures it draws from what it saw (Recovery), and the payload bytes it counts etcd sending
(sent_segment, UniqueBytes)."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_lab.fanout import SNAP, Recovery, Seen, UniqueBytes, classify, sent_segment

AGENT, ETCD, PORT = "192.0.2.11", "192.0.2.100", 2379
SYN, ACK, PSH = 0x02, 0x10, 0x08


def packet(
    source: str,
    destination: str,
    sport: int,
    dport: int,
    flags: int,
    payload: bytes = b"",
    sequence: int = 1,
) -> bytes:
    """An IPv4 TCP segment (with a 12-byte TCP option block, as Linux sends)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, sequence, 1, 8 << 4, flags, 64240, 0, 0)
    tcp += bytes(12)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        total,
        0,
        0,
        64,
        socket.IPPROTO_TCP,
        0,
        socket.inet_aton(source),
        socket.inet_aton(destination),
    )
    return ip + tcp + payload


@pytest.mark.parametrize(
    ("seen", "expected"),
    [
        (packet(AGENT, ETCD, 40000, PORT, SYN), ("attempt", AGENT)),
        (
            packet(AGENT, ETCD, 40000, PORT, ACK | PSH, b"POST /v3/watch HTTP/1.1\r\n"),
            ("request", AGENT),
        ),
        (packet(ETCD, AGENT, PORT, 40000, ACK | PSH, b"HTTP/1.1 200 OK\r\n"), ("answer", AGENT)),
        # etcd refusing (RST), its handshake, an error answer, a request's later segment
        (packet(ETCD, AGENT, PORT, 40000, 0x14), None),
        (packet(ETCD, AGENT, PORT, 40000, SYN | ACK), None),
        (packet(ETCD, AGENT, PORT, 40000, ACK | PSH, b"HTTP/1.1 503 Service Unavailable"), None),
        (packet(AGENT, ETCD, 40000, PORT, ACK | PSH, b'{"create_request":{}}'), None),
        (packet(AGENT, ETCD, 40000, 2380, SYN), None),  # another port
        (packet(AGENT, ETCD, 40000, PORT, SYN)[:30], None),  # cut short
        (b"\x60" + bytes(60), None),  # IPv6
    ],
)
def test_packets_are_told_apart(seen: bytes, expected: tuple[str, str] | None) -> None:
    assert classify(seen, PORT) == expected


def test_udp_is_not_looked_at() -> None:
    udp = bytearray(packet(AGENT, ETCD, 40000, PORT, SYN))
    udp[9] = socket.IPPROTO_UDP
    assert classify(bytes(udp), PORT) is None


def test_recovery_figures() -> None:
    seen = [
        Seen(100.0, "a", "attempt"),
        Seen(100.05, "b", "attempt"),
        Seen(130.2, "a", "request"),
        Seen(130.3, "a", "answer"),  # before the health check passed: still counted
        Seen(131.0, "b", "request"),
        Seen(131.05, "b", "request"),
        Seen(131.1, "b", "answer"),
        Seen(131.2, "b", "answer"),
        Seen(132.5, "a", "request"),
    ]
    r = Recovery(stopped=99.0, started=130.0, returned=130.5, seen=seen, etcd_requests=4)
    assert r.reconnects() == pytest.approx({"a": -0.2, "b": 0.6})
    assert r.requests_after_return(1.0) == 2
    assert r.peak("request", 1.0, r.started, r.returned + 10) == 3  # 130.2 to 131.05
    assert r.peak("request", 0.1, r.started, r.returned + 10) == 2
    assert r.peak("request", 0.01, r.started, r.returned + 10) == 1
    assert r.peak("attempt", 0.1, r.stopped, r.started) == 2
    assert r.peak("attempt", 0.1, r.stopped + 10, r.started) == 0


def test_a_segment_from_etcd_is_measured_from_its_headers_even_when_cut_short() -> None:
    answer = packet(ETCD, AGENT, PORT, 40000, ACK | PSH, b"x" * 1000, sequence=77)
    assert sent_segment(answer[:SNAP], PORT) == ((AGENT, 40000), 77, 1000)
    assert sent_segment(packet(ETCD, AGENT, PORT, 40000, ACK), PORT) == ((AGENT, 40000), 1, 0)


def test_segments_to_etcd_and_other_packets_are_not_counted() -> None:
    assert sent_segment(packet(AGENT, ETCD, 40000, PORT, ACK | PSH, b"POST "), PORT) is None
    assert sent_segment(packet(ETCD, AGENT, 2380, 40000, ACK | PSH, b"raft"), PORT) is None
    assert sent_segment(b"\x60" + bytes(60), PORT) is None


@given(
    start=st.integers(0, 2**32 - 1),
    cuts=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    resent=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=10),
)
def test_each_byte_counts_once_however_it_was_resent(
    start: int, cuts: list[int], resent: list[tuple[int, int]]
) -> None:
    """A stream cut into segments, with some sent again later (whole, or a retransmission that
    joins several: Linux coalesces them), across a wrap of the sequence space too."""
    segments, at = [], start
    for length in cuts:
        segments.append((at % 2**32, length))
        at += length
    sent = list(segments)
    for after, first in resent:
        after, first = min(after, len(segments) - 1), min(first, after, len(segments) - 1)
        joined = (segments[first][0], sum(length for _, length in segments[first : after + 1]))
        sent.insert(sent.index(segments[after]) + 1, joined)
    counted = UniqueBytes()
    for sequence, length in sent:
        counted.add((AGENT, 40000), sequence, length)
        counted.add((AGENT, 40001), sequence, length)  # another connection: its own stream
    assert counted.total == 2 * sum(cuts)
