"""numpy versions of `offload.segment_tcp4` / `coalesce_tcp4`: same bytes, no per-segment
Python. Every segment is a row of a 2-D array; header fields and checksums are column
operations. numpy is one of the runtime's dependencies (pyproject.toml); the Python
versions stay as the reference these are tested against."""

from __future__ import annotations

from typing import Any

import numpy as np  # type: ignore[import-not-found, unused-ignore]

from pyflannel_runtime.backend.udp import offload
from pyflannel_runtime.backend.udp.offload import (
    GSO_TCPV4,
    LAST_ONLY,
    NOT_COALESCED,
    TCP_CSUM_OFFSET,
    TCP_CWR,
    VNET_F_NEEDS_CSUM,
    VNET_HDR,
    Segments,
)
from pyflannel_runtime.backend.udp.packet import PROTO_TCP, fold, ones_sum

_U64 = np.uint64
# header bytes that legitimately differ within a run: total length, IP ID, IP checksum,
# sequence number, TCP flags, window and TCP checksum (option-free IPv4 header)
_VARYING = [2, 3, 4, 5, 10, 11, 24, 25, 26, 27, 33, 34, 35, 36, 37]
_SMALL = 8  # below this many segments the Python versions are faster than array set-up


def _fold(total: Any) -> Any:
    """Vectorized `packet.fold` for sums below 2**48."""
    for _ in range(3):
        total = (total & _U64(0xFFFF)) + (total >> _U64(16))
    return total


def _word_sums(rows: Any, start: int, stop: int) -> Any:
    """Folded ones'-complement sums of bytes [start, stop) of every row (both multiples of 4).

    Summing native little-endian 32-bit words is fastest; folded to 16 bits that is the
    byte-swapped big-endian sum (RFC 1071 byte-order independence), so swap it back."""
    folded = _fold(rows[:, start:stop].view("<u4").sum(axis=1, dtype=_U64))
    return ((folded & _U64(0xFF)) << _U64(8)) | (folded >> _U64(8))


def segment_tcp4(packet: memoryview, mss: int) -> Segments | None:
    ihl = (packet[0] & 0x0F) * 4
    hlen = ihl + (packet[ihl + 12] >> 4) * 4
    payload = len(packet) - hlen
    ttl = packet[8]
    if ttl <= 1 or payload <= 0 or mss <= 0:
        return None
    count = -(-payload // mss)
    if count < _SMALL:
        return offload.segment_tcp4(packet, mss)
    width = -(-(hlen + mss) // 4) * 4  # whole 32-bit words; the padding stays zero
    rows = np.zeros((count, width), dtype=np.uint8)
    source = np.frombuffer(packet, dtype=np.uint8)
    rows[:, :hlen] = source[:hlen]
    full = payload // mss
    rows[:full, hlen : hlen + mss] = source[hlen : hlen + full * mss].reshape(full, mss)
    rest = payload - full * mss
    if rest:
        rows[full, hlen : hlen + rest] = source[hlen + full * mss :]
    lengths = np.full(count, mss, dtype=_U64)
    lengths[-1] = payload - (count - 1) * mss
    index = np.arange(count, dtype=_U64)
    ident = (_U64(int.from_bytes(packet[4:6], "big")) + index) & _U64(0xFFFF)
    seq = (_U64(int.from_bytes(packet[ihl + 4 : ihl + 8], "big")) + index * _U64(mss)) & _U64(
        0xFFFFFFFF
    )
    flags0 = packet[ihl + 13]
    flags = np.full(count, flags0 & ~(LAST_ONLY | TCP_CWR), dtype=_U64)
    flags[0] |= flags0 & TCP_CWR
    flags[-1] |= flags0 & LAST_ONLY
    size = lengths + _U64(hlen)
    rows[:, 8] = ttl - 1
    for at in (2, 4, 10, ihl + 4, ihl + 6, ihl + 16):
        rows[:, at : at + 2] = 0
    rows[:, ihl + 13] = 0
    ip_base = ones_sum(rows[0, :ihl].tobytes())
    ip_check = ~_fold(_U64(ip_base) + size + ident) & _U64(0xFFFF)
    pseudo = ones_sum(packet[12:20]) + PROTO_TCP
    tcp_sum = (
        _word_sums(rows, ihl, width)  # header (seq, flags, checksum zeroed) and payload
        + _U64(pseudo)
        + (size - _U64(ihl))
        + (seq >> _U64(16))
        + (seq & _U64(0xFFFF))
        + flags
    )
    tcp_check = ~_fold(tcp_sum) & _U64(0xFFFF)
    words = rows.view(">u2")
    words[:, 1] = size
    words[:, 2] = ident
    words[:, 5] = ip_check
    words[:, (ihl + 4) // 2] = seq >> _U64(16)
    words[:, (ihl + 6) // 2] = seq & _U64(0xFFFF)
    rows[:, ihl + 13] = flags
    words[:, (ihl + 16) // 2] = tcp_check
    if width != hlen + mss:
        rows = rows[:, : hlen + mss]
    data = bytearray(rows.tobytes())
    del data[len(data) - (mss - int(lengths[-1])) :]
    return Segments(data, hlen + mss, count)


def coalesce_tcp4(buf: memoryview, size: int) -> bytearray | None:
    total = len(buf)
    count = -(-total // size)
    if count < _SMALL:
        return offload.coalesce_tcp4(buf, size)
    if size < 40 or buf[0] != 0x45 or buf[9] != PROTO_TCP:
        return None
    thl = (buf[32] >> 4) * 4
    hlen = 20 + thl
    mss = size - hlen
    flags0 = buf[33]
    last_len = total - (count - 1) * size
    if mss <= 0 or last_len <= hlen or buf[8] <= 1 or flags0 & NOT_COALESCED:
        return None
    width = -(-size // 4) * 4
    rows = np.zeros((count, width), dtype=np.uint8)
    flat = np.frombuffer(buf, dtype=np.uint8)
    full = count - 1
    rows[:full, :size] = flat[: full * size].reshape(full, size)
    rows[full, :last_len] = flat[full * size :]
    words = rows.view(">u2")
    # every header byte but length, ID, checksums, sequence number, flags and window matches
    head = rows[:, :hlen].view("<u4")
    if ((head ^ head[0]) & _same_mask(hlen)).any():
        return None
    if buf[6] & 0x3F or buf[7]:  # a fragment
        return None
    lengths = np.full(count, size, dtype=_U64)
    lengths[-1] = last_len
    seq = (words[:, 12].astype(_U64) << _U64(16)) | words[:, 13]
    expected = (seq[0] + np.arange(count, dtype=_U64) * _U64(mss)) & _U64(0xFFFFFFFF)
    flags = rows[:, 33]
    varying = 0xFF & ~(LAST_ONLY | TCP_CWR)
    if (
        (words[:, 1] != lengths).any()
        or (seq != expected).any()
        or (flags & varying != flags0 & varying).any()
        or (flags[1:] & TCP_CWR).any()
        or (flags[:-1] & LAST_ONLY).any()
    ):
        return None
    pseudo = _U64(ones_sum(buf[12:20]) + PROTO_TCP) + lengths - _U64(20)
    if (_word_sums(rows, 0, 20) != 0xFFFF).any():
        return None
    if (_fold(_word_sums(rows, 20, width) + pseudo) != 0xFFFF).any():
        return None
    payload = total - count * hlen
    header = bytearray(buf[:hlen])
    header[2:4] = (hlen + payload).to_bytes(2, "big")
    header[8] -= 1
    header[10:12] = b"\0\0"
    header[10:12] = (~ones_sum(header[:20]) & 0xFFFF).to_bytes(2, "big")
    header[33] = (flags0 & ~LAST_ONLY) | (int(flags[-1]) & LAST_ONLY)
    partial = fold(ones_sum(buf[12:20]) + PROTO_TCP + thl + payload)
    header[20 + TCP_CSUM_OFFSET : 22 + TCP_CSUM_OFFSET] = partial.to_bytes(2, "big")
    out = bytearray(VNET_HDR.pack(VNET_F_NEEDS_CSUM, GSO_TCPV4, hlen, mss, 20, TCP_CSUM_OFFSET))
    out += header
    out += rows[:, hlen:size].tobytes()
    del out[len(out) - (size - last_len) :]
    return out


_MASKS: dict[int, Any] = {}


def _same_mask(hlen: int) -> Any:
    """Per 32-bit header word, the bits that must be equal across a run (all but _VARYING)."""
    mask = _MASKS.get(hlen)
    if mask is None:
        template = np.full(hlen, 0xFF, dtype=np.uint8)
        template[_VARYING] = 0
        mask = _MASKS[hlen] = template.view("<u4").copy()
    return mask
