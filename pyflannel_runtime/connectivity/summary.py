"""The suite's summary: a matrix with one row per scenario (a column per node for scenarios on
one node, per ordered pair for the others), the time each group of scenarios took, and the
failures grouped by their most likely cause. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyflannel_runtime.connectivity.causes import NodeView, likely_cause
from pyflannel_runtime.connectivity.scenarios import BY_NAME, GROUPS, SCENARIOS, Kind, Row, Verdict

ALL_PODS_REACHED = "every pod reaches every other pod"
SOME_PODS_UNREACHED = "SOME PODS CANNOT REACH EACH OTHER"
# Past this many nodes the pair columns would not fit a terminal: rows give counts instead.
MATRIX_MAX_NODES = 6
_CELL = 6


def _cell(row: Row | None) -> str:
    if row is None:
        return ""
    if row.verdict is Verdict.SKIPPED:
        return "-"
    if row.scenario == "mtu" and row.verdict is Verdict.OK:
        return str(row.data.get("path_mtu", "ok"))
    return str(row.verdict.value)


def _columns(nodes: Sequence[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    single = [(node, node) for node in nodes]
    pairs = [(a, b) for a in nodes for b in nodes if a != b]
    return single, pairs


def matrix_lines(nodes: Sequence[str], rows: Sequence[Row]) -> list[str]:
    """The scenario matrix, or counts per scenario for larger clusters."""
    # A node's own row is found by its source alone (its target may be the outside).
    found = {
        (r.scenario, r.source, r.source if BY_NAME[r.scenario].kind is Kind.NODE else r.target): r
        for r in rows
    }
    title_width = max(len(s.title) for s in SCENARIOS) + 2
    if len(nodes) > MATRIX_MAX_NODES:
        return _count_lines(rows, title_width)
    index = {node: str(n) for n, node in enumerate(nodes, 1)}
    legend = ", ".join(f"{index[n]} {n}" for n in nodes)
    single, pairs = _columns(nodes)
    header = [index[a] for a, _ in single] + [f"{index[a]}→{index[b]}" for a, b in pairs]
    lines = [
        f"connectivity (a column per node, then per path from → to; nodes {legend}):",
        "scenario".ljust(title_width) + "".join(h.ljust(_CELL) for h in header).rstrip(),
    ]
    for scenario in SCENARIOS:
        cells = [
            _cell(found.get((scenario.name, a, b))) if scenario.kind is Kind.NODE else ""
            for a, b in single
        ]
        cells += [
            _cell(found.get((scenario.name, a, b))) if scenario.kind is Kind.PAIR else ""
            for a, b in pairs
        ]
        if any(cells):
            lines.append(
                scenario.title.ljust(title_width) + "".join(c.ljust(_CELL) for c in cells).rstrip()
            )
    return lines


def _count_lines(rows: Sequence[Row], width: int) -> list[str]:
    lines = ["connectivity (paths that passed, of those run):"]
    for scenario in SCENARIOS:
        mine = [r for r in rows if r.scenario == scenario.name and r.verdict is not Verdict.SKIPPED]
        if mine:
            passed = sum(r.verdict is Verdict.OK for r in mine)
            lines.append(f"{scenario.title.ljust(width)}{passed}/{len(mine)}")
    return lines


def timing_line(times: Mapping[str, Mapping[str, float]]) -> str:
    """Each group's time on the slowest node (the nodes run their probes at the same time)."""
    slowest = {g: max((t.get(g, 0.0) for t in times.values()), default=0.0) for g in GROUPS}
    total = max((sum(t.values()) for t in times.values()), default=0.0)
    parts = ", ".join(f"{g} {slowest[g]:.1f} s" for g in GROUPS)
    return f"time per group (slowest node): {parts}; all {total:.1f} s"


def failure_lines(rows: Sequence[Row], views: Mapping[str, NodeView]) -> list[str]:
    """Failed rows grouped by their most likely cause, each scenario's paths on one line with
    the first failure's detail."""
    by_cause: dict[str, dict[str, list[Row]]] = {}
    for row in rows:
        if row.failed:
            cause = likely_cause(row, views)
            by_cause.setdefault(cause, {}).setdefault(row.scenario, []).append(row)
    if not by_cause:
        return []
    titles = {s.name: s for s in SCENARIOS}
    count = sum(len(r) for group in by_cause.values() for r in group.values())
    lines = [f"{count} failed, by most likely cause:"]
    for cause, scenarios in by_cause.items():
        lines.append(f"  {cause}")
        for name, failed in scenarios.items():
            scenario = titles[name]
            where = ", ".join(
                r.source if scenario.kind is Kind.NODE else f"{r.source}→{r.target}" for r in failed
            )
            lines.append(f"    {scenario.title}: {where} ({failed[0].detail})")
    return lines


def verdict_line(rows: Sequence[Row]) -> str:
    """The last line: whether every pod reached every other (the ICMP rows), and whether
    anything else failed."""
    pods = [r for r in rows if r.scenario in ("pod-icmp", "pod-icmp-local")]
    reached = all(r.verdict is Verdict.OK for r in pods)
    others = sum(r.failed for r in rows if r not in pods)
    text = ALL_PODS_REACHED if reached else SOME_PODS_UNREACHED
    if others:
        text += f"; {others} other scenario path{'s' * (others != 1)} FAILED"
    elif reached:
        text += "; every scenario passed"
    return text


def summary_lines(
    nodes: Sequence[str],
    rows: Sequence[Row],
    times: Mapping[str, Mapping[str, float]],
    views: Mapping[str, NodeView],
    notes: Sequence[str] = (),
) -> list[str]:
    return [
        *matrix_lines(nodes, rows),
        *failure_lines(rows, views),
        *notes,
        timing_line(times),
        verdict_line(rows),
    ]
