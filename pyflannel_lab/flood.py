"""A udp flood from a host outside the cluster, for the lab only: a network namespace on the
underlay bridge with an address no lease names, sending flannel-framed datagrams (each a valid
inner IPv4/UDP packet for a pod) to a host's udp backend port as fast as one process can, until
a count or a time runs out. bench/bench_udp_flood.py and tests/integration/test_udp_flood.py
use it; the udp backend must drop and count every one (its ``foreign_source`` counter).
"""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address

from pyflannel_lab.netns_lab import NetLab
from pyflannel_runtime.backend.udp.packet import checksum, ip_header_checksum

FLOOD_PORT = 4001  # the inner packets' destination port in the pod

# Runs in the outside namespace: sends the datagram until the count or the time is used up,
# then prints how many went out (a full socket buffer is waited for, not counted as sent) and
# the CPU time it spent.
_SENDER = r"""
import json, socket, sys, time
src, dst, port, count, seconds, payload = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), bytes.fromhex(sys.argv[6])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((src, 0))
sent, started = 0, time.monotonic()
deadline = started + seconds
while sent < count:
    for _ in range(256):
        sock.sendto(payload, (dst, port))
    sent += 256
    if time.monotonic() >= deadline:
        break
print(json.dumps({"sent": sent, "seconds": time.monotonic() - started, "cpu": time.process_time()}))
"""


def inner_packet(src: IPv4Address, dst: IPv4Address, data: bytes = b"flood") -> bytes:
    """An IPv4/UDP packet from `src` to `dst`:FLOOD_PORT with valid checksums: what a peer's
    forwarder would hand over, so only its outer source tells it from a peer's."""
    udp = struct.pack("!HHHH", FLOOD_PORT, FLOOD_PORT, 8 + len(data), 0) + data
    pseudo = sum(struct.unpack("!4H", src.packed + dst.packed)) + 17 + len(udp)
    udp = udp[:6] + checksum(udp, pseudo).to_bytes(2, "big") + udp[8:]
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, src.packed, dst.packed
        )
    )
    header[10:12] = ip_header_checksum(header).to_bytes(2, "big")
    return bytes(header) + udp


@dataclass(frozen=True)
class Outsider:
    """A host on the underlay that no lease names."""

    ns: str
    address: IPv4Address


@contextlib.contextmanager
def outsider(lab: NetLab, address: IPv4Address) -> Iterator[Outsider]:
    """A namespace on the lab's underlay bridge at `address`/24 (removed with the lab, too)."""
    ns = f"{lab.token}-out"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    lab.adopt(ns)
    lab.ip(lab.ul, "link", "add", "vout", "type", "veth", "peer", "name", "eth0", "netns", ns)
    lab.ip(lab.ul, "link", "set", "vout", "master", "br-ul", "up")
    lab.ip(ns, "addr", "add", f"{address}/24", "dev", "eth0")
    lab.ip(ns, "link", "set", "eth0", "up")
    lab.ip(ns, "link", "set", "lo", "up")
    yield Outsider(ns, address)


@dataclass(frozen=True)
class Flood:
    sent: int
    seconds: float
    cpu_seconds: float  # the sender's own, user and system


class Flooding:
    """A flood under way (a process in the outsider's namespace); `result()` waits for it."""

    def __init__(
        self,
        source: Outsider,
        target: IPv4Address,
        port: int,
        payload: bytes,
        count: int,
        seconds: float,
    ) -> None:
        argv = [str(source.address), str(target), str(port), str(count), str(seconds)]
        self._process = subprocess.Popen(
            ["ip", "netns", "exec", source.ns, sys.executable, "-c", _SENDER, *argv, payload.hex()],
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self._process.pid

    def result(self, timeout: float = 120.0) -> Flood:
        out, _ = self._process.communicate(timeout=timeout)
        if self._process.returncode != 0:
            raise RuntimeError(f"the flood failed ({self._process.returncode})")
        data = json.loads(out)
        return Flood(int(data["sent"]), float(data["seconds"]), float(data["cpu"]))

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()


@contextlib.contextmanager
def flooding(
    source: Outsider, target: IPv4Address, port: int, payload: bytes, count: int, seconds: float
) -> Iterator[Flooding]:
    """A flood for the block (bounded by `count` datagrams and `seconds`); killed if the block
    leaves before it ends."""
    flood = Flooding(source, target, port, payload, count, seconds)
    try:
        yield flood
    finally:
        flood.kill()
