"""The client side of each scenario, run from a probe pod's namespace or from the host's.

Every probe opens its socket inside the namespace it speaks from (sockets stay in the
namespace they were created in) and is blocking with short timeouts, so the suite runs many
of them at once in threads. Each returns a ``Probe``: whether it passed, a line saying what was
seen, and the figures behind it.

ICMP goes through a raw socket with IP_RECVERR, so a "fragmentation needed" (from a router, or
the kernel's own refusal to send past the route's MTU) is read from the socket's error queue
with the MTU it names, instead of being parsed out of ping's output.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Any

from pyflannel_runtime.connectivity import wire
from pyflannel_runtime.netlink.netns import run_in_netns

IP_MTU_DISCOVER = 10
IP_RECVERR = 11
IP_MTU = 14
IP_PMTUDISC_DONT = 0
IP_PMTUDISC_DO = 2
SO_EE_ORIGIN_LOCAL = 1
SO_EE_ORIGIN_ICMP = 2
ICMP_ECHO_REPLY = 0
ICMP_DEST_UNREACH = 3
ICMP_FRAG_NEEDED = 4
ICMP_ECHO = 8
IP_HEADER = 20
ICMP_HEADER = 8
UDP_HEADER = 8
_EXTENDED_ERR = struct.Struct("=IBBBBII")
BURST_CHUNK = 50
BURST_PAUSE = 0.002


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def _in(netns: str | None, family: int, kind: int, proto: int = 0) -> socket.socket:
    return run_in_netns(netns, lambda: socket.socket(family, kind | socket.SOCK_CLOEXEC, proto))


def inet_checksum(data: bytes) -> int:
    """The internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return int(~total & 0xFFFF)


def echo_packet(ident: int, sequence: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHH", ICMP_ECHO, 0, 0, ident, sequence)
    checksum = inet_checksum(header + payload)
    return struct.pack("!BBHHH", ICMP_ECHO, 0, checksum, ident, sequence) + payload


@dataclass(frozen=True)
class TooBig:
    """A "fragmentation needed": from a router on the way (`sender`), or local (None)."""

    mtu: int
    sender: str | None

    def describe(self) -> str:
        where = f"from {self.sender}" if self.sender else "from the sending kernel"
        return f"frag needed {where}, MTU {self.mtu}"


def _too_big(sock: socket.socket) -> TooBig | None:
    """The first "fragmentation needed" in the socket's error queue, if any."""
    while True:
        try:
            _, ancillary, _, _ = sock.recvmsg(1, 512, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            return None
        for level, kind, data in ancillary:
            if level != socket.IPPROTO_IP or kind != IP_RECVERR or len(data) < _EXTENDED_ERR.size:
                continue
            _errno, origin, icmp_type, code, _, info, _ = _EXTENDED_ERR.unpack_from(data)
            offender = data[_EXTENDED_ERR.size + 4 : _EXTENDED_ERR.size + 8]
            if origin == SO_EE_ORIGIN_ICMP and (icmp_type, code) == (
                ICMP_DEST_UNREACH,
                ICMP_FRAG_NEEDED,
            ):
                sender = str(IPv4Address(offender)) if len(offender) == 4 else None
                return TooBig(info, sender)
            if origin == SO_EE_ORIGIN_LOCAL and info:
                return TooBig(info, None)


def icmp_echo(
    netns: str | None,
    target: str,
    payload_size: int = 56,
    *,
    dont_fragment: bool = False,
    tries: int = 3,
    interval: float = 0.3,
) -> Probe:
    """An ICMP echo (`tries` requests, `interval` apart, each answered or not within the
    interval); with `dont_fragment`, a packet too big for the path is answered with the MTU
    (data ``too_big``) rather than fragmented."""
    sock = _in(netns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = int.from_bytes(os.urandom(2), "big")
    payload = os.urandom(payload_size)
    size = IP_HEADER + ICMP_HEADER + payload_size
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.setsockopt(
            socket.IPPROTO_IP,
            IP_MTU_DISCOVER,
            IP_PMTUDISC_DO if dont_fragment else IP_PMTUDISC_DONT,
        )
        sock.connect((target, 0))
        for sequence in range(1, tries + 1):
            try:
                sock.send(echo_packet(ident, sequence, payload))
            except OSError as err:
                too_big = _too_big(sock) or _route_mtu(sock)
                if too_big is not None:
                    return _refused(size, too_big)
                return Probe(False, f"{size} bytes: cannot send: {err.strerror}")
            answer = _await_reply(sock, ident, sequence, payload, interval)
            if isinstance(answer, TooBig):
                return _refused(size, answer)
            if answer is not None:
                return Probe(True, f"{size} bytes: echo reply in {answer * 1000:.2f} ms",
                             {"size": size, "rtt_ms": round(answer * 1000, 2)})  # fmt: skip
        return Probe(False, f"{size} bytes: no reply to {tries} echo requests", {"size": size})
    finally:
        sock.close()


def _route_mtu(sock: socket.socket) -> TooBig | None:
    try:
        return TooBig(sock.getsockopt(socket.IPPROTO_IP, IP_MTU), None)
    except OSError:
        return None


def _refused(size: int, too_big: TooBig) -> Probe:
    return Probe(
        False,
        f"{size} bytes: {too_big.describe()}",
        {"size": size, "too_big": too_big.mtu, "too_big_from": too_big.sender},
    )


def _await_reply(
    sock: socket.socket, ident: int, sequence: int, payload: bytes, timeout: float
) -> float | TooBig | None:
    """Seconds until the matching echo reply; a TooBig; None after `timeout`."""
    started = time.monotonic()
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR)
    while (left := timeout - (time.monotonic() - started)) > 0:
        for _, events in poller.poll(left * 1000):
            if events & select.POLLERR:
                too_big = _too_big(sock)
                if too_big is not None:
                    return too_big
            if events & select.POLLIN:
                try:
                    packet = sock.recv(65535, socket.MSG_DONTWAIT)
                except OSError:
                    continue
                if _is_reply(packet, ident, sequence, payload):
                    return time.monotonic() - started
    return None


def _is_reply(packet: bytes, ident: int, sequence: int, payload: bytes) -> bool:
    offset = (packet[0] & 0x0F) * 4 if packet else 0
    if len(packet) < offset + ICMP_HEADER:
        return False
    kind, _, _, got_ident, got_sequence = struct.unpack_from("!BBHHH", packet, offset)
    return (
        kind == ICMP_ECHO_REPLY
        and (got_ident, got_sequence) == (ident, sequence)
        and packet[offset + ICMP_HEADER :] == payload
    )


def tcp_stream(netns: str | None, target: str, port: int, size: int, timeout: float = 3.0) -> Probe:
    """`size` random bytes over one TCP connection; passes when the receiver counted and
    hashed exactly them."""
    data = os.urandom(size)
    sock = _in(netns, socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect((target, port))
        sock.sendall(wire.command_line(wire.STREAM, size) + data)
        sock.shutdown(socket.SHUT_WR)
        report = wire.parse_report(_read_line(sock))
    except TimeoutError:
        return Probe(False, f"TCP to {target}:{port}: timed out")
    except (OSError, wire.WireError) as err:
        return Probe(False, f"TCP to {target}:{port}: {_reason(err)}")
    finally:
        sock.close()
    count, intact = report.get("bytes"), report.get("sha256") == hashlib.sha256(data).hexdigest()
    figures = {"bytes": size, "received": count, "seen": report.get("seen")}
    if count != size:
        return Probe(False, f"{size} bytes sent, {count} received", figures)
    if not intact:
        return Probe(False, f"{size} bytes arrived corrupted (digest differs)", figures)
    return Probe(True, f"{size} bytes, count and digest match", figures)


def _read_line(sock: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n") and len(line) < wire.MAX_LINE:
        chunk = sock.recv(wire.MAX_LINE)
        if not chunk:
            break
        line += chunk
    return line


def _reason(err: Exception) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err)


def udp_echo(
    netns: str | None,
    target: str,
    port: int,
    sizes: tuple[int, ...],
    timeout: float = 1.0,
    tries: int = 2,
) -> Probe:
    """Datagrams of these payload sizes, each answered with its digest and the source the
    receiver saw (data ``seen``); passes when every one came back intact."""
    sock = _in(netns, socket.AF_INET, socket.SOCK_DGRAM)
    pending = {os.urandom(wire.NONCE_BYTES): os.urandom(size) for size in sizes}
    seen: set[str] = set()
    corrupted = 0
    try:
        for _ in range(tries):
            for nonce, payload in pending.items():
                sock.sendto(wire.echo_request(nonce, payload), (target, port))
            deadline = time.monotonic() + timeout
            while pending and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    data, source = sock.recvfrom(65535)
                    reply = wire.EchoReply.decode(data)
                except TimeoutError:
                    break
                except (OSError, wire.WireError):
                    continue
                if source[0] != target or reply.nonce not in pending:
                    continue
                if reply.matches(reply.nonce, pending[reply.nonce]):
                    seen.add(str(reply.seen_address))
                    del pending[reply.nonce]
                else:
                    corrupted += 1
            if not pending:
                break
    except OSError as err:
        return Probe(False, f"UDP to {target}:{port}: {_reason(err)}")
    finally:
        sock.close()
    figures = {"sent": len(sizes), "answered": len(sizes) - len(pending), "seen": sorted(seen)}
    if corrupted:
        return Probe(False, f"{corrupted} datagram(s) came back with another payload", figures)
    if pending:
        answered = len(sizes) - len(pending)
        return Probe(False, f"{answered} of {len(sizes)} datagrams answered", figures)
    return Probe(True, f"{len(sizes)} datagrams ({'/'.join(map(str, sizes))} B) echoed intact",
                 figures)  # fmt: skip


def udp_burst(
    netns: str | None, target: str, tcp_port: int, count: int, size: int, timeout: float = 6.0
) -> Probe:
    """`count` datagrams to the receiver's burst socket in a session of their own; the
    receiver reports how many arrived, how many intact, and how much its pod's and its host's
    UDP checksum-error counters grew meanwhile."""
    control = _in(netns, socket.AF_INET, socket.SOCK_STREAM)
    control.settimeout(timeout)
    datagrams = _in(netns, socket.AF_INET, socket.SOCK_DGRAM)
    session = os.urandom(wire.NONCE_BYTES)
    try:
        control.connect((target, tcp_port))
        control.sendall(wire.command_line(wire.SESSION, session.hex(), count))
        command, args = wire.parse_command(_read_line(control))
        if command != wire.GO or len(args) != 1:
            raise wire.WireError(f"unexpected answer {command}")
        port = int(args[0])
        payload = os.urandom(size)
        for sequence in range(count):
            if sequence and sequence % BURST_CHUNK == 0:
                time.sleep(BURST_PAUSE)  # room for a userspace forwarder (the udp backend)
            datagrams.sendto(wire.burst_datagram(session, sequence, payload), (target, port))
        control.sendall(wire.command_line(wire.DONE))
        report = wire.parse_report(_read_line(control))
    except TimeoutError:
        return Probe(False, f"burst control to {target}:{tcp_port}: timed out")
    except (OSError, ValueError) as err:
        return Probe(False, f"burst control to {target}:{tcp_port}: {_reason(err)}")
    finally:
        control.close()
        datagrams.close()
    received, intact = int(report.get("received", 0)), int(report.get("intact", 0))
    pod_errors = int(report.get("pod", {}).get("Udp:InCsumErrors", 0))
    host_errors = int(report.get("host", {}).get("Udp:InCsumErrors", 0))
    figures = {
        "sent": count,
        "received": received,
        "intact": intact,
        "pod_csum_errors": pod_errors,
        "host_csum_errors": host_errors,
    }
    counted = _csum_text(pod_errors, host_errors)
    if received < count or intact < received:
        lost = f"{count - received} of {count} datagrams lost"
        damaged = f", {received - intact} damaged" if intact < received else ""
        return Probe(False, f"{lost}{damaged}{'; ' + counted if counted else ''}", figures)
    note = f" (meanwhile {counted}, from other traffic)" if counted else ""
    return Probe(True, f"{count} datagrams of {size} B arrived intact{note}", figures)


def _csum_text(pod_errors: int, host_errors: int) -> str:
    parts = []
    if pod_errors:
        parts.append(f"UdpInCsumErrors +{pod_errors} in the receiving pod")
    if host_errors:
        parts.append(f"UdpInCsumErrors +{host_errors} on the receiving host")
    return ", ".join(parts)
