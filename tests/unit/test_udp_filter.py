"""The udp backend's socket filter program (backend/udp/socket_filter.py), run by a small classic BPF
interpreter over the fields it reads: it accepts exactly the peers' source addresses."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend.udp.socket_filter import MAX_FILTERED_PEERS, peer_filter

INSN = struct.Struct("=HBBI")
NET_SOURCE = (-0x100000 + 12) & 0xFFFFFFFF


def run(program: bytes, source: IPv4Address) -> int:
    """What the program returns for a datagram from `source` (the opcodes it uses only)."""
    insns = [INSN.unpack_from(program, i) for i in range(0, len(program), INSN.size)]
    assert len(insns) <= 4096  # BPF_MAXINSNS
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]: only the IP source is ever loaded
            assert k == NET_SOURCE
            acc = int(source)
        elif code == 0x15:  # jeq #k
            pc += jt if acc == k else jf
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


addresses = st.builds(IPv4Address, st.integers(0, 2**32 - 1))


@given(st.sets(addresses, max_size=50), addresses)
def test_only_the_peers_get_through(peers: set[IPv4Address], other: IPv4Address) -> None:
    program = peer_filter(peers)
    assert program is not None
    for peer in peers:
        assert run(program, peer) == 0xFFFFFFFF
    assert run(program, other) == (0xFFFFFFFF if other in peers else 0)


def test_no_peers_let_nothing_through_and_too_many_get_no_filter() -> None:
    program = peer_filter([])
    assert program is not None and run(program, IPv4Address("192.0.2.1")) == 0
    most = [IPv4Address(0x0A000000 + n) for n in range(MAX_FILTERED_PEERS)]
    program = peer_filter(most)
    assert program is not None and run(program, most[-1]) == 0xFFFFFFFF
    assert peer_filter([*most, IPv4Address("192.0.2.1")]) is None
