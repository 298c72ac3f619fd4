"""A udp-backend forwarding process: one direction of one flannel0 queue.

`python -m pyflannel_runtime.backend.udp.worker` is started by `udp.UdpNetwork` with the TUN
queue, the UDP socket, its end of a command socketpair and the shared counter page already open
(they were created inside the host's network namespace). A thread applies flannel's proxy
commands (set route, delete route, stop) to the process's own peer table; the main thread
forwards packets and does nothing else. Only the standard library (and numpy, when installed)
is imported here, so a worker starts quickly.
"""

from __future__ import annotations

import argparse
import enum
import errno
import mmap
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from ipaddress import IPv4Address
from typing import NoReturn

from pyflannel_runtime.backend.udp.offload import (
    GSO_TCPV4,
    PLAIN_VNET_HDR,
    VNET_F_NEEDS_CSUM,
    VNET_HDR,
    VNET_HDR_LEN,
    Buffer,
    Offload,
    complete_checksum,
)
from pyflannel_runtime.backend.udp.packet import (
    COMMAND_SIZE,
    Command,
    Peer,
    RouteTable,
    decode_command,
    decrement_ttl,
    net_unreachable,
    wants_net_unreachable,
)
from pyflannel_runtime.backend.udp.superpacket import (
    MAGIC,
    MAX_SEGMENTS,
    MAX_UDP_PAYLOAD,
    Reassembler,
    frame,
    is_framed,
    max_body,
    split,
    whole,
)

SOL_UDP = 17
UDP_SEGMENT = 103  # linux/udp.h: send one buffer as many datagrams (UDP GSO)
UDP_GRO = 104  # receive runs of datagrams as one buffer
_BUFFER = 65536 + VNET_HDR_LEN
READY = b"ready"


class Counter(enum.IntEnum):
    """Per-worker counters in the shared page (unsigned 64-bit, one writer each)."""

    FOREIGN_SOURCE = 0  # datagrams from an address that is no peer's public IP, dropped
    NO_ROUTE = 1  # packets for an unknown subnet (answered with ICMP net unreachable)
    TTL_EXCEEDED = 2  # packets whose TTL ran out in the proxy, dropped
    SEND_ERRORS = 3  # sendto/sendmsg failures (e.g. unreachable peer)
    MALFORMED = 4  # not an IPv4 packet (or a super-packet flannel0 refused)
    SUPER_PACKETS_DROPPED = 5  # super-packets given up: a chunk lost, late or out of order


COUNTERS_PER_WORKER = 8


class Counters:
    def __init__(self, fd: int, slot: int) -> None:
        self._map = mmap.mmap(fd, 0)
        self._words = memoryview(self._map).cast("Q")
        self._base = slot * COUNTERS_PER_WORKER

    def bump(self, counter: Counter) -> None:
        self._words[self._base + counter] += 1


def _apply(data: bytes, table: RouteTable) -> None:
    """One command; CMD_STOP, or the agent's end closing (the agent is gone: udp forwarding,
    as in flannel, does not outlive the agent), ends the process."""
    if not data:
        os._exit(0)
    message = decode_command(data)
    if message.command is Command.STOP:
        os._exit(0)
    assert message.subnet is not None
    if message.command in (Command.SET_ROUTE, Command.SET_ROUTE_SUPER_PACKETS):
        assert message.peer is not None
        table.set(message.subnet, message.peer, message.command is Command.SET_ROUTE_SUPER_PACKETS)
    else:
        table.delete(message.subnet)


def _apply_queued(ctl: socket.socket, table: RouteTable) -> None:
    """The routes the agent queued before starting us (a restarted worker's table)."""
    ctl.setblocking(False)
    try:
        while True:
            _apply(ctl.recv(COMMAND_SIZE * 2), table)
    except BlockingIOError:
        pass
    finally:
        ctl.setblocking(True)


def _serve_commands(ctl: socket.socket, table: RouteTable) -> NoReturn:
    while True:
        _apply(ctl.recv(COMMAND_SIZE * 2), table)


def best_framer(datagram_size: int) -> Callable[[list[Buffer], int], list[Buffer]]:
    """numpy's when it is installed (one buffer, not a vector of ~90 pieces)."""
    try:
        from pyflannel_runtime.backend.udp.superpacket_numpy import Framer
    except ImportError:
        return lambda parts, sequence: frame(parts, datagram_size, sequence)
    return Framer(datagram_size).frame


def best_offload() -> Offload:
    """numpy's: summing payloads in Python costs ~8 us per segment."""
    # Imported here so that only the forwarder processes load numpy, not the agent.
    from pyflannel_runtime.backend.udp import offload_numpy

    return Offload(offload_numpy.segment_tcp4, offload_numpy.coalesce_tcp4, True)


class _Forwarder:
    """One direction between flannel0 and the UDP socket, in its own process."""

    def __init__(
        self, tun: int, sock: socket.socket, table: RouteTable, counters: Counters, offload: bool
    ) -> None:
        self.tun = tun
        self.sock = sock
        self.table = table
        self.counters = counters
        self.offload = offload
        self.engine = best_offload()


class Sender(_Forwarder):
    """flannel0 -> UDP: one packet (or one TSO super-packet) per read."""

    def __init__(
        self,
        tun: int,
        sock: socket.socket,
        table: RouteTable,
        counters: Counters,
        tun_addr: IPv4Address,
        offload: bool,
        datagram_size: int,
    ) -> None:
        super().__init__(tun, sock, table, counters, offload)
        self.tun_addr = tun_addr
        self.gso = offload
        self.datagram_size = datagram_size
        self.largest_body = max_body(datagram_size)
        self.frame = best_framer(datagram_size)
        self.sequence = 0

    def run(self) -> NoReturn:
        buf = bytearray(_BUFFER)
        view = memoryview(buf)
        head = VNET_HDR_LEN if self.offload else 0
        readv = os.readv
        lookup = self.table.lookup
        sendto = self.sock.sendto
        tun = [view]
        while True:
            n = readv(self.tun, tun)
            packet = view[head:n]
            if n - head < 20 or packet[0] >> 4 != 4:
                self.counters.bump(Counter.MALFORMED)
                continue
            peer = lookup(int.from_bytes(packet[16:20], "big"))
            if peer is None:
                self.unreachable(packet)
                continue
            if head:
                flags, gso_type, _, gso_size, csum_start, csum_offset = VNET_HDR.unpack_from(buf)
                if gso_type == GSO_TCPV4:
                    if self.table.takes_super_packets(peer.host):
                        self.send_super_packet(view[:n], peer)
                    else:
                        self.send_segments(packet, gso_size, peer)
                    continue
                if flags & VNET_F_NEEDS_CSUM:
                    complete_checksum(packet, csum_start, csum_offset)
            if not decrement_ttl(packet):
                self.counters.bump(Counter.TTL_EXCEEDED)
                continue
            try:
                sendto(packet, peer)
            except OSError:
                self.counters.bump(Counter.SEND_ERRORS)

    def send_segments(self, packet: memoryview, mss: int, peer: Peer) -> None:
        segments = self.engine.segment(packet, mss)
        if segments is None:
            self.counters.bump(Counter.TTL_EXCEEDED)
            return
        data = memoryview(segments.data)
        size = segments.size
        batch = size * min(MAX_SEGMENTS, MAX_UDP_PAYLOAD // size)
        for start in range(0, len(data), batch):
            self.send_datagrams([data[start : start + batch]], size, peer)

    def send_super_packet(self, body: memoryview, peer: Peer) -> None:
        """The super-packet whole (virtio_net_hdr and all) to a peer that advertised it."""
        if not decrement_ttl(body[VNET_HDR_LEN:]):
            self.counters.bump(Counter.TTL_EXCEEDED)
            return
        for parts in split(body, self.largest_body):
            self.sequence += 1
            self.send_datagrams(self.frame(parts, self.sequence), self.datagram_size, peer)

    def send_datagrams(self, vector: list[Buffer], size: int, peer: Peer) -> None:
        """Datagrams of `size` bytes (the last may be shorter) back to back in `vector`: one
        UDP_SEGMENT send, or one by one once the egress device turned out unable to checksum
        UDP GSO (EIO)."""
        if self.gso and sum(map(len, vector)) > size:
            option = [(SOL_UDP, UDP_SEGMENT, size.to_bytes(2, sys.byteorder))]
            try:
                self.sock.sendmsg(vector, option, 0, peer)
                return
            except OSError as err:
                if err.errno != errno.EIO:
                    self.counters.bump(Counter.SEND_ERRORS)
                    return
                self.gso = False
        self.send_each(memoryview(vector[0] if len(vector) == 1 else b"".join(vector)), size, peer)

    def send_each(self, data: memoryview, size: int, peer: Peer) -> None:
        for start in range(0, len(data), size):
            try:
                self.sock.sendto(data[start : start + size], peer)
            except OSError:
                self.counters.bump(Counter.SEND_ERRORS)

    def unreachable(self, packet: memoryview) -> None:
        self.counters.bump(Counter.NO_ROUTE)
        if wants_net_unreachable(packet):
            reply = net_unreachable(packet, self.tun_addr)
            os.writev(self.tun, [PLAIN_VNET_HDR, reply] if self.offload else [reply])


class Receiver(_Forwarder):
    """UDP -> flannel0: datagrams from peers only; runs of one TCP stream are re-joined, and
    super-packets (pyflannel peers that negotiated them) written whole."""

    def __init__(
        self, tun: int, sock: socket.socket, table: RouteTable, counters: Counters, offload: bool
    ) -> None:
        super().__init__(tun, sock, table, counters, offload)
        self.reassembler = Reassembler()

    def run(self) -> NoReturn:
        if self.offload:  # the agent turned UDP_GRO on for this socket
            self.run_gro()
        self.run_plain()

    def run_plain(self) -> NoReturn:
        buf = bytearray(_BUFFER)
        view = memoryview(buf)
        recv = self.sock.recvfrom_into
        is_peer = self.table.is_peer_source
        write = os.write
        tun = self.tun
        while True:
            n, source = recv(buf)
            if not is_peer(source[0]):
                self.counters.bump(Counter.FOREIGN_SOURCE)
                continue
            packet = view[:n]
            if n < 20 or packet[0] >> 4 != 4:
                self.counters.bump(Counter.MALFORMED)
            elif decrement_ttl(packet):
                write(tun, packet)
            else:
                self.counters.bump(Counter.TTL_EXCEEDED)

    def run_gro(self) -> NoReturn:
        buf = bytearray(_BUFFER)
        view = memoryview(buf)
        recv = self.sock.recvmsg_into
        is_peer = self.table.is_peer_source
        space = socket.CMSG_SPACE(4)
        bufs = [view]
        while True:
            n, ancillary, _, source = recv(bufs, space)
            if not is_peer(source[0]):
                self.counters.bump(Counter.FOREIGN_SOURCE)
                continue
            size = n
            for level, kind, data in ancillary:
                if level == SOL_UDP and kind == UDP_GRO:
                    size = int.from_bytes(data[:4], sys.byteorder)
            packet = view[:n]
            if packet[0] & 0xF0 == MAGIC:
                chunks = whole(packet, size)
                if chunks is not None:
                    self.write_super_packet(chunks)
                    continue
            elif size < n:
                joined = self.engine.coalesce(packet, size)
                if joined is not None:
                    os.write(self.tun, joined)
                    continue
            for start in range(0, n, size):
                self.write_datagram(source[0], packet[start : start + size])

    def write_datagram(self, source: str, datagram: memoryview) -> None:
        if not is_framed(datagram):
            self.write_one(datagram)
            return
        dropped = self.reassembler.dropped
        body = self.reassembler.feed(source, datagram)
        if self.reassembler.dropped != dropped:
            self.counters.bump(Counter.SUPER_PACKETS_DROPPED)
        if body is not None:
            self.write_super_packet([memoryview(bytearray(body))])

    def write_super_packet(self, chunks: list[memoryview]) -> None:
        """virtio_net_hdr plus the packet, in chunks; the TTL is in the first one."""
        if not decrement_ttl(chunks[0][VNET_HDR_LEN:]):
            self.counters.bump(Counter.TTL_EXCEEDED)
            return
        try:
            os.writev(self.tun, chunks)
        except OSError:  # flannel0 refused the virtio_net_hdr
            self.counters.bump(Counter.MALFORMED)

    def write_one(self, packet: memoryview) -> None:
        if len(packet) < 20 or packet[0] >> 4 != 4:
            self.counters.bump(Counter.MALFORMED)
        elif decrement_ttl(packet):
            os.writev(self.tun, [PLAIN_VNET_HDR, packet])
        else:
            self.counters.bump(Counter.TTL_EXCEEDED)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="udp_worker")
    parser.add_argument("role", choices=("send", "receive"))
    parser.add_argument("--tun-fd", type=int, required=True)
    parser.add_argument("--sock-fd", type=int, required=True)
    parser.add_argument("--ctl-fd", type=int, required=True)
    parser.add_argument("--stats-fd", type=int, required=True)
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--tun-addr", type=IPv4Address, required=True)
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--datagram-size", type=int, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when we stop
    table = RouteTable()
    counters = Counters(args.stats_fd, args.slot)
    sock = socket.socket(fileno=args.sock_fd)
    ctl = socket.socket(fileno=args.ctl_fd)
    _apply_queued(ctl, table)
    threading.Thread(target=_serve_commands, args=(ctl, table), daemon=True).start()
    ctl.send(READY)
    if args.role == "send":
        Sender(
            args.tun_fd, sock, table, counters, args.tun_addr, args.offload, args.datagram_size
        ).run()
    Receiver(args.tun_fd, sock, table, counters, args.offload).run()


if __name__ == "__main__":
    main(sys.argv[1:])
