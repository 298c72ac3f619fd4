"""The suite's own little protocol between a probe and the responder it talks to. Pure.

UDP echo: the probe sends ``ECHO_REQUEST + nonce + payload``; the responder answers with the
nonce, the source address and port it saw, the payload's length and the first bytes of its
SHA-256, so the probe checks the payload end to end and whether it was masqueraded on the way.

Burst datagrams: ``BURST + session + sequence + payload + digest of the rest``: the receiver
counts the session's datagrams and those that arrived intact.

TCP: one command line, then the command's data; the responder answers with one line, or, to
``ECHO``, with ``GO`` and then every byte that follows, sent back as it arrives (the disruption
probe's long-lived connections).
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any

from pyflannel_runtime import PyflannelError

ECHO_REQUEST = b"PFQ1"
ECHO_REPLY = b"PFR1"
BURST = b"PFB1"
NONCE_BYTES = 8
DIGEST_BYTES = 16
_REPLY = struct.Struct(f"!4s{NONCE_BYTES}s4sHH{DIGEST_BYTES}s")
_BURST_HEAD = struct.Struct(f"!4s{NONCE_BYTES}sI")
_BURST_DIGEST = 8
# Commands of the TCP control connection.
STREAM = "STREAM"
SESSION = "BURST"
ECHO = "ECHO"  # answered with GO, then every byte is sent back as it comes
DONE = "DONE"
GO = "GO"
MAX_LINE = 4096


class WireError(PyflannelError, ValueError):
    """A message that is not the suite's, or not the one expected."""


def digest(payload: bytes) -> bytes:
    return hashlib.sha256(payload).digest()[:DIGEST_BYTES]


def echo_request(nonce: bytes, payload: bytes) -> bytes:
    if len(nonce) != NONCE_BYTES:
        raise WireError("the nonce is 8 bytes")
    return ECHO_REQUEST + nonce + payload


def parse_echo_request(data: bytes) -> tuple[bytes, bytes]:
    """(nonce, payload) of an echo request."""
    if not data.startswith(ECHO_REQUEST) or len(data) < len(ECHO_REQUEST) + NONCE_BYTES:
        raise WireError("not an echo request")
    head = len(ECHO_REQUEST) + NONCE_BYTES
    return data[len(ECHO_REQUEST) : head], data[head:]


@dataclass(frozen=True)
class EchoReply:
    nonce: bytes
    seen_address: IPv4Address
    seen_port: int
    length: int
    digest: bytes

    def encode(self) -> bytes:
        return _REPLY.pack(
            ECHO_REPLY,
            self.nonce,
            self.seen_address.packed,
            self.seen_port,
            self.length,
            self.digest,
        )

    @classmethod
    def decode(cls, data: bytes) -> EchoReply:
        if len(data) != _REPLY.size or not data.startswith(ECHO_REPLY):
            raise WireError("not an echo reply")
        _, nonce, address, port, length, hashed = _REPLY.unpack(data)
        return cls(nonce, IPv4Address(address), port, length, hashed)

    def matches(self, nonce: bytes, payload: bytes) -> bool:
        """Whether this answers the request, with the payload intact."""
        return (
            self.nonce == nonce
            and self.length == len(payload) % 65536
            and self.digest == digest(payload)
        )


def answer(request: bytes, source: tuple[str, int]) -> bytes:
    """The responder's answer to an echo request from `source`."""
    nonce, payload = parse_echo_request(request)
    return EchoReply(
        nonce, IPv4Address(source[0]), source[1], len(payload) % 65536, digest(payload)
    ).encode()


def burst_datagram(session: bytes, sequence: int, payload: bytes) -> bytes:
    head = _BURST_HEAD.pack(BURST, session, sequence)
    return head + payload + hashlib.sha256(head + payload).digest()[:_BURST_DIGEST]


def parse_burst_datagram(data: bytes) -> tuple[bytes, int, bool]:
    """(session, sequence, intact) of a burst datagram."""
    if len(data) < _BURST_HEAD.size + _BURST_DIGEST or not data.startswith(BURST):
        raise WireError("not a burst datagram")
    _, session, sequence = _BURST_HEAD.unpack_from(data)
    body, tail = data[:-_BURST_DIGEST], data[-_BURST_DIGEST:]
    return session, sequence, hashlib.sha256(body).digest()[:_BURST_DIGEST] == tail


def command_line(command: str, *args: object) -> bytes:
    return " ".join([command, *(str(a) for a in args)]).encode() + b"\n"


def parse_command(line: bytes) -> tuple[str, list[str]]:
    words = line.decode("ascii", errors="replace").split()
    if not words:
        raise WireError("an empty command")
    return words[0], words[1:]


def report_line(report: dict[str, Any]) -> bytes:
    return json.dumps(report, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def parse_report(line: bytes) -> dict[str, Any]:
    try:
        report = json.loads(line)
    except ValueError:
        raise WireError(f"not a report: {line[:80]!r}") from None
    if not isinstance(report, dict):
        raise WireError(f"not a report: {line[:80]!r}")
    return report
