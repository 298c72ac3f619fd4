"""Pure packet work of the udp backend: checksums, TTL, ICMP errors, the peer table, commands.

Everything here works on raw IPv4 bytes exactly as they cross flannel0 and the wire (flannel's
udp framing: the UDP payload is the bare inner IPv4 packet).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import NamedTuple

PROTO_ICMP = 1
PROTO_TCP = 6

_FRAG_OFFSET_MASK = 0x1FFF
ICMP_ERROR_TTL = 8  # flannel's proxy sends its net-unreachable errors with TTL 8
_ICMP_QUOTED_DATA = 8  # RFC 792: the offending header plus the first 64 bits of its data


# --- ones'-complement arithmetic (RFC 1071) ----------------------------------------------------


def fold(total: int) -> int:
    """The 16-bit ones'-complement sum of a (big) non-negative integer sum of 16-bit words.

    2**16 is congruent to 1 modulo 0xFFFF, so a sum of words reduces with one modulo; a non-zero
    sum folds to 0xFFFF rather than 0, as end-around carries do."""
    rest = total % 0xFFFF
    return rest if rest or total == 0 else 0xFFFF


def ones_sum(data: bytes | bytearray | memoryview) -> int:
    """Ones'-complement sum of `data` as big-endian 16-bit words (odd length zero-padded)."""
    value = int.from_bytes(data, "big")
    if len(data) & 1:
        value <<= 8
    return fold(value)


def checksum(data: bytes | bytearray | memoryview, initial: int = 0) -> int:
    """The Internet checksum of `data` (plus an already-summed `initial`, e.g. a pseudo-header)."""
    return ~fold(ones_sum(data) + initial) & 0xFFFF


def pseudo_header_sum(packet: bytes | bytearray | memoryview, proto: int, length: int) -> int:
    """The IPv4 pseudo-header words (source, destination, protocol, L4 length), summed."""
    return (
        int.from_bytes(packet[12:14], "big")
        + int.from_bytes(packet[14:16], "big")
        + int.from_bytes(packet[16:18], "big")
        + int.from_bytes(packet[18:20], "big")
        + proto
        + length
    )


def header_length(packet: bytes | bytearray | memoryview) -> int:
    return (packet[0] & 0x0F) * 4


def ip_header_checksum(header: bytes | bytearray | memoryview) -> int:
    """The header checksum the header should carry (its own checksum field is skipped)."""
    return ~fold(ones_sum(header[:10]) + ones_sum(header[12:])) & 0xFFFF


# --- TTL -----------------------------------------------------------------------------------------


def decrement_ttl(packet: bytearray | memoryview) -> bool:
    """Decrement the TTL in place and patch the header checksum incrementally (RFC 1624 eqn. 3).

    False (and the packet untouched) when the TTL would reach 0: flannel drops those."""
    ttl = packet[8]
    if ttl <= 1:
        return False
    packet[8] = ttl - 1
    # The TTL is the high byte of the word at offset 8, so m' = m - 0x0100 and
    # ~m + m' == 0xFEFF in ones'-complement arithmetic: HC' = ~(~HC + 0xFEFF).
    old = (packet[10] << 8) | packet[11]
    total = (~old & 0xFFFF) + 0xFEFF
    total = (total & 0xFFFF) + (total >> 16)
    new = ~total & 0xFFFF
    packet[10] = new >> 8
    packet[11] = new & 0xFF
    return True


# --- ICMP destination unreachable --------------------------------------------------------------


def wants_net_unreachable(packet: bytes | bytearray | memoryview) -> bool:
    """Flannel answers with an ICMP error unless the packet is ICMP or a non-first fragment."""
    frag = ((packet[6] << 8) | packet[7]) & _FRAG_OFFSET_MASK
    return packet[9] != PROTO_ICMP and frag == 0


def net_unreachable(packet: bytes | bytearray | memoryview, source: IPv4Address) -> bytes:
    """ICMP type 3 code 0 from `source` back to the packet's sender, quoting its header + 8 bytes."""
    quoted = bytes(packet[: header_length(packet) + _ICMP_QUOTED_DATA])
    icmp = bytearray(struct.pack("!BBHI", 3, 0, 0, 0) + quoted)
    icmp[2:4] = checksum(icmp).to_bytes(2, "big")
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(icmp),
            0,
            0,
            ICMP_ERROR_TTL,
            PROTO_ICMP,
            0,
            source.packed,
            bytes(packet[12:16]),
        )
    )
    header[10:12] = ip_header_checksum(header).to_bytes(2, "big")
    return bytes(header + icmp)


# --- the peer table ----------------------------------------------------------------------------


class Peer(NamedTuple):
    """Where a peer's subnet is reached: its public IP and UDP port (a socket address)."""

    host: str  # dotted quad, the form socket addresses come in
    port: int


class RouteTable:
    """Subnet -> peer, with a dict per prefix length (normally exactly one: SubnetLen).

    flannel's proxy scans a list, first match wins; leases never overlap, so a
    longest-prefix-first dict lookup gives the same answer in O(distinct lengths)."""

    def __init__(self) -> None:
        self._by_len: dict[int, dict[int, Peer]] = {}
        self._masks: list[tuple[int, dict[int, Peer]]] = []
        self._sources: dict[str, int] = {}
        self._super_packets: set[str] = set()

    def set(self, subnet: IPv4Network, peer: Peer, super_packets: bool = False) -> None:
        """`super_packets`: the peer negotiated pyflannel's super-packet framing."""
        table = self._by_len.setdefault(subnet.prefixlen, {})
        key = int(subnet.network_address)
        previous = table.get(key)
        if previous is not None:
            self._forget_source(previous.host)
        table[key] = peer
        self._sources[peer.host] = self._sources.get(peer.host, 0) + 1
        if super_packets:
            self._super_packets.add(peer.host)
        else:
            self._super_packets.discard(peer.host)
        self._reindex()

    def delete(self, subnet: IPv4Network) -> None:
        table = self._by_len.get(subnet.prefixlen)
        if table is None:
            return
        previous = table.pop(int(subnet.network_address), None)
        if previous is not None:
            self._forget_source(previous.host)
        if not table:
            del self._by_len[subnet.prefixlen]
        self._reindex()

    def lookup(self, destination: int) -> Peer | None:
        for mask, table in self._masks:
            peer = table.get(destination & mask)
            if peer is not None:
                return peer
        return None

    def takes_super_packets(self, host: str) -> bool:
        return host in self._super_packets

    def is_peer_source(self, host: str) -> bool:
        """True when `host` is some peer's public IP (datagrams from elsewhere are dropped)."""
        return host in self._sources

    def entries(self) -> dict[IPv4Network, Peer]:
        return {
            IPv4Network((key, length)): peer
            for length, table in self._by_len.items()
            for key, peer in table.items()
        }

    def _forget_source(self, host: str) -> None:
        left = self._sources[host] - 1
        if left:
            self._sources[host] = left
        else:
            del self._sources[host]
            self._super_packets.discard(host)

    def _reindex(self) -> None:
        self._masks = [
            ((0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF, self._by_len[length])
            for length in sorted(self._by_len, reverse=True)
        ]


# --- the agent -> worker command channel -------------------------------------------------------


class Command(enum.IntEnum):
    """flannel's proxy commands (CMD_SET_ROUTE, CMD_DEL_ROUTE, CMD_STOP), and pyflannel's
    SET_ROUTE to a peer that negotiated super-packets (`superpacket`)."""

    SET_ROUTE = 1
    DEL_ROUTE = 2
    STOP = 3
    SET_ROUTE_SUPER_PACKETS = 4


# flannel's C struct: {int cmd; in_addr_t dest_net; int dest_net_len; in_addr_t next_hop_ip;
# short next_hop_port;} -- addresses and the port in network byte order, padded to 20 bytes.
_COMMAND = struct.Struct("=i4si4s2s2x")
COMMAND_SIZE = _COMMAND.size


@dataclass(frozen=True)
class CommandMessage:
    command: Command
    subnet: IPv4Network | None = None
    peer: Peer | None = None


def encode_command(message: CommandMessage) -> bytes:
    subnet = message.subnet or IPv4Network("0.0.0.0/0")
    peer = message.peer or Peer("0.0.0.0", 0)
    return _COMMAND.pack(
        int(message.command),
        subnet.network_address.packed,
        subnet.prefixlen,
        IPv4Address(peer.host).packed,
        peer.port.to_bytes(2, "big"),
    )


def decode_command(data: bytes) -> CommandMessage:
    """Raises ValueError for a message that is not one of the three commands."""
    if len(data) != COMMAND_SIZE:
        raise ValueError(f"command of {len(data)} bytes, want {COMMAND_SIZE}")
    cmd, net, length, host, port = _COMMAND.unpack(data)
    command = Command(cmd)
    if command is Command.STOP:
        return CommandMessage(command)
    subnet = IPv4Network((IPv4Address(net), length))
    if command is Command.DEL_ROUTE:
        return CommandMessage(command, subnet)
    return CommandMessage(
        command, subnet, Peer(str(IPv4Address(host)), int.from_bytes(port, "big"))
    )
