"""Trickling HTTP clients for the lab (a slowloris): many TCP connections to one server, each
sending a request head a line at a time, a line per ``interval``, never its blank line, and
connecting again when the server closes it; from a list of source addresses, taken in turn.
bench/bench_health_flood.py and tests/integration/test_health_flood.py hold the agent's health
port with it, and a fresh client's probe (``probe``) must still get its answer.

It runs in one thread of the calling process, on non-blocking sockets, spread over the interval
in slices, so thousands of clients cost one process a few percent of a CPU. Raise the process's
RLIMIT_NOFILE first (``open_files``): each client holds a descriptor.
"""

from __future__ import annotations

import contextlib
import errno
import math
import resource
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pyflannel_runtime.netlink.netns import run_in_netns

_SLICE_SECONDS = 0.02
_REQUEST_LINE = b"GET /readyz HTTP/1.1\r\n"


@dataclass
class TrickleCounts:
    connects: int = 0  # connections started
    lines: int = 0  # lines sent
    closed: int = 0  # connections found closed (or refused) by the server
    open_now: int = 0  # connections this side holds open at the end of the last round
    rounds: int = 0  # times every client had its turn


@dataclass
class Trickle:
    port: int
    sources: Sequence[str]
    count: int
    interval: float = 1.0
    host: str = "127.0.0.1"
    counts: TrickleCounts = field(default_factory=TrickleCounts)
    _socks: list[socket.socket | None] = field(init=False, default_factory=list)
    _sent: list[int] = field(init=False, default_factory=list)

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set; every socket is closed on the way out."""
        self._socks = [None] * self.count
        self._sent = [0] * self.count
        per_slice = max(1, math.ceil(self.count * _SLICE_SECONDS / self.interval))
        turn, next_slice = 0, time.monotonic()
        try:
            while not stop.is_set():
                for _ in range(per_slice):
                    self._step(turn)
                    turn = (turn + 1) % self.count
                    if turn == 0:
                        self.counts.rounds += 1
                        self.counts.open_now = sum(s is not None for s in self._socks)
                next_slice += _SLICE_SECONDS
                stop.wait(max(0.0, next_slice - time.monotonic()))
        finally:
            for sock in self._socks:
                if sock is not None:
                    sock.close()

    def _step(self, n: int) -> None:
        sock = self._socks[n]
        if sock is None:
            self._connect(n)
            return
        line = _REQUEST_LINE if self._sent[n] == 0 else b"X-Trickle-%d: 1\r\n" % self._sent[n]
        try:
            sock.send(line)
        except BlockingIOError:  # still connecting, or the server reads nothing
            return
        except OSError:
            sock.close()
            self._socks[n] = None
            self.counts.closed += 1
            return
        self._sent[n] += 1
        self.counts.lines += 1

    def _connect(self, n: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.bind((self.sources[n % len(self.sources)], 0))
            code = sock.connect_ex((self.host, self.port))
        except OSError:
            code = errno.EADDRNOTAVAIL
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.counts.closed += 1
            return
        self._socks[n] = sock
        self._sent[n] = 0
        self.counts.connects += 1


@contextlib.contextmanager
def trickling(trickle: Trickle, netns: str | None = None) -> Iterator[Trickle]:
    """The trickle running in a thread (its sockets in ``netns``) until the block exits."""
    stop = threading.Event()
    worker = threading.Thread(
        target=run_in_netns, args=(netns, lambda: trickle.run(stop)), name="trickle", daemon=True
    )
    worker.start()
    try:
        yield trickle
    finally:
        stop.set()
        worker.join()


def probe(
    port: int, path: str = "/readyz", source: str = "127.0.0.9", timeout: float = 10.0
) -> bytes:
    """A fresh client's whole exchange with the server on loopback, from ``source``: the raw
    answer (empty when the server closed without one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: probe\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


@contextlib.contextmanager
def open_files(needed: int) -> Iterator[int]:
    """This process's soft RLIMIT_NOFILE raised to ``needed`` where its hard limit allows, and
    put back on the way out; yields the soft limit in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = max(soft, needed if hard == resource.RLIM_INFINITY else min(needed, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    try:
        yield raised
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
