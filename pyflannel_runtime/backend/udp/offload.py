"""TUN offloads for the udp backend, kept wire-compatible with flannel's one-packet datagrams.

Transmit: flannel0 runs with IFF_VNET_HDR and TSO, so the kernel hands over TCP super-packets
(up to 64 KiB) with a virtio_net_hdr. `segment_tcp4` cuts one into MSS-sized IPv4/TCP packets
with valid IP and TCP checksums, back to back, ready for one UDP_SEGMENT (GSO) send: on the wire
every datagram is exactly one ordinary inner packet.

Receive: with UDP_GRO a socket returns runs of equally sized datagrams at once. When the run is
one TCP stream in order, with every inner checksum valid, `coalesce_tcp4` joins it back into a
single super-packet the kernel takes through flannel0 as one TSO packet.

Summing payload bytes in Python is the costly part; `offload_numpy` does the same work as
array operations, and is the one the forwarder uses (`worker.best_offload`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from pyflannel_runtime.backend.udp.packet import PROTO_TCP, fold, ones_sum

VNET_HDR = struct.Struct("=BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
VNET_HDR_LEN = VNET_HDR.size
VNET_F_NEEDS_CSUM = 1
GSO_NONE = 0
GSO_TCPV4 = 1
PLAIN_VNET_HDR = bytes(VNET_HDR_LEN)  # no offload: the kernel checks the packet's own checksums

_TCP_FIN = 0x01
_TCP_SYN = 0x02
_TCP_RST = 0x04
_TCP_PSH = 0x08
_TCP_URG = 0x20
TCP_CWR = 0x80
LAST_ONLY = _TCP_FIN | _TCP_PSH
NOT_COALESCED = _TCP_SYN | _TCP_RST | _TCP_URG | _TCP_FIN
TCP_CSUM_OFFSET = 16

# version/IHL ... destination, then ports, seq, ack, offset, flags, window, checksum, urgent
_IP_TCP = struct.Struct("!BBHHHBBH4s4sHHIIBBHHH")

Buffer = bytes | bytearray | memoryview


def _row_sums(buf: Buffer, base: int, stride: int, length: int, count: int) -> list[int]:
    """Ones'-complement sums of `count` regions of `length` bytes spaced `stride` bytes apart."""
    view = memoryview(buf)
    return [
        ones_sum(view[start : start + length])
        for start in range(base, base + stride * count, stride)
    ]


@dataclass(frozen=True)
class Offload:
    """One implementation of segmenting and coalescing (they produce the same bytes)."""

    segment: Callable[[memoryview, int], Segments | None]
    coalesce: Callable[[memoryview, int], bytearray | None]
    vectorized: bool


def python_offload() -> Offload:
    return Offload(segment_tcp4, coalesce_tcp4, vectorized=False)


def complete_checksum(packet: bytearray | memoryview, csum_start: int, csum_offset: int) -> None:
    """Finish a CHECKSUM_PARTIAL packet: the field holds the pseudo-header sum already."""
    where = csum_start + csum_offset
    value = ~ones_sum(packet[csum_start:]) & 0xFFFF
    packet[where : where + 2] = value.to_bytes(2, "big")


@dataclass(frozen=True)
class Segments:
    """Packets back to back; each is `size` bytes except the last, which may be shorter."""

    data: bytearray
    size: int
    count: int


def segment_tcp4(packet: memoryview, mss: int) -> Segments | None:
    """Cut a TSO super-packet into MSS-sized packets, TTL decremented, checksums computed.

    None when the TTL is used up, as flannel drops such packets. The IP ID grows by one per
    segment, CWR stays on the first and FIN/PSH on the last, as the kernel's own GSO does."""
    ihl = (packet[0] & 0x0F) * 4
    hlen = ihl + (packet[ihl + 12] >> 4) * 4
    payload = len(packet) - hlen
    ttl = packet[8]
    if ttl <= 1 or payload <= 0 or mss <= 0:
        return None
    ip = bytearray(packet[:ihl])
    tcp = bytearray(packet[ihl:hlen])
    ip[8] = ttl - 1
    ident = int.from_bytes(ip[4:6], "big")
    seq = int.from_bytes(tcp[4:8], "big")
    flags = tcp[13]
    ip[2:6] = b"\0\0\0\0"
    ip[10:12] = b"\0\0"
    tcp[4:8] = b"\0\0\0\0"
    tcp[13] = 0
    tcp[16:18] = b"\0\0"
    ip_base = ones_sum(ip)
    tcp_base = ones_sum(tcp) + (
        int.from_bytes(packet[12:14], "big")
        + int.from_bytes(packet[14:16], "big")
        + int.from_bytes(packet[16:18], "big")
        + int.from_bytes(packet[18:20], "big")
        + PROTO_TCP
    )
    count = -(-payload // mss)
    full = payload // mss
    payload_sums = _row_sums(packet, hlen, mss, mss, full)
    if full < count:
        payload_sums.append(ones_sum(packet[hlen + full * mss :]))
    out = bytearray()
    last = count - 1
    for i in range(count):
        start = hlen + i * mss
        chunk = packet[start : start + mss]
        size = hlen + len(chunk)
        seg_ident = (ident + i) & 0xFFFF
        ip[2] = size >> 8
        ip[3] = size & 0xFF
        ip[4] = seg_ident >> 8
        ip[5] = seg_ident & 0xFF
        ip_check = ~fold(ip_base + size + seg_ident) & 0xFFFF
        ip[10] = ip_check >> 8
        ip[11] = ip_check & 0xFF
        seg_seq = (seq + i * mss) & 0xFFFFFFFF
        seg_flags = flags
        if i:
            seg_flags &= ~TCP_CWR
        if i != last:
            seg_flags &= ~LAST_ONLY
        tcp[4:8] = seg_seq.to_bytes(4, "big")
        tcp[13] = seg_flags
        tcp_check = (
            ~fold(
                tcp_base
                + (size - ihl)
                + (seg_seq >> 16)
                + (seg_seq & 0xFFFF)
                + seg_flags
                + payload_sums[i]
            )
            & 0xFFFF
        )
        tcp[16] = tcp_check >> 8
        tcp[17] = tcp_check & 0xFF
        out += ip
        out += tcp
        out += chunk
    return Segments(out, hlen + mss, count)


def coalesce_tcp4(buf: memoryview, size: int) -> bytearray | None:
    """Join a GRO run of inner packets (each `size` bytes, the last maybe shorter) into one
    TSO super-packet with its virtio_net_hdr, TTL decremented; None when the run is not one
    in-order TCP stream of option-free IPv4 packets with valid checksums (the caller then
    forwards the packets one by one)."""
    total = len(buf)
    count = -(-total // size)
    if count < 2 or size < 40:
        return None
    first = _IP_TCP.unpack_from(buf, 0)
    (vihl, tos, _, _, frag0, ttl, proto, _, src, dst, sport, dport, seq0, ack, doff, flags0, *_) = (
        first
    )
    thl = (doff >> 4) * 4
    hlen = 20 + thl
    mss = size - hlen
    if (
        vihl != 0x45
        or proto != PROTO_TCP
        or ttl <= 1
        or frag0 & 0x3FFF
        or mss <= 0
        or flags0 & NOT_COALESCED
    ):
        return None
    options = bytes(buf[40:hlen])
    steady = flags0 & ~(LAST_ONLY | TCP_CWR)
    last = count - 1
    last_flags = flags0
    for i in range(count):
        off = i * size
        seg_len = min(size, total - off)
        (v, t, length, _, frag, tt, pr, _, s, d, sp, dp, sq, ak, do, fl, *_) = _IP_TCP.unpack_from(
            buf, off
        )
        if (
            v != vihl
            or t != tos
            or length != seg_len
            or frag != frag0
            or tt != ttl
            or pr != proto
            or s != src
            or d != dst
            or sp != sport
            or dp != dport
            or ak != ack
            or do != doff
            or sq != (seq0 + i * mss) & 0xFFFFFFFF
            or fl & ~(LAST_ONLY | TCP_CWR) != steady
            or (i and fl & TCP_CWR)
            or (i != last and fl & LAST_ONLY)
            or seg_len <= hlen
            or (thl > 20 and buf[off + 40 : off + hlen] != options)
        ):
            return None
        last_flags = fl
    if not _checksums_valid(buf, size, count):
        return None
    payload = total - count * hlen
    header = bytearray(buf[:hlen])
    header[2:4] = (hlen + payload).to_bytes(2, "big")
    header[8] = ttl - 1
    header[10:12] = b"\0\0"
    header[10:12] = (~ones_sum(header[:20]) & 0xFFFF).to_bytes(2, "big")
    header[33] = (flags0 & ~LAST_ONLY) | (last_flags & LAST_ONLY)
    # CHECKSUM_PARTIAL: the field carries the pseudo-header sum, the kernel adds the rest
    pseudo = fold(
        int.from_bytes(src[:2], "big")
        + int.from_bytes(src[2:], "big")
        + int.from_bytes(dst[:2], "big")
        + int.from_bytes(dst[2:], "big")
        + PROTO_TCP
        + thl
        + payload
    )
    header[20 + TCP_CSUM_OFFSET : 20 + TCP_CSUM_OFFSET + 2] = pseudo.to_bytes(2, "big")
    out = bytearray(VNET_HDR.pack(VNET_F_NEEDS_CSUM, GSO_TCPV4, hlen, mss, 20, TCP_CSUM_OFFSET))
    out += header
    for off in range(hlen, total, size):
        out += buf[off : off + mss]
    return out


def _checksums_valid(buf: memoryview, size: int, count: int) -> bool:
    """Every packet's IP header and TCP checksum verify (pseudo-header included)."""
    total = len(buf)
    full = total // size
    headers = _row_sums(buf, 0, size, 20, full)
    segments = _row_sums(buf, 20, size, size - 20, full)
    if full < count:
        headers.append(ones_sum(buf[full * size : full * size + 20]))
        segments.append(ones_sum(buf[full * size + 20 :]))
    addresses = ones_sum(buf[12:20])
    for i in range(count):
        seg_len = min(size, total - i * size)
        if fold(headers[i]) != 0xFFFF:
            return False
        if fold(segments[i] + addresses + PROTO_TCP + seg_len - 20) != 0xFFFF:
            return False
    return True
