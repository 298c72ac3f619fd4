"""The disruption probe's pure parts: the connections a node holds open, the messages they
carry, each connection's account of a window, and the tables that report it. Pure.

Each connection is a TCP connection to a responder (``connectivity.responder``, command
``ECHO``) that sends a small numbered message every ``INTERVAL`` seconds and checks that each
echo comes back intact and in order. A window runs from the probe's opening (or the previous
check) to a check; for each connection it counts what was sent, echoed and lost, whether the
connection was reset, and the longest gap between two echoes. A gap still going on when the
window is reported counts up to that moment, so a connection that stalls and never recovers
shows a gap as long as the stall.

Results cross from the nodes to the controller as Ansible facts: dicts of JSON types
(``Report.as_dict`` and ``Report.of``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyflannel_runtime.connectivity.wire import WireError

INTERVAL = 0.1  # seconds between two messages on a connection
MAGIC = b"PFD1"
MESSAGE = struct.Struct("!4sIQ")  # magic, the connection's nonce, sequence number
OUTSIDE = "outside"  # the target of the pod-outside path
MAX_REASONS = 3  # why a connection broke: the first few reasons are kept


class Path(enum.Enum):
    POD_POD = "pod-pod"
    POD_POD_LOCAL = "pod-pod-local"
    POD_OUTSIDE = "pod-outside"
    HOST_POD = "host-pod"


TITLES = {
    Path.POD_POD: "pod→pod across nodes",
    Path.POD_POD_LOCAL: "pod→pod on the same node",
    Path.POD_OUTSIDE: "pod→outside, masqueraded",
    Path.HOST_POD: "host→remote pod",
}


def message(nonce: int, sequence: int) -> bytes:
    return MESSAGE.pack(MAGIC, nonce, sequence)


def parse_message(data: bytes) -> tuple[int, int]:
    """(nonce, sequence) of a message; WireError for anything else."""
    if len(data) != MESSAGE.size or not data.startswith(MAGIC):
        raise WireError(f"not a disruption probe message: {data[:16]!r}")
    _, nonce, sequence = MESSAGE.unpack(data)
    return nonce, sequence


# --- where a node's connections go ----------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One connection: what path it takes, from where (a probe pod's namespace, or the host:
    None) to which node's responder (or the outside stand-in's)."""

    path: Path
    source: str  # this node
    target: str  # a node, or OUTSIDE
    netns: str | None
    address: str
    port: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path.value,
            "source": self.source,
            "target": self.target,
            "netns": self.netns,
            "address": self.address,
            "port": self.port,
        }

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Target:
        netns = value.get("netns")
        return cls(
            Path(value["path"]),
            str(value["source"]),
            str(value["target"]),
            None if netns is None else str(netns),
            str(value["address"]),
            int(value["port"]),
        )


def _pods(setup: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(namespace, address, echo port) of a node's probe pods."""
    return [(str(p["name"]), str(p["ip"]), int(p["tcp_port"])) for p in setup["pods"]]


def targets(
    node: str, setups: Mapping[str, Mapping[str, Any]], outside: tuple[str, int] | None
) -> list[Target]:
    """The connections `node` opens, from every node's setup (its probe pods and their
    responder's port): from its first pod to every other node's first pod and to its own
    second pod, to `outside` (address, port) when given, and from its host to every other
    node's first pod. KeyError when `node` has no setup."""
    (pod, _, _), (_, neighbour, neighbour_port) = _pods(setups[node])[:2]
    found = [Target(Path.POD_POD_LOCAL, node, node, pod, neighbour, neighbour_port)]
    peers = sorted(name for name in setups if name != node)
    for peer in peers:
        _, address, port = _pods(setups[peer])[0]
        found.append(Target(Path.POD_POD, node, peer, pod, address, port))
    if outside is not None:
        found.append(Target(Path.POD_OUTSIDE, node, OUTSIDE, pod, *outside))
    for peer in peers:
        _, address, port = _pods(setups[peer])[0]
        found.append(Target(Path.HOST_POD, node, peer, None, address, port))
    return found


def parse_outside(text: str) -> tuple[str, int] | None:
    """``ADDRESS:PORT`` of the outside stand-in's responder; None without a port (nothing
    there echoes), ValueError for a text that is neither."""
    if not text:
        return None
    address, _, port = text.partition(":")
    if not address:
        raise ValueError(f"not ADDRESS[:PORT]: {text!r}")
    return (address, int(port)) if port else None


# --- one connection's account ---------------------------------------------------------------


@dataclass
class Account:
    """What happened on one connection since the window began; every method takes the time
    (seconds on a monotonic clock)."""

    started: float
    last_echo: float  # the last echo's arrival, or when the connection first opened
    up: bool = False
    sent: int = 0
    echoed: int = 0
    lost: int = 0
    resets: int = 0
    reconnects: int = 0
    outstanding: int = 0  # sent on the current connection and not echoed yet
    longest_gap: float = 0.0
    reasons: list[str] = field(default_factory=list)  # why it broke, the first few times
    still_down: str = ""  # why opening it again failed, the last time it was tried

    @classmethod
    def opened(cls, now: float) -> Account:
        return cls(started=now, last_echo=now, up=True)

    @classmethod
    def unopened(cls, now: float, reason: str) -> Account:
        """A connection that could not be opened: it counts as down from the start."""
        return cls(started=now, last_echo=now, still_down=reason)

    def on_sent(self) -> None:
        self.sent += 1
        self.outstanding += 1

    def on_echo(self, now: float) -> None:
        self.echoed += 1
        self.outstanding -= 1
        self.longest_gap = max(self.longest_gap, now - self.last_echo)
        self.last_echo = now

    def on_broken(self, reason: str) -> None:
        """The connection ended (reset, closed, a wrong echo): what it had not echoed is lost."""
        if not self.up:
            return
        self.up = False
        self.resets += 1
        self.lost += self.outstanding
        self.outstanding = 0
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(reason)

    def on_reconnected(self) -> None:
        self.up = True
        self.reconnects += 1
        self.still_down = ""

    def on_unreachable(self, reason: str) -> None:
        """Opening the connection (again) failed."""
        self.still_down = reason

    def gap_now(self, now: float) -> float:
        """The gap still going on: echoes are awaited, or the connection is down."""
        if self.outstanding or not self.up:
            return now - self.last_echo
        return 0.0

    def report(self, now: float) -> Report:
        """The window up to `now`."""
        return Report(
            sent=self.sent,
            echoed=self.echoed,
            lost=self.lost,
            pending=self.outstanding,
            resets=self.resets,
            reconnects=self.reconnects,
            longest_gap=round(max(self.longest_gap, self.gap_now(now)), 3),
            seconds=round(now - self.started, 3),
            up=self.up,
            reasons=(*self.reasons, *([self.still_down] if self.still_down else [])),
        )

    def next_window(self, now: float) -> None:
        """Start a new window at `now`; a gap going on goes on counting from where it began."""
        self.started = now
        self.sent = self.echoed = self.lost = self.resets = self.reconnects = 0
        self.longest_gap = 0.0
        self.reasons = []


@dataclass(frozen=True)
class Report:
    """One connection's window, without saying which connection (``Row`` does)."""

    sent: int
    echoed: int
    lost: int
    pending: int  # sent, not echoed yet, on a connection still open
    resets: int
    reconnects: int
    longest_gap: float
    seconds: float
    up: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A connection and its window."""

    target: Target
    report: Report

    def as_dict(self) -> dict[str, Any]:
        report = self.report
        return {
            **self.target.as_dict(),
            "sent": report.sent,
            "echoed": report.echoed,
            "lost": report.lost,
            "pending": report.pending,
            "resets": report.resets,
            "reconnects": report.reconnects,
            "longest_gap": report.longest_gap,
            "seconds": report.seconds,
            "up": report.up,
            "reasons": list(report.reasons),
        }

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Row:
        return cls(
            Target.of(value),
            Report(
                sent=int(value["sent"]),
                echoed=int(value["echoed"]),
                lost=int(value["lost"]),
                pending=int(value["pending"]),
                resets=int(value["resets"]),
                reconnects=int(value["reconnects"]),
                longest_gap=float(value["longest_gap"]),
                seconds=float(value["seconds"]),
                up=bool(value["up"]),
                reasons=tuple(str(r) for r in value.get("reasons") or ()),
            ),
        )

    @property
    def disturbed(self) -> bool:
        """Reset, or something lost or still awaited, or down."""
        report = self.report
        return bool(report.resets or report.lost or report.pending or not report.up)


# --- tables -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathSummary:
    """Every connection of one path, taken together."""

    path: Path
    connections: int
    resets: int
    longest_gap: float
    lost: int
    pending: int
    down: int


def summarize(rows: Iterable[Row]) -> list[PathSummary]:
    """One line per path (in the order of ``Path``) over the rows that take it."""
    by_path: dict[Path, list[Row]] = {}
    for row in rows:
        by_path.setdefault(row.target.path, []).append(row)
    return [
        PathSummary(
            path,
            len(group),
            sum(r.report.resets for r in group),
            max(r.report.longest_gap for r in group),
            sum(r.report.lost for r in group),
            sum(r.report.pending for r in group),
            sum(not r.report.up for r in group),
        )
        for path in Path
        if (group := by_path.get(path))
    ]


def _cell(row: Row) -> str:
    report = row.report
    text = f"{report.resets} reset, gap {report.longest_gap:.2f} s, {report.lost} lost"
    if report.pending:
        text += f", {report.pending} awaited"
    if not report.up:
        text += ", down"
    return text


def table_lines(rows: Sequence[Row], title: str = "disruption probe") -> list[str]:
    """A line per connection (path, from, to: resets, the longest gap, messages lost, and
    why it broke), then a line per path over all of its connections."""
    if not rows:
        return [f"{title}: no connections"]
    summaries = summarize(rows)
    ends = [f"{r.target.source}→{r.target.target}" for r in rows]
    counts = [f"{s.connections} connections" for s in summaries]
    width = max(len(TITLES[r.target.path]) for r in rows)
    end_width = max(len(text) for text in ends + counts)
    seconds = max(r.report.seconds for r in rows)
    lines = [f"{title}: {len(rows)} connections, a message every {INTERVAL:g} s, "
             f"over {seconds:.1f} s"]  # fmt: skip
    for row, end in zip(rows, ends, strict=True):
        line = f"  {TITLES[row.target.path]:<{width}}  {end:<{end_width}}  {_cell(row)}"
        if row.report.reasons:
            line += f" ({'; '.join(row.report.reasons)})"
        lines.append(line)
    for summary, count in zip(summaries, counts, strict=True):
        line = (
            f"  {TITLES[summary.path]:<{width}}  {count:<{end_width}}  {summary.resets} reset, "
            f"longest gap {summary.longest_gap:.2f} s, {summary.lost} lost"
        )
        lines.append(line + (f", {summary.down} down" if summary.down else ""))
    return lines
