"""What the outage bench's tap makes of a packet (pyflannel_lab/fanout.py classify),
and the figures it draws from what it saw (Recovery)."""

from __future__ import annotations

import socket
import struct

import pytest

from pyflannel_lab.fanout import Recovery, Seen, classify

AGENT, ETCD, PORT = "192.0.2.11", "192.0.2.100", 2379
SYN, ACK, PSH = 0x02, 0x10, 0x08


def packet(
    source: str, destination: str, sport: int, dport: int, flags: int, payload: bytes = b""
) -> bytes:
    """An IPv4 TCP segment (with a 12-byte TCP option block, as Linux sends)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 8 << 4, flags, 64240, 0, 0) + bytes(12)
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
