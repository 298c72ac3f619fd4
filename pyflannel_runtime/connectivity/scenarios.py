"""The suite's scenarios and its results, as plain data. Pure.

Each scenario is a named row of the summary: either one verdict per node (``NODE``: both ends
on the node, or the far end outside the cluster) or one per ordered pair of nodes (``PAIR``:
from the row's node to the column's). Scenarios run group by group; a group's time is what
the summary reports.

Results cross from the nodes to the controller as Ansible facts, so they are dicts of JSON
types: ``Row.as_dict`` and ``Row.of``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.Enum):
    NODE = "node"
    PAIR = "pair"


# The scenario groups in the order they run; the summary reports the time of each.
GROUPS = ("pods", "hosts", "outside", "mtu", "checksums")


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    group: str
    kind: Kind


# Sizes the scenarios send: a TCP stream long enough to need full-size segments, UDP payloads
# from small to the largest that fits the pod MTU unfragmented (set per run), a burst.
TCP_STREAM_BYTES = 1 << 20
UDP_SIZES = (32, 512)
BURST_DATAGRAMS = 200
BURST_PAYLOAD = 512

SCENARIOS = (
    Scenario("pod-icmp-local", "pod→pod ICMP, same node", "pods", Kind.NODE),
    Scenario("pod-tcp-local", "pod→pod TCP 1 MiB, same node", "pods", Kind.NODE),
    Scenario("pod-udp-local", "pod→pod UDP, same node", "pods", Kind.NODE),
    Scenario("pod-icmp", "pod→pod ICMP", "pods", Kind.PAIR),
    Scenario("pod-tcp", "pod→pod TCP 1 MiB", "pods", Kind.PAIR),
    Scenario("pod-udp", "pod→pod UDP, pod source kept", "pods", Kind.PAIR),
    Scenario("pod-host", "pod→remote host, masqueraded", "hosts", Kind.PAIR),
    Scenario("host-pod", "host→remote pod", "hosts", Kind.PAIR),
    Scenario("pod-outside", "pod→outside, masqueraded", "outside", Kind.NODE),
    Scenario("mtu", "MTU, DF at pod MTU and 1 more", "mtu", Kind.PAIR),
    Scenario("udp-checksum", "UDP checksums, 200-datagram burst", "checksums", Kind.PAIR),
)
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
OUTSIDE = "outside"  # the target of pod-outside


class Verdict(enum.Enum):
    OK = "ok"
    FAIL = "FAIL"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Row:
    """One verdict: a scenario from a node to a node (the same one for NODE scenarios)."""

    scenario: str
    source: str
    target: str
    verdict: Verdict
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAIL

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "source": self.source,
            "target": self.target,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "data": dict(self.data),
        }

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Row:
        return cls(
            scenario=str(value["scenario"]),
            source=str(value["source"]),
            target=str(value["target"]),
            verdict=Verdict(value["verdict"]),
            detail=str(value.get("detail", "")),
            data=dict(value.get("data") or {}),
        )


def combine(*parts: tuple[bool, str]) -> tuple[Verdict, str]:
    """A row's verdict from its checks (passed, text): it fails when any check fails, and
    says first what failed."""
    failed = [text for ok, text in parts if not ok]
    if failed:
        return Verdict.FAIL, "; ".join(failed)
    return Verdict.OK, "; ".join(text for _, text in parts)
