"""A classic BPF socket filter for the udp backend's sockets: a datagram whose source is no
peer's public IP is dropped by the kernel before it is queued to the socket, so a flood from a
host outside the cluster costs a few instructions per datagram in softirq instead of a wake-up
and a read in the forwarder; the kernel counts it in the socket's drops (SO_MEMINFO), which
the agent publishes. flannel's proxy reads and forwards whatever arrives.

The program compares the source address with each peer's in turn (two instructions a peer,
BPF_MAXINSNS is 4096): beyond MAX_FILTERED_PEERS peers no filter is attached, and the
forwarder drops and counts foreign datagrams itself, as it does anyway for any that get by.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
from collections.abc import Iterable
from ipaddress import IPv4Address

MAX_FILTERED_PEERS = 2000
_SO_ATTACH_FILTER = 26
_SO_DETACH_FILTER = 27
_SO_MEMINFO = 55
_SK_MEMINFO_VARS = 9
_SK_MEMINFO_DROPS = 8
_SKF_NET_OFF = -0x100000  # loads relative to the network (IP) header
_IP_SOURCE = 12
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_ACCEPT = 0xFFFFFFFF  # the whole datagram
_DROP = 0
_INSN = struct.Struct("=HBBI")  # struct sock_filter: code, jt, jf, k


def peer_filter(peers: Iterable[IPv4Address]) -> bytes | None:
    """The program (struct sock_filter[]) accepting datagrams from `peers` only; None when there
    are too many peers for it."""
    addresses = sorted({int(peer) for peer in peers})
    if len(addresses) > MAX_FILTERED_PEERS:
        return None
    program = [_INSN.pack(_LD_W_ABS, 0, 0, (_SKF_NET_OFF + _IP_SOURCE) & 0xFFFFFFFF)]
    for address in addresses:
        # Equal: on to the next instruction, which accepts; else past it, to the next peer.
        program += [_INSN.pack(_JEQ_K, 0, 1, address), _INSN.pack(_RET_K, 0, 0, _ACCEPT)]
    program.append(_INSN.pack(_RET_K, 0, 0, _DROP))
    return b"".join(program)


def attach(sock: socket.socket, program: bytes | None) -> None:
    """Attach the program (it replaces the one before at once); None detaches it."""
    if program is None:
        with contextlib.suppress(OSError):  # none attached
            sock.setsockopt(socket.SOL_SOCKET, _SO_DETACH_FILTER, 0)
        return
    instructions = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // _INSN.size, ctypes.addressof(instructions))
    sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)


def dropped(sock: socket.socket) -> int:
    """The datagrams the kernel dropped at the socket: refused by the filter, or arriving while
    its buffer was full."""
    info = sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, 4 * _SK_MEMINFO_VARS)
    values: tuple[int, ...] = struct.unpack(f"={_SK_MEMINFO_VARS}I", info)
    return values[_SK_MEMINFO_DROPS]
