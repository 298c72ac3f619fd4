"""An HTTP/1.x request head taken in pieces with bounds, and the answers written back: the
health server's wire, without the sockets (agent/health.py has them).

Only what the server needs is read from the head: the method and the target of the request
line. The header lines are counted and measured, never kept, so a client holds at most one
partial line of our memory however long it talks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
TEXT = "text/plain; charset=utf-8"

# METHOD SP request-target SP HTTP-version (RFC 9112 section 3): the method a token, the target
# any visible ASCII.
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([!-~]+) HTTP/[0-9]\.[0-9]")
# A byte no request line holds (CR only ends one): binary, TLS or another protocol is refused
# as soon as it arrives rather than once the size cap is reached.
_NOT_IN_REQUEST_LINE = re.compile(rb"[^ -~\r]")


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """A head's caps: bytes from the request line to the blank line that ends it, included,
    and header lines (the request line and the blank line not counted)."""

    max_bytes: int = 8192
    max_lines: int = 64


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass(frozen=True, slots=True)
class Refusal:
    """The head is not taken: 400 (malformed) or 431 (past a cap)."""

    status: int


class HeadReader:
    """Takes a request head as it arrives, in pieces of any size, and tells what it was as soon
    as that is known: the same outcome however the bytes are split."""

    __slots__ = ("_consumed", "_limits", "_lines", "_partial", "_request")

    def __init__(self, limits: HeadLimits) -> None:
        self._limits = limits
        self._partial = bytearray()  # the line being received
        self._consumed = 0  # bytes of the complete lines before it
        self._lines = 0  # complete lines, the request line included
        self._request: Request | None = None

    @property
    def started(self) -> bool:
        return bool(self._consumed or self._partial)

    def room(self) -> int:
        """How many bytes to read next: one past the cap at most, which is how a head that
        does not fit is told from one that just fits."""
        return max(1, self._limits.max_bytes + 1 - self._consumed - len(self._partial))

    def feed(self, data: bytes) -> Request | Refusal | None:
        """The outcome once known, else None (send more). Bytes after the head are ignored."""
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._partial += data[start:end]
            start = end + 1
            outcome = self._line_done()
            if outcome is not None:
                return outcome
        # Only the new bytes are searched: a client sending a byte at a time costs linear time.
        if self._lines == 0 and _NOT_IN_REQUEST_LINE.search(data, start):
            return Refusal(400)
        self._partial += data[start:]
        if self._consumed + len(self._partial) > self._limits.max_bytes:
            return Refusal(431)
        return None

    def _line_done(self) -> Request | Refusal | None:
        line = bytes(self._partial.removesuffix(b"\r"))
        self._consumed += len(self._partial) + 1
        self._partial.clear()
        self._lines += 1
        if self._consumed > self._limits.max_bytes:
            return Refusal(431)
        if self._lines == 1:
            match = _REQUEST_LINE.fullmatch(line)
            if match is None:
                return Refusal(400)
            self._request = Request(match[1].decode("ascii"), match[2].decode("ascii"))
            return None
        if not line:
            return self._request
        if self._lines - 1 > self._limits.max_lines:
            return Refusal(431)
        return None


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes

    def encode(self, *, with_body: bool = True) -> bytes:
        """The response as the health server has always written it; without the body for HEAD
        (its Content-Length still the body's, as RFC 9110 section 9.3.2 has it)."""
        head = (
            f"HTTP/1.1 {self.status} {REASONS[self.status]}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        return head + self.body if with_body else head


def status_answer(status: int) -> Answer:
    """An answer whose body is its status line's text, as Go's net/http words its own errors
    ("400 Bad Request")."""
    return Answer(status, TEXT, f"{status} {REASONS[status]}".encode())
