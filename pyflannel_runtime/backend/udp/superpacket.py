"""pyflannel's negotiated super-packet framing for the udp backend (never used with flanneld).

flannel's framing puts one inner IPv4 packet in each datagram, so a TCP super-packet read from
flannel0 (up to 64 KiB with TSO) must be cut into MSS-sized packets, each with its own headers
and checksums, and joined again on the other side; in Python that work, not the kernel's,
bounds the forwarder. Between two pyflannel nodes that both advertise it (`SuperPackets` in the
lease's backend data, which flanneld ignores), the super-packet travels whole instead: its
bytes, virtio_net_hdr first, are cut into chunks, and each datagram is a 2-byte header plus a
chunk. One UDP_SEGMENT send carries all of them; the receiver's UDP_GRO hands the run back as
one buffer, whose chunks are written to flannel0 as the same TSO packet, which the kernel
segments, or delivers whole to a local pod. The outer UDP checksum covers every byte.

The header is one big-endian 16-bit word: 0xF in the top four bits (an IPv4 packet starts with
0x4, so a datagram of either framing is told apart by its first byte), a bit set on the last
chunk, 5 bits of a sequence number that tells one super-packet's chunks from the next one's,
and the chunk's index (6 bits). Two bytes, because a TSO packet of 46 segments of 1420 bytes
(65 382 bytes with its virtio_net_hdr) then still fits in one send of at most 65 507 bytes
over a 1500-byte underlay; `split` cuts anything larger.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyflannel_runtime.backend.udp.offload import (
    GSO_NONE,
    GSO_TCPV4,
    LAST_ONLY,
    TCP_CWR,
    VNET_HDR,
    VNET_HDR_LEN,
    Buffer,
)
from pyflannel_runtime.backend.udp.packet import PROTO_TCP, fold, ones_sum

HEADER = struct.Struct("!H")
HEADER_LEN = HEADER.size
MAGIC = 0xF0  # the first byte's top four bits
_LAST = 0x0800
_SEQUENCE_SHIFT = 6
SEQUENCES = 32
MAX_SEGMENTS = 64  # one UDP_SEGMENT send carries at most this many datagrams (6 index bits)
MAX_UDP_PAYLOAD = 65507  # ... and at most this many bytes
BACKEND_DATA_KEY = "SuperPackets"
VERSION = 1


def header(index: int, sequence: int, last: bool) -> bytes:
    word = (MAGIC << 8) | (_LAST if last else 0) | (sequence << _SEQUENCE_SHIFT) | index
    return HEADER.pack(word)


def parse_header(datagram: Buffer) -> tuple[int, int, bool]:
    """(index, sequence, last) of a framed datagram."""
    (word,) = HEADER.unpack_from(datagram)
    return word & 0x3F, (word >> _SEQUENCE_SHIFT) & 0x1F, bool(word & _LAST)


def is_framed(datagram: Buffer) -> bool:
    return len(datagram) > HEADER_LEN and datagram[0] & 0xF0 == MAGIC


def max_body(datagram_size: int) -> int:
    """The largest super-packet (virtio_net_hdr included) one send carries."""
    chunk = datagram_size - HEADER_LEN
    for count in range(MAX_SEGMENTS, 0, -1):
        body = min(count * chunk, MAX_UDP_PAYLOAD - count * HEADER_LEN)
        if body > (count - 1) * chunk:
            return body
    raise ValueError(f"datagrams of {datagram_size} bytes carry nothing")


def frame(parts: Sequence[Buffer], datagram_size: int, sequence: int) -> list[Buffer]:
    """The send vector for one super-packet whose bytes are `parts` back to back: header,
    chunk, header, chunk, ... (a chunk may span two parts); every datagram is `datagram_size`
    bytes but the last, as UDP_SEGMENT requires. `sequence` is taken modulo 32."""
    chunk = datagram_size - HEADER_LEN
    count = -(-sum(len(part) for part in parts) // chunk)
    tag = (MAGIC << 8) | ((sequence % SEQUENCES) << _SEQUENCE_SHIFT)
    vector: list[Buffer] = []
    pack = HEADER.pack
    index = room = 0
    for part in parts:
        view = memoryview(part)
        start, end = 0, len(view)
        while start < end:
            if not room:
                vector.append(pack(tag | index | (_LAST if index == count - 1 else 0)))
                index += 1
                room = chunk
            taken = view[start : start + room]
            vector.append(taken)
            room -= len(taken)
            start += len(taken)
    return vector


def split(body: memoryview, limit: int) -> list[list[Buffer]]:
    """A TSO super-packet (virtio_net_hdr first) cut at segment boundaries into super-packets
    of at most `limit` bytes, each as [its headers, its payload]; [[body]] when it fits.

    A TSO packet may hold 64 KiB, one UDP GSO send less. Each piece is what the kernel would
    have sent as a smaller TSO packet: IP length, ID and header checksum, TCP sequence number,
    flags (CWR on the first piece, FIN and PSH on the last) and the pseudo-header sum the
    checksum offload starts from are its own; a piece of one segment is no GSO packet."""
    if len(body) <= limit:
        return [[body]]
    flags, _, hdr_len, mss, csum_start, csum_offset = VNET_HDR.unpack_from(body)
    packet = body[VNET_HDR_LEN:]
    ihl = (packet[0] & 0x0F) * 4
    hlen = ihl + (packet[ihl + 12] >> 4) * 4
    per_piece = (limit - VNET_HDR_LEN - hlen) // mss
    if per_piece < 1:
        raise ValueError(f"a {limit}-byte super-packet cannot hold a segment of {mss} bytes")
    ident = int.from_bytes(packet[4:6], "big")
    seq = int.from_bytes(packet[ihl + 4 : ihl + 8], "big")
    tcp_flags = packet[ihl + 13]
    addresses = ones_sum(packet[12:20]) + PROTO_TCP
    payload = packet[hlen:]
    step = per_piece * mss
    pieces: list[list[Buffer]] = []
    for offset in range(0, len(payload), step):
        data = payload[offset : offset + step]
        last = offset + step >= len(payload)
        segments = -(-len(data) // mss)
        header = bytearray(packet[:hlen])
        header[2:4] = (hlen + len(data)).to_bytes(2, "big")
        header[4:6] = ((ident + offset // mss) & 0xFFFF).to_bytes(2, "big")
        header[10:12] = b"\0\0"
        header[10:12] = (~ones_sum(header[:ihl]) & 0xFFFF).to_bytes(2, "big")
        header[ihl + 4 : ihl + 8] = ((seq + offset) & 0xFFFFFFFF).to_bytes(4, "big")
        header[ihl + 13] = (
            tcp_flags & ~(0 if offset == 0 else TCP_CWR) & ~(0 if last else LAST_ONLY)
        )
        check = fold(addresses + hlen - ihl + len(data))  # offload sums the rest
        header[ihl + 16 : ihl + 18] = check.to_bytes(2, "big")
        kind, size = (GSO_TCPV4, mss) if segments > 1 else (GSO_NONE, 0)
        vnet = VNET_HDR.pack(flags, kind, hdr_len, size, csum_start, csum_offset)
        pieces.append([vnet + header, data])
    return pieces


def whole(buf: memoryview, datagram_size: int) -> list[memoryview] | None:
    """The chunks of a run of datagrams (each `datagram_size` bytes, the last maybe shorter)
    when the run is exactly one super-packet, all chunks in order; None otherwise.

    Reads the headers column by column (byte j of every datagram is `buf[j::size]`), so a run
    of 45 costs two slices, not 45 unpacks."""
    total = len(buf)
    count = -(-total // datagram_size)
    if count > MAX_SEGMENTS or total <= (count - 1) * datagram_size + HEADER_LEN:
        return None  # more than a send carries, or a last datagram without a chunk
    first = buf[0]
    if first & 0xF0 != MAGIC:
        return None
    steady = first & ~(_LAST >> 8)
    high = bytes((steady,)) * (count - 1) + bytes((steady | (_LAST >> 8),))
    low = _INDEXES[buf[1] & 0xC0][:count]
    if buf[0::datagram_size] != high or buf[1::datagram_size] != low:
        return None
    return [
        buf[start + HEADER_LEN : start + datagram_size] for start in range(0, total, datagram_size)
    ]


# The second header byte of chunks 0, 1, 2, ... for each value of the sequence's two low bits.
_INDEXES = {
    bits: bytes(bits | index for index in range(MAX_SEGMENTS)) for bits in (0, 64, 128, 192)
}


@dataclass
class Reassembler:
    """Collects one super-packet's datagrams that arrived in several runs (a GRO train cut in
    two by the receiving NIC, a plain datagram in front of the first chunk). Chunks must come
    in order; anything else drops the super-packet being collected (TCP sends it again)."""

    dropped: int = 0  # super-packets given up: a chunk missing, late or out of order
    _partial: dict[str, _Partial] = field(default_factory=dict)

    def feed(self, source: str, datagram: Buffer) -> bytes | None:
        """The whole super-packet once its last chunk from `source` arrived, else None."""
        index, sequence, last = parse_header(datagram)
        chunk = bytes(datagram[HEADER_LEN:])
        partial = self._partial.get(source)
        if index == 0:
            if partial is not None:
                self.dropped += 1
            partial = self._partial[source] = _Partial(sequence, [chunk])
        elif partial is None or partial.sequence != sequence or len(partial.chunks) != index:
            self.dropped += 1
            self._partial.pop(source, None)
            return None
        else:
            partial.chunks.append(chunk)
        if not last:
            return None
        del self._partial[source]
        return b"".join(partial.chunks)


@dataclass
class _Partial:
    sequence: int
    chunks: list[bytes]


def advertises(backend_data: str | None) -> bool:
    """Whether a peer's lease backend data offers this framing (compact JSON, as stored)."""
    if not backend_data:
        return False
    try:
        data = json.loads(backend_data)
    except ValueError:
        return False
    version = data.get(BACKEND_DATA_KEY) if isinstance(data, dict) else None
    return isinstance(version, int) and not isinstance(version, bool) and version >= VERSION


def backend_data() -> str:
    """What a node that receives this framing advertises in its lease."""
    return f'{{"{BACKEND_DATA_KEY}":{VERSION}}}'
