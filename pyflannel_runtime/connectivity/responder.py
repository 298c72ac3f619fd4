"""The listeners the suite's probes talk to, in the probe pods and on the host: a process of
its own that lives from the suite's setup to its clean-up (and never longer than its
``--lifetime``, should the clean-up never come).

In each probe pod: a TCP listener (streams whose bytes it counts and hashes; UDP burst
sessions, one at a time, with the pod's checksum-error counters read before and after; echoes
of long-lived connections, the disruption probe's), a UDP echo (answers with the payload's
digest and the source address it saw) and the burst receiver. On the host: a UDP echo on the
node's address. With ``--outside``: a UDP echo and a TCP listener (streams and echoes) on that
address and port, for the lab's stand-in of an address outside the cluster.

Every socket is opened inside its namespace at start; the ports (chosen by the kernel) go to
stdout as one JSON line, after which stdout is closed, so whoever started the process reads
the line and goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pyflannel_runtime.connectivity import snmp, wire
from pyflannel_runtime.netlink.netns import run_in_netns

# A burst ends when every datagram arrived, or this long after the sender said it was done:
# on a healthy path they are all there within milliseconds, and a loaded machine may hold
# this process back for a while before it reads them.
BURST_MAX_WAIT_SECONDS = 3.0
_BURST_POLL_SECONDS = 0.02
COMMAND_TIMEOUT_SECONDS = 10.0
START_TIMEOUT_SECONDS = 20.0
_READ_CHUNK = 1 << 16


# Room for a whole burst while the event loop gets to it (SO_RCVBUFFORCE: past rmem_max).
MODULE = "pyflannel_runtime.connectivity.responder"  # how it is run, and found again
BURST_BUFFER_BYTES = 4 << 20
SO_RCVBUFFORCE = 33  # asm-generic/socket.h; Python's socket module does not name it


def _socket(
    netns: str | None, kind: int, address: str, port: int = 0, buffer: int = 0
) -> socket.socket:
    def create() -> socket.socket:
        sock = socket.socket(socket.AF_INET, kind | socket.SOCK_CLOEXEC)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if buffer:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer)
        sock.bind((address, port))
        if kind == socket.SOCK_STREAM:
            sock.listen(64)
        sock.setblocking(False)
        return sock

    return run_in_netns(netns, create)


class _Echo(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is None:
            return
        with contextlib.suppress(wire.WireError):
            self.transport.sendto(wire.answer(data, addr), addr)


@dataclass
class _Session:
    name: bytes
    expected: int
    received: set[int] = field(default_factory=set)
    intact: set[int] = field(default_factory=set)


class _BurstReceiver(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.session: _Session | None = None

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        session = self.session
        try:
            name, sequence, intact = wire.parse_burst_datagram(data)
        except wire.WireError:
            return
        if session is None or name != session.name:
            return
        session.received.add(sequence)
        if intact:
            session.intact.add(sequence)


@dataclass
class Pod:
    """One probe pod's listeners."""

    netns: str
    tcp: socket.socket
    udp: socket.socket
    burst: socket.socket
    receiver: _BurstReceiver = field(default_factory=_BurstReceiver)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def open(cls, netns: str) -> Pod:
        return cls(
            netns,
            _socket(netns, socket.SOCK_STREAM, "0.0.0.0"),
            _socket(netns, socket.SOCK_DGRAM, "0.0.0.0"),
            _socket(netns, socket.SOCK_DGRAM, "0.0.0.0", buffer=BURST_BUFFER_BYTES),
        )

    def ports(self) -> dict[str, int]:
        return {
            "tcp_port": self.tcp.getsockname()[1],
            "udp_port": self.udp.getsockname()[1],
            "burst_port": self.burst.getsockname()[1],
        }

    async def serve(self) -> list[Any]:
        loop = asyncio.get_running_loop()
        echo, _ = await loop.create_datagram_endpoint(_Echo, sock=self.udp)
        burst, _ = await loop.create_datagram_endpoint(lambda: self.receiver, sock=self.burst)
        server = await asyncio.start_server(self._client, sock=self.tcp, limit=wire.MAX_LINE)
        return [echo, burst, server]

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _command_client(reader, writer, self._burst)

    async def _burst(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        name: bytes,
        expected: int,
    ) -> dict[str, Any]:
        """One sender's burst, alone: its datagrams counted, the pod's and the host's
        checksum-error counters read around it."""
        async with self.lock:
            before_pod, before_host = await _counters(self.netns), await _counters(None)
            session = _Session(name, expected)
            self.receiver.session = session
            try:
                writer.write(wire.command_line(wire.GO, self.burst.getsockname()[1]))
                await writer.drain()
                line = await asyncio.wait_for(reader.readline(), COMMAND_TIMEOUT_SECONDS)
                if wire.parse_command(line)[0] != wire.DONE:
                    raise ValueError("expected DONE")
                await _settle(session)
            finally:
                self.receiver.session = None
            after_pod, after_host = await _counters(self.netns), await _counters(None)
        return {
            "received": len(session.received),
            "intact": len(session.intact),
            "pod": snmp.delta(before_pod, after_pod),
            "host": snmp.delta(before_host, after_host),
        }


Burst = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter, bytes, int], Awaitable[dict[str, Any]]
]


async def _command_client(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, burst: Burst | None = None
) -> None:
    """One connection's command and its answer (`burst`: the pod's burst sessions; None
    where there are none)."""
    peer = writer.get_extra_info("peername")
    try:
        line = await asyncio.wait_for(reader.readline(), COMMAND_TIMEOUT_SECONDS)
        command, args = wire.parse_command(line)
        if command == wire.ECHO and not args:
            writer.write(wire.command_line(wire.GO))
            await _echo(reader, writer)
            return
        if command == wire.STREAM and len(args) == 1:
            report = await _count_stream(reader, int(args[0]))
            report["seen"] = peer[0]
        elif command == wire.SESSION and len(args) == 2 and burst is not None:
            report = await burst(reader, writer, bytes.fromhex(args[0]), int(args[1]))
        else:
            report = {"error": f"unknown command {command}"}
        writer.write(wire.report_line(report))
        await writer.drain()
    except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every byte back as it comes, for as long as the other end keeps the connection."""
    while chunk := await reader.read(_READ_CHUNK):
        writer.write(chunk)
        await writer.drain()


async def _counters(netns: str | None) -> dict[str, int]:
    return await asyncio.to_thread(snmp.read_counters, netns)


async def _settle(session: _Session) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BURST_MAX_WAIT_SECONDS
    while len(session.received) < session.expected and loop.time() < deadline:
        await asyncio.sleep(_BURST_POLL_SECONDS)


async def _count_stream(reader: asyncio.StreamReader, announced: int) -> dict[str, Any]:
    hashed = hashlib.sha256()
    count = 0
    while True:
        chunk = await asyncio.wait_for(reader.read(_READ_CHUNK), COMMAND_TIMEOUT_SECONDS)
        if not chunk:
            break
        hashed.update(chunk)
        count += len(chunk)
    return {"bytes": count, "announced": announced, "sha256": hashed.hexdigest()}


async def _serve(
    pods: list[Pod], echoes: list[socket.socket], listeners: list[socket.socket], lifetime: float
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running: list[Any] = []
    for pod in pods:
        running += await pod.serve()
    for sock in echoes:
        transport, _ = await loop.create_datagram_endpoint(_Echo, sock=sock)
        running.append(transport)
    for sock in listeners:
        running.append(await asyncio.start_server(_command_client, sock=sock, limit=wire.MAX_LINE))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), lifetime or None)
    for item in running:
        item.close()


def _address_port(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    return address, int(port)


def detach_stdout() -> None:
    """Stdout to /dev/null: whoever started the process has read its announcement."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def launch(
    args: Sequence[str],
    prefix: Sequence[str] = (),
    module: str = MODULE,
    timeout: float = START_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """Start the responder (or another `module` that announces itself the same way: one JSON
    line on stdout) as a process of its own (it outlives the caller, in a session of its own)
    and return what it announced once it listens; OSError when it did not start. `prefix` runs
    it through another command, e.g. ``ip netns exec NAME``."""
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", module, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdout is not None
    with process.stdout:
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline() if ready else b""
    try:
        announced: dict[str, Any] = json.loads(line)
    except ValueError:
        process.kill()
        process.wait()
        raise OSError(f"{module} did not start: {' '.join(args)}") from None
    return announced


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyflannel_runtime.connectivity.responder")
    parser.add_argument("--pod", action="append", default=[], help="a probe pod's netns")
    parser.add_argument("--host-address", help="the node's address, for the host's UDP echo")
    parser.add_argument(
        "--outside", metavar="ADDRESS:PORT", help="a UDP echo and a TCP listener there, alone"
    )
    parser.add_argument(
        "--lifetime", type=float, default=300.0, help="seconds, at most (0: no end)"
    )
    args = parser.parse_args(argv)
    pods = [Pod.open(name) for name in args.pod]
    echoes = []
    listeners = []
    ready: dict[str, Any] = {"pid": os.getpid(), "pods": {p.netns: p.ports() for p in pods}}
    if args.host_address:
        echoes.append(_socket(None, socket.SOCK_DGRAM, args.host_address))
        ready["host_udp_port"] = echoes[-1].getsockname()[1]
    if args.outside:
        echoes.append(_socket(None, socket.SOCK_DGRAM, *_address_port(args.outside)))
        listeners.append(_socket(None, socket.SOCK_STREAM, *_address_port(args.outside)))
    print(json.dumps(ready), flush=True)
    detach_stdout()
    asyncio.run(_serve(pods, echoes, listeners, args.lifetime))
    return 0


if __name__ == "__main__":
    sys.exit(main())
