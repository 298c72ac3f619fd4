"""The disruption probe's connections, held open: one asyncio task per connection, and a
control socket through which a later call asks for the window so far (``check``) or ends the
probe (``stop``).

Each connection is opened inside its namespace (a probe pod's, or the host's), asks the far
end's responder to ``ECHO``, then sends a numbered message every ``disruption.INTERVAL``
seconds and checks each echo against what it sent, in order. A connection that breaks (reset,
closed, a wrong echo) is counted and opened again every ``RECONNECT_PAUSE`` seconds, so that
the windows after it measure a connection again. The sender keeps its pace whatever comes
back; a loop that falls behind (a busy machine) skips the ticks it missed rather than sending
them in a burst.

The control protocol: one JSON line each way over a Unix socket, ``{"command": "check",
"settle": S}``, answered with the rows of the window (``disruption.Row.as_dict``); ``settle``
gives the echoes of what was sent before the request up to S seconds to arrive before the
window is reported. The probe ends on SIGTERM, or when its lifetime runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pyflannel_runtime.connectivity import wire
from pyflannel_runtime.connectivity.disruption import (
    INTERVAL,
    MESSAGE,
    Account,
    Row,
    Target,
    message,
)
from pyflannel_runtime.netlink.netns import run_in_netns

CONNECT_TIMEOUT = 2.0
RECONNECT_PAUSE = 1.0
_SETTLE_POLL = 0.02
_CONTROL_TIMEOUT = 5.0
MAX_SETTLE = 30.0
CHECK = "check"


class Stream:
    """One connection of the probe, with its account."""

    def __init__(self, target: Target, now: float) -> None:
        self.target = target
        self.account = Account.unopened(now, "not opened yet")
        self.opened_once = False
        self._nonce = 0
        self._generation = 0  # connections opened so far
        self._sent = 0  # sequence numbers on the current connection
        self._echoed = 0
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        target = self.target
        sock = run_in_netns(
            target.netns,
            lambda: socket.socket(
                socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
            ),
        )
        try:
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(loop.sock_connect(sock, (target.address, target.port)),
                                   CONNECT_TIMEOUT)  # fmt: skip
            reader, writer = await asyncio.open_connection(sock=sock, limit=wire.MAX_LINE)
        except BaseException:
            sock.close()
            raise
        try:
            writer.write(wire.command_line(wire.ECHO))
            line = await asyncio.wait_for(reader.readline(), CONNECT_TIMEOUT)
            if wire.parse_command(line)[0] != wire.GO:
                raise wire.WireError(f"the far end does not echo: {line[:40]!r}")
        except BaseException:
            writer.close()
            raise
        return reader, writer

    async def run(self) -> None:
        """Open, carry messages until the connection breaks, count it, open again; until
        cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                reader, writer = await self._connect()
            except (OSError, TimeoutError, wire.WireError) as err:
                self.account.on_unreachable(f"cannot open: {_reason(err)}")
                await asyncio.sleep(RECONNECT_PAUSE)
                continue
            if self.opened_once:
                self.account.on_reconnected()
            else:
                self.opened_once = True
                self.account = Account.opened(loop.time())
            self._nonce, self._sent, self._echoed = secrets.randbits(32), 0, 0
            self._generation += 1
            self._writer = writer
            sender = asyncio.create_task(self._send(writer))
            try:
                reason = await self._receive(reader)
            finally:
                sender.cancel()
                self._writer = None
                writer.close()
            self.account.on_broken(reason)
            await asyncio.sleep(RECONNECT_PAUSE)

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        tick = loop.time()
        while not writer.is_closing():
            writer.write(message(self._nonce, self._sent))
            self._sent += 1
            self.account.on_sent()
            tick += INTERVAL
            if tick < loop.time():
                tick = loop.time()
            await asyncio.sleep(tick - loop.time())

    async def _receive(self, reader: asyncio.StreamReader) -> str:
        """Echoes until the connection breaks; returns why it did."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await reader.readexactly(MESSAGE.size)
                if data != message(self._nonce, self._echoed):
                    return "a wrong echo"
                self._echoed += 1
                self.account.on_echo(loop.time())
        except asyncio.IncompleteReadError:
            return "closed by the far end"
        except OSError as err:
            return _reason(err)

    def mark(self) -> tuple[int, int]:
        """Where the sender is: which connection, and how many messages it sent on it."""
        return self._generation, self._sent

    def awaited(self, mark: tuple[int, int]) -> int:
        """How many messages sent up to `mark` are still awaited: none when the connection
        they went on is gone (they are counted lost)."""
        generation, sent = mark
        if self._writer is None or self._generation != generation:
            return 0
        return max(0, sent - self._echoed)


def _reason(err: BaseException) -> str:
    if isinstance(err, ConnectionResetError):
        return "reset by the far end"
    if isinstance(err, TimeoutError):
        return "timed out"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror.lower()
    return str(err) or type(err).__name__


class Streams:
    """Every connection of a node's probe."""

    def __init__(self, targets: Sequence[Target]) -> None:
        now = asyncio.get_running_loop().time()
        self.streams = [Stream(target, now) for target in targets]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, wait: float = CONNECT_TIMEOUT + 1.0) -> list[Row]:
        """Open every connection; returns once each is open or `wait` seconds have passed."""
        self._tasks = [asyncio.create_task(stream.run()) for stream in self.streams]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline and not all(s.opened_once for s in self.streams):
            await asyncio.sleep(_SETTLE_POLL)
        return self.rows(loop.time())

    def rows(self, now: float) -> list[Row]:
        return [Row(s.target, s.account.report(now)) for s in self.streams]

    async def window(self, settle: float) -> list[Row]:
        """The window so far, once what was sent before this call is echoed (or `settle`
        seconds have passed); its ``pending`` are those still awaited then, not the messages
        in flight that were sent while it waited. The next window starts now."""
        loop = asyncio.get_running_loop()
        marks = [(stream, stream.mark()) for stream in self.streams]
        deadline = loop.time() + min(max(settle, 0.0), MAX_SETTLE)
        while loop.time() < deadline and any(s.awaited(mark) for s, mark in marks):
            await asyncio.sleep(_SETTLE_POLL)
        now = loop.time()
        rows = [
            Row(s.target, replace(s.account.report(now), pending=s.awaited(mark)))
            for s, mark in marks
        ]
        for stream in self.streams:
            stream.account.next_window(now)
        return rows

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def serve(
    targets: Sequence[Target],
    control_path: str,
    lifetime: float,
    announce: Callable[[Sequence[Row]], None],
) -> bool:
    """Hold the connections open and answer the control socket until SIGTERM, or until
    `lifetime` seconds have passed (then True). `announce(rows)` is called once the
    connections are open (or could not be), with the control socket listening."""
    loop = asyncio.get_running_loop()
    streams = Streams(targets)
    stopped = asyncio.Event()
    expired = False
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), _CONTROL_TIMEOUT)
            request = json.loads(line)
            command, settle = request["command"], float(request.get("settle", 0))
            if command != CHECK:
                raise ValueError(f"unknown command {command!r}")
            rows = await streams.window(settle)
            writer.write(json.dumps({"rows": [r.as_dict() for r in rows]}).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError, KeyError, TypeError, TimeoutError) as err:
            with contextlib.suppress(OSError):
                writer.write(json.dumps({"error": str(err)}).encode() + b"\n")
        finally:
            writer.close()

    with contextlib.suppress(FileNotFoundError):
        os.unlink(control_path)
    server = await asyncio.start_unix_server(control, path=control_path)
    os.chmod(control_path, 0o600)
    try:
        announce(await streams.start())
        try:
            await asyncio.wait_for(stopped.wait(), lifetime or None)
        except TimeoutError:
            expired = True
    finally:
        server.close()
        await streams.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(control_path)
    return expired


def request(control_path: str, command: str, settle: float) -> list[dict[str, Any]]:
    """Ask the probe behind `control_path` for its window; OSError when it does not answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(min(max(settle, 0.0), MAX_SETTLE) + _CONTROL_TIMEOUT)
    try:
        sock.connect(control_path)
        sock.sendall(json.dumps({"command": command, "settle": settle}).encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    try:
        reply = json.loads(answer)
    except ValueError:
        raise OSError(f"the disruption probe gave no answer: {answer[:80]!r}") from None
    if "error" in reply:
        raise OSError(f"the disruption probe refused: {reply['error']}")
    return list(reply["rows"])
