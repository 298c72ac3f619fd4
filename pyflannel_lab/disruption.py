"""The disruption probe driven on lab hosts over SSH (``pyflannel_runtime.ops.disruption`` in
each host's agent virtualenv), as the verify role drives it through its module: the probe pods
and their responder on every node, then every node's connections opened, checked after each
operation, and closed. For the lab tests and ``bench/bench_disruption.py``: the table of each
check, and a closing table of every operation."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pyflannel_lab.errors import LabError
from pyflannel_runtime.connectivity.disruption import Row, summarize, table_lines

if TYPE_CHECKING:
    from pyflannel_lab.hosts import LabState

VENV_PYTHON = "/opt/pyflannel/venv/bin/python"
CONFLIST = "/etc/cni/net.d/10-flannel.conflist"
CNI_BIN = "/opt/cni/bin"
NAME = "pyft-disrupt"
LIFETIME = 1800.0
# Seconds: the longest gap the goal allows through restarts, a roll and a settings change. A
# benchmark figure, reported beside the machine's load, never a timed assertion.
GAP_GOAL = 1.0

T = TypeVar("T")


def each(names: Sequence[str], job: Callable[[str], T]) -> dict[str, T]:
    """`job` on every host at once."""
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        return dict(zip(names, pool.map(job, names), strict=True))


def ops_call(lab: LabState, name: str, call: str) -> Any:
    """``pyflannel_runtime.ops.disruption.<call>`` as root on a host; its JSON result."""
    script = (
        "import json\nfrom pyflannel_runtime.ops import disruption\n"
        f"print(json.dumps(disruption.{call}))"
    )
    command = f"{VENV_PYTHON} -c {shlex.quote(script)}"
    done = lab.ssh(lab.host(name)).run(f"sudo sh -c {shlex.quote(command)}")
    if done.returncode != 0:
        raise LabError(f"{name}: disruption.{call.split('(')[0]}: {done.stderr.strip()}")
    return json.loads(done.stdout)


@dataclass
class Probe:
    """The probe on `names`, reaching `outside` (``ADDRESS:PORT``, or empty); every check's
    rows are kept, by operation, for the closing table."""

    lab: LabState
    names: list[str]
    outside: str
    windows: list[tuple[str, list[Row]]] = field(default_factory=list)

    def open(self) -> list[Row]:
        """The pods on every node first, then every node's connections."""
        setup = f"setup({NAME!r}, {CONFLIST!r}, {CNI_BIN!r}, '', lifetime={LIFETIME})"
        setups = each(self.names, lambda n: ops_call(self.lab, n, setup))
        pods = {n: {"pods": s["pods"]} for n, s in setups.items()}
        opened = each(
            self.names,
            lambda n: ops_call(
                self.lab,
                n,
                f"open_probe({NAME!r}, {n!r}, {pods!r}, {self.outside!r}, conflist={CONFLIST!r},"
                f" bin_dir={CNI_BIN!r}, lifetime={LIFETIME})",
            ),
        )
        return [Row.of(row) for n in self.names for row in opened[n]]

    def check(self, operation: str, settle: float = 5.0, names: Sequence[str] = ()) -> list[Row]:
        """Every connection's window since the last check (or the opening), from every node or
        those of `names` (a node that rebooted has no probe left to ask)."""
        asked = list(names or self.names)
        found = each(asked, lambda n: ops_call(self.lab, n, f"check({NAME!r}, {settle})"))
        rows = [Row.of(row) for n in asked for row in found[n]]
        self.windows.append((operation, rows))
        return rows

    def close(self, names: Sequence[str] = ()) -> dict[str, Any]:
        """The probe ended and its pods removed (every node's, or `names`')."""
        call = f"close({NAME!r}, {CONFLIST!r}, {CNI_BIN!r})"
        return each(list(names or self.names), lambda n: ops_call(self.lab, n, call))


def involving(rows: Sequence[Row], node: str) -> list[Row]:
    """The connections with an end on `node`."""
    return [r for r in rows if node in (r.target.source, r.target.target)]


def apart_from(rows: Sequence[Row], node: str) -> list[Row]:
    """The connections with no end on `node`."""
    return [r for r in rows if node not in (r.target.source, r.target.target)]


def shown(operation: str, rows: Sequence[Row]) -> str:
    return "\n".join(table_lines(rows, operation))


def closing_table(windows: Sequence[tuple[str, Sequence[Row]]]) -> str:
    """Each operation and path: resets, the longest gap, messages lost (and connections)."""
    lines = ["operation, path: resets, longest gap, lost (connections)"]
    for operation, rows in windows:
        for summary in summarize(rows):
            lines.append(
                f"  {operation:<52} {summary.path.value:<14} {summary.resets} reset, "
                f"{summary.longest_gap:6.2f} s, {summary.lost} lost ({summary.connections})"
            )
    return "\n".join(lines)


def longest_gap(operation: str, rows: Sequence[Row], goal: float = GAP_GOAL) -> str:
    """The window's longest gap, on which connection, beside the goal and the load average."""
    if not rows:
        return f"{operation}: no connection reported"
    worst = max(rows, key=lambda row: row.report.longest_gap)
    gap, target = worst.report.longest_gap, worst.target
    verdict = "within" if gap <= goal else "over"
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    return (
        f"{operation}: longest gap {gap:.2f} s ({target.path.value} {target.source}→"
        f"{target.target}), {verdict} the {goal:.3g} s goal; load average {load}"
    )
