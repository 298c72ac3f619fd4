"""flanneld's /healthz and /readyz endpoints, plus pyflanneld's /statusz, on a server that bounds
every client.

/healthz and /readyz answer exactly as flanneld's (flannel-io/flannel main.go: mustRunHealthz):
same paths, bodies, status codes and content type, and any method, so probes written for
flanneld keep working; a HEAD gets the headers alone. What flanneld does not tell, the agent's
version, uptime and what its datapath holds in userspace, is on a path of its own: /statusz, a
JSON object (the z-page name of /healthz and /readyz, as Kubernetes components serve /statusz).
flanneld answers 404 there, which is how `pyflannel status` tells the two agents apart. Nothing
on it is secret: the udp forwarder's routes are the peers' subnets and public IPs, which every
lease already publishes. ``HealthServer.routes`` maps each path to the function that answers it.

The port listens on every address by default, so any host on the node network may connect,
and flanneld's server (an ``http.Server`` without timeouts) keeps a client for as long as it
keeps sending: a few thousand clients sending a header line a second hold thousands of
descriptors and tens of MiB. This one bounds every client (``Limits``, with these defaults):

* 3 s for the whole exchange, from accept until the answer is sent and the client has closed:
  a client that sends its head a byte at a time, never reads its answer or never closes is
  reset then. After the answer the server closes its side and reads on until the client
  closes (as Go's net/http does, server.go closeWriteAndWait): closing with input unread would
  reset the connection, which can cost a client still sending (an overlong head, a body) its
  answer;
* a head of 8 KiB and 64 header lines: past either, 431 and close. A request line that is not
  ``METHOD SP target SP HTTP/x.y`` gets 400 and close, as soon as a byte no request line holds
  arrives (binary, TLS); so does a client that half-closes inside its head, while one that sent
  nothing is just closed;
* 16 connections from one address: the next from that address is reset on accept, unread.
  This keeps one host from taking the room below, at no cost to the server. Its price: a probe
  from the same address as 16 unfinished requests is refused until one of them ends (3 s at
  most). The node's own probes (the agent role's, `pyflannel status`) come from the node's own
  addresses, which only a process on the node can share;
* 256 connections in all: past that, the oldest connection that is not being sent its answer
  is reset to make room. A client with many addresses (an IPv6 /64 holds 2^64) gets past the
  cap per address, and a cap that refused new connections would then let it lock out every
  probe. Evicting the oldest instead serves a new client, which a probe is: it sends its whole
  request at once and is answered long before 256 newer connections come.

So the server holds at most 256 descriptors for its clients, whatever comes. It runs on the
event loop's readiness callbacks, with no task, stream or transport per connection: a held
connection costs its socket, a small record and at most one partial line, about 1 KiB where
an asyncio transport and protocol cost 3. Nothing a client sends is logged above debug level.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
import time
from asyncio import AbstractEventLoop, TimerHandle, get_running_loop
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.agent.http_head import (
    TEXT,
    Answer,
    HeadLimits,
    HeadReader,
    Refusal,
    Request,
    status_answer,
)
from pyflannel_runtime.fsutil import os_error_text

log = logging.getLogger("pyflannel.health")

_JSON = "application/json"
AGENT_NAME = "pyflanneld"
NOT_FOUND = Answer(404, TEXT, b"404 page not found\n")  # Go's http.NotFound
# Connections taken per wake-up of the listening socket: under a flood of connections the loop
# still gets to the agent's other work (lease renewals, the datapath) between batches.
_ACCEPT_BATCH = 64
# Out of descriptors or buffers, accepting again at once would spin: wait as asyncio does.
_ACCEPT_PAUSE_SECONDS = 1.0
# SO_LINGER on with a zero timeout: close() sends a reset and frees the socket at once.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)
_NOTHING = memoryview(b"")

Handler = Callable[[], Answer]


@dataclass(frozen=True, slots=True)
class Limits:
    """How far any client may go (the module's docstring says why each)."""

    exchange_seconds: float = 3.0
    head: HeadLimits = field(default_factory=HeadLimits)
    per_address: int = 16
    connections: int = 256


class _Client:
    """One accepted connection: reading its head (``head``), writing its answer
    (``outgoing``), then waiting for the client's close (reading at most ``budget`` more)."""

    __slots__ = ("address", "budget", "deadline", "head", "outgoing", "sock")

    def __init__(
        self, sock: socket.socket, address: str, deadline: float, head: HeadReader
    ) -> None:
        self.sock = sock
        self.address = address
        self.deadline = deadline
        self.head: HeadReader | None = head  # None once the request is complete
        self.outgoing = _NOTHING  # what the socket has not taken of the answer yet
        self.budget = 0


class HealthServer:
    """Liveness is "the process answers"; readiness flips once subnet.env is written."""

    def __init__(self, host: str, port: int, limits: Limits | None = None) -> None:
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self.ready = False
        self.backend: str | None = None
        # The datapath's own state for /statusz (the udp forwarder's routes), once it runs.
        self.datapath: Callable[[], Mapping[str, object]] | None = None
        self.routes: dict[str, Handler] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/statusz": self._statusz,
        }
        self._started = time.monotonic()
        self._started_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self._loop: AbstractEventLoop | None = None
        self._listeners: list[socket.socket] = []
        # In the order accepted, which is the order of their deadlines.
        self._clients: dict[_Client, None] = {}
        self._per_address: dict[str, int] = {}
        self._sweep: TimerHandle | None = None
        self._resume: TimerHandle | None = None

    @property
    def address(self) -> str:
        """host:port as Go's net.JoinHostPort writes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def clients(self) -> int:
        """Connections open now."""
        return len(self._clients)

    async def start(self) -> None:
        """Listen; raises StartupError with flanneld's message (main.go mustRunHealthz) and
        Go's net.Listen wording, e.g. ``listen tcp 0.0.0.0:8081: bind: address already in use``."""
        self._loop = get_running_loop()
        try:
            self._listeners = await _listen(self._loop, self.host, self.port)
        except OSError as err:
            raise StartupError(
                f"Start healthz server error. listen tcp {self.address}: bind: {os_error_text(err)}"
            ) from None
        self.port = self._listeners[0].getsockname()[1]
        self._accept_all()
        log.info("Start healthz server on %s", self.address)

    async def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        for listener in self._listeners:
            loop.remove_reader(listener.fileno())
            listener.close()
        self._listeners.clear()
        for timer in (self._sweep, self._resume):
            if timer is not None:
                timer.cancel()
        for client in list(self._clients):
            self._close(client, reset=True)

    def statusz(self) -> dict[str, object]:
        """What /statusz answers: who runs, since when, and the datapath's own state."""
        state: dict[str, object] = {
            "name": AGENT_NAME,
            "version": __version__,
            "pid": os.getpid(),
            "started": self._started_at,
            "uptime_seconds": int(time.monotonic() - self._started),
            "ready": self.ready,
            "backend": self.backend,
        }
        if self.datapath is not None:
            state.update(self.datapath())
        return state

    # --- the routes ----------------------------------------------------------------------------

    def _healthz(self) -> Answer:
        return Answer(200, TEXT, b"flanneld is running")

    def _readyz(self) -> Answer:
        if self.ready:
            return Answer(200, TEXT, b"flanneld is ready")
        return Answer(503, TEXT, b"flanneld is not ready yet")

    def _statusz(self) -> Answer:
        return Answer(200, _JSON, (json.dumps(self.statusz(), sort_keys=True) + "\n").encode())

    def _respond(self, request: Request) -> bytes:
        handler = self.routes.get(request.path)
        try:
            answer = NOT_FOUND if handler is None else handler()
        except Exception:  # the handler's bug, not the client's: told, and answered as Go does
            log.exception("healthz handler for %s failed", request.path)
            answer = status_answer(500)
        return answer.encode(with_body=request.method != "HEAD")

    # --- accepting -----------------------------------------------------------------------------

    def _accept_all(self) -> None:
        assert self._loop is not None
        self._resume = None
        for listener in self._listeners:
            self._loop.add_reader(listener.fileno(), self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # reset while queued
                continue
            except OSError as err:
                self._pause_accepting(err)
                return
            self._admit(sock, peer[0])

    def _pause_accepting(self, err: OSError) -> None:
        assert self._loop is not None
        log.warning(
            "healthz server: accept: %s; accepting again in %.0fs",
            os_error_text(err),
            _ACCEPT_PAUSE_SECONDS,
        )
        for listener in self._listeners:
            self._loop.remove_reader(listener.fileno())
        self._resume = self._loop.call_later(_ACCEPT_PAUSE_SECONDS, self._accept_all)

    def _admit(self, sock: socket.socket, address: str) -> None:
        assert self._loop is not None
        limits = self.limits
        if self._per_address.get(address, 0) >= limits.per_address:
            log.debug("healthz: %s holds %d connections: reset", address, limits.per_address)
            _reset(sock)
            return
        if len(self._clients) >= limits.connections:
            victim = self._longest_waiting()
            log.debug("healthz: %d connections: reset %s's", len(self._clients), victim.address)
            self._close(victim, reset=True)
        sock.setblocking(False)
        deadline = self._loop.time() + limits.exchange_seconds
        client = _Client(sock, address, deadline, HeadReader(limits.head))
        self._clients[client] = None
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self._loop.add_reader(sock.fileno(), self._readable, client)
        if self._sweep is None:
            self._sweep = self._loop.call_at(deadline, self._expire)

    def _longest_waiting(self) -> _Client:
        """The oldest connection that is not being sent its answer (still sending its head, or
        answered already); else (every one is, which takes clients that do not read) the
        oldest."""
        oldest = next(iter(self._clients))
        return next((client for client in self._clients if not client.outgoing), oldest)

    def _expire(self) -> None:
        assert self._loop is not None
        self._sweep = None
        now = self._loop.time()
        while self._clients:
            oldest = next(iter(self._clients))
            if oldest.deadline > now:
                self._sweep = self._loop.call_at(oldest.deadline, self._expire)
                return
            log.debug("healthz: %s out of time: reset", oldest.address)
            self._close(oldest, reset=True)

    # --- one connection ------------------------------------------------------------------------

    def _readable(self, client: _Client) -> None:
        head = client.head
        assert head is not None
        try:
            data = client.sock.recv(head.room())
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        if not data:  # the client half-closed, or closed, before its head was complete
            if head.started:
                self._answer(client, status_answer(400).encode())
            else:
                self._close(client)
            return
        outcome = head.feed(data)
        if isinstance(outcome, Refusal):
            self._answer(client, status_answer(outcome.status).encode())
        elif outcome is not None:
            self._answer(client, self._respond(outcome))

    def _answer(self, client: _Client, payload: bytes) -> None:
        assert self._loop is not None
        client.head = None
        self._loop.remove_reader(client.sock.fileno())
        client.outgoing = memoryview(payload)
        if self._send(client):
            self._loop.add_writer(client.sock.fileno(), self._writable, client)

    def _writable(self, client: _Client) -> None:
        self._send(client)

    def _send(self, client: _Client) -> bool:
        """Send what the socket takes of the answer; True while some is left (the deadline
        still holds then)."""
        try:
            sent = client.sock.send(client.outgoing)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            self._close(client)
            return False
        client.outgoing = client.outgoing[sent:]
        if client.outgoing:
            return True
        self._linger(client)
        return False

    def _linger(self, client: _Client) -> None:
        """Close our side and wait for the client's (the module's docstring says why); what
        it sends meanwhile is read and dropped, up to another head's worth."""
        assert self._loop is not None
        try:
            client.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(client)
            return
        client.budget = self.limits.head.max_bytes
        self._loop.remove_writer(client.sock.fileno())
        self._loop.add_reader(client.sock.fileno(), self._drain, client)

    def _drain(self, client: _Client) -> None:
        try:
            data = client.sock.recv(client.budget + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        client.budget -= len(data)
        if not data or client.budget < 0:
            self._close(client, reset=bool(data))

    def _close(self, client: _Client, *, reset: bool = False) -> None:
        assert self._loop is not None
        if client not in self._clients:
            return
        del self._clients[client]
        count = self._per_address[client.address] - 1
        if count:
            self._per_address[client.address] = count
        else:
            del self._per_address[client.address]
        fd = client.sock.fileno()
        self._loop.remove_reader(fd)
        self._loop.remove_writer(fd)
        if reset:
            _reset(client.sock)
        else:
            client.sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with a reset: nothing more is sent, and no TIME_WAIT is left on our side."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    sock.close()


async def _listen(loop: AbstractEventLoop, host: str, port: int) -> list[socket.socket]:
    """Non-blocking listening sockets for every address `host` resolves to, set up as
    asyncio's create_server sets them (SO_REUSEADDR; IPv6 sockets IPv6 only)."""
    found = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    listeners: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            listener = socket.socket(family, kind, proto)
            listeners.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(address)
            # The kernel's queue as deep as it allows (as Go listens): a probe's handshake
            # completes while a flood waits there, and costs the agent nothing meanwhile.
            listener.listen(socket.SOMAXCONN)
            listener.setblocking(False)
    except OSError:
        for listener in listeners:
            listener.close()
        raise
    return listeners
