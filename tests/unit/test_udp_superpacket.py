"""pyflannel's negotiated super-packet framing: what one send carries, how a run is checked and
joined, how an oversized TSO packet is cut, and what a lease advertises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_runtime.backend.udp.offload import (
    GSO_NONE,
    GSO_TCPV4,
    VNET_F_NEEDS_CSUM,
    VNET_HDR,
    VNET_HDR_LEN,
    complete_checksum,
    segment_tcp4,
)
from pyflannel_runtime.backend.udp.packet import decrement_ttl, fold, pseudo_header_sum
from pyflannel_runtime.backend.udp.superpacket import (
    HEADER_LEN,
    MAX_UDP_PAYLOAD,
    Reassembler,
    advertises,
    backend_data,
    frame,
    is_framed,
    max_body,
    parse_header,
    split,
    whole,
)
from tests.unit.test_udp_offload import assert_valid, super_packet

DATAGRAM = 1472  # flannel0's MTU over a 1500-byte underlay
TIMESTAMPS = b"\x01\x01\x08\x0a" + bytes(8)

try:
    from pyflannel_runtime.backend.udp.superpacket_numpy import Framer
except ImportError:  # numpy is optional
    Framer = None  # type: ignore[assignment, misc]


def joined(vector: list[bytes | bytearray | memoryview]) -> memoryview:
    return memoryview(b"".join(bytes(part) for part in vector))


def datagrams(stream: memoryview, size: int = DATAGRAM) -> list[memoryview]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def tso_body(segments: int, mss: int = 1420, last: int | None = None) -> memoryview:
    """A TSO packet as flannel0 hands it over: virtio_net_hdr, then IPv4/TCP with the
    pseudo-header sum in the checksum field (CHECKSUM_PARTIAL)."""
    payload = bytes(i % 251 for i in range(mss * (segments - 1) + (last or mss)))
    packet = bytearray(super_packet(payload, options=TIMESTAMPS, flags=0x18 | 0x80))
    packet[36:38] = fold(pseudo_header_sum(packet, 6, len(packet) - 20)).to_bytes(2, "big")
    vnet = VNET_HDR.pack(VNET_F_NEEDS_CSUM, GSO_TCPV4, 52, mss, 20, 16)
    return memoryview(bytearray(vnet) + packet)


def test_the_largest_tso_packet_over_a_1500_byte_underlay_fits_one_send() -> None:
    body = tso_body(46)  # what TCP sends at pod MTU 1472: 46 segments of 1420 bytes
    assert len(body) == 65382 <= max_body(DATAGRAM)
    stream = joined(frame([body], DATAGRAM, 7))
    assert len(stream) <= MAX_UDP_PAYLOAD
    assert all(len(d) == DATAGRAM for d in datagrams(stream)[:-1])


@given(size=st.integers(1, 65417), sequence=st.integers(0, 1000), cut=st.integers(0, 65417))
@settings(max_examples=60, deadline=None)
def test_a_framed_super_packet_comes_back_whole(size: int, sequence: int, cut: int) -> None:
    body = bytes(i % 253 for i in range(size))
    parts = [body[: cut % size], body[cut % size :]]
    stream = joined(frame(parts, DATAGRAM, sequence))
    assert all(is_framed(d) for d in datagrams(stream))
    chunks = whole(stream, DATAGRAM)
    assert chunks is not None
    assert b"".join(bytes(c) for c in chunks) == body
    if Framer is not None:
        assert bytes(Framer(DATAGRAM).frame(parts, sequence)[0]) == bytes(stream)


def test_headers_carry_index_sequence_and_the_last_mark() -> None:
    pieces = datagrams(joined(frame([bytes(5000)], DATAGRAM, 33)))
    assert [parse_header(d) for d in pieces] == [
        (0, 1, False),
        (1, 1, False),
        (2, 1, False),
        (3, 1, True),
    ]
    assert pieces[0][0] >> 4 == 0xF  # never the first nibble of an IPv4 packet (4)


def test_runs_that_are_not_one_whole_super_packet_are_refused() -> None:
    first = datagrams(joined(frame([bytes(range(200)) * 30], DATAGRAM, 1)))
    second = datagrams(joined(frame([bytes(6000)], DATAGRAM, 2)))

    def run(pieces: list[memoryview]) -> memoryview:
        return memoryview(b"".join(bytes(p) for p in pieces))

    assert whole(run(first), DATAGRAM) is not None
    assert whole(run([first[1], first[0], *first[2:]]), DATAGRAM) is None  # reordered
    assert whole(run(first[:-1]), DATAGRAM) is None  # the last one missing
    assert whole(run(first[1:]), DATAGRAM) is None  # the first one missing
    assert whole(run([*first[:2], *second[2:]]), DATAGRAM) is None  # two super-packets
    plain = super_packet(bytes(1000))
    assert not is_framed(plain) and whole(memoryview(plain), DATAGRAM) is None


def test_reassembler_joins_runs_in_order_and_drops_what_is_not() -> None:
    body = bytes(i % 7 for i in range(9000))
    pieces = datagrams(joined(frame([body], DATAGRAM, 3)))
    reassembler = Reassembler()
    got = [reassembler.feed("192.0.2.12", p) for p in pieces]
    assert got[-1] == body and got[:-1] == [None] * (len(pieces) - 1)
    assert reassembler.dropped == 0
    # A chunk lost: the super-packet is given up, the next one is joined again.
    assert reassembler.feed("192.0.2.12", pieces[0]) is None
    assert reassembler.feed("192.0.2.12", pieces[2]) is None
    assert reassembler.dropped == 1
    assert [reassembler.feed("192.0.2.12", p) for p in pieces][-1] == body
    # Two senders' runs interleaved: each is joined on its own.
    other = datagrams(joined(frame([body[::-1]], DATAGRAM, 3)))
    results: dict[str, bytes] = {}
    for mine, theirs in zip(pieces, other, strict=True):
        for source, piece in (("a", mine), ("b", theirs)):
            done = reassembler.feed(source, piece)
            if done is not None:
                results[source] = done
    assert results == {"a": body, "b": body[::-1]}


@pytest.mark.parametrize(
    ("segments", "mss", "last"),
    [(46, 1420, 1420), (47, 1392, 1392), (47, 1392, 100), (64, 1022, 1022), (2, 30000, 5000)],
)
def test_split_pieces_segment_into_exactly_the_kernels_packets(
    segments: int, mss: int, last: int
) -> None:
    """Cutting a TSO packet into smaller ones changes nothing the peer's pod receives: the
    pieces segment into the very packets the original does (IP IDs, sequence numbers, flags,
    checksums), and a piece of one segment completes its checksum as the kernel would."""
    body = tso_body(segments, mss, last)
    limit = max_body(DATAGRAM)
    pieces = split(body, limit)
    assert (len(pieces) == 1) == (len(body) <= limit)
    reference = segment_tcp4(memoryview(bytearray(body[VNET_HDR_LEN:])), mss)
    assert reference is not None
    got = b""
    for parts in pieces:
        piece = bytearray(b"".join(bytes(p) for p in parts))
        assert len(piece) <= limit
        flags, kind, _, mss, start, offset = VNET_HDR.unpack_from(piece)
        packet = memoryview(piece)[VNET_HDR_LEN:]
        if kind == GSO_TCPV4:
            segments_of_piece = segment_tcp4(packet, mss)
            assert segments_of_piece is not None
            got += segments_of_piece.data
        else:
            assert kind == GSO_NONE and flags & VNET_F_NEEDS_CSUM
            complete_checksum(packet, start, offset)
            assert decrement_ttl(packet)
            assert_valid(bytes(packet))
            got += packet
    assert got == bytes(reference.data)


def test_advertising() -> None:
    assert backend_data() == '{"SuperPackets":1}'
    assert advertises(backend_data())
    assert advertises('{"SuperPackets":2,"Other":true}')  # a later version still offers v1
    for data in (None, "", "null", "[]", '{"SuperPackets":true}', '{"SuperPackets":0}', "{"):
        assert not advertises(data)


def test_header_is_two_bytes() -> None:
    assert HEADER_LEN == 2
