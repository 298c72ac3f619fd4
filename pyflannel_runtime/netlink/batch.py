"""Batched rtnetlink writes over one raw NETLINK_ROUTE socket.

Many requests go out in one sendmsg, each with its own sequence number. The kernel handles
them in order, keeps going after a failure, and reports every failure whether or not an ACK
was asked for; so only the last request of a datagram asks for one, and its ACK means all
answers for that datagram are in. An error maps back to its op by sequence number. This
saves a recv per request, which is most of the Python-side cost.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from pyflannel_runtime.netlink.encoder import encode_op, parse_acks
from pyflannel_runtime.netlink.entries import Action, Op
from pyflannel_runtime.netlink.netns import run_in_netns

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
NETLINK_CAP_ACK = 10
SO_RCVBUFFORCE = 33

# 256 requests per datagram: even if every one fails, the error answers fit the receive
# buffer with a wide margin; larger batches gain nothing measurable.
DEFAULT_BATCH = 256
_RCVBUF = 4 << 20
# A delete of something already gone has reached its goal.
_GONE = frozenset({errno.ENOENT, errno.ESRCH})


@dataclass(frozen=True)
class OpFailure:
    op: Op
    errno: int
    message: str

    def __str__(self) -> str:
        detail = f" ({self.message})" if self.message else ""
        return f"{self.op.action.value} {self.op.entry}: {os.strerror(self.errno)}{detail}"


def open_route_socket(netns: str | None = None) -> socket.socket:
    def create() -> socket.socket:
        sock = socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE
        )
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, _RCVBUF)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        sock.bind((0, 0))
        return sock

    return run_in_netns(netns, create)


class BatchSender:
    """Sends ops in order and reports the ones the kernel refused. Blocking; not thread-safe."""

    def __init__(self, sock: socket.socket, batch_size: int = DEFAULT_BATCH) -> None:
        self._sock = sock
        self._batch_size = batch_size
        self._seq = 0

    @classmethod
    def open(cls, netns: str | None = None, batch_size: int = DEFAULT_BATCH) -> BatchSender:
        return cls(open_route_socket(netns), batch_size)

    def close(self) -> None:
        self._sock.close()

    @property
    def port_id(self) -> int:
        """The socket's netlink port: the kernel's notifications of these writes carry it."""
        port: int = self._sock.getsockname()[0]
        return port

    def send(self, ops: Sequence[Op]) -> list[OpFailure]:
        failures: list[OpFailure] = []
        for start in range(0, len(ops), self._batch_size):
            failures.extend(self._send_chunk(ops[start : start + self._batch_size]))
        return failures

    def _send_chunk(self, ops: Sequence[Op]) -> list[OpFailure]:
        sent: dict[int, Op] = {}
        parts = []
        last = len(ops) - 1
        for i, op in enumerate(ops):
            self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
            sent[self._seq] = op
            parts.append(encode_op(op, self._seq, ack=i == last))
        final_seq = self._seq
        self._sock.send(b"".join(parts))
        failures = []
        done = False
        while not done:
            for ack in parse_acks(self._sock.recv(1 << 20)):
                failed = sent.get(ack.seq)
                done = done or ack.seq == final_seq
                if failed is None or ack.errno == 0:
                    continue
                if failed.action is Action.DELETE and ack.errno in _GONE:
                    continue
                failures.append(OpFailure(failed, ack.errno, ack.message))
        return failures
