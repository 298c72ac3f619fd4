"""pyflannel.network.disruption_summary: the disruption probe's table from every node's check."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.filter.disruption_summary import (
    disruption_summary,
)


def row(source: str, target: str, resets: int = 0, lost: int = 0) -> dict[str, Any]:
    return {
        "path": "pod-pod",
        "source": source,
        "target": target,
        "netns": "pyflannel-disrupt",
        "address": "10.244.2.2",
        "port": 40000,
        "sent": 600,
        "echoed": 600 - lost,
        "lost": lost,
        "pending": 0,
        "resets": resets,
        "reconnects": resets,
        "longest_gap": 0.31,
        "seconds": 60.0,
        "up": True,
        "reasons": ["reset by the far end"] if resets else [],
    }


def test_every_nodes_connections_and_a_line_per_path() -> None:
    lines = disruption_summary(
        {
            "node1": {"changed": False, "rows": [row("node1", "node2")]},
            "node2": {"changed": False, "rows": [row("node2", "node1", resets=1, lost=3)]},
            "node3": {"skipped": True},
        }
    )
    words = [" ".join(line.split()) for line in lines]
    assert words[0].startswith("disruption probe, the connections held open through the run: 2")
    assert words[1] == "pod→pod across nodes node1→node2 0 reset, gap 0.31 s, 0 lost"
    assert words[2].endswith("node2→node1 1 reset, gap 0.31 s, 3 lost (reset by the far end)")
    assert words[3] == "pod→pod across nodes 2 connections 1 reset, longest gap 0.31 s, 3 lost"


def test_nodes_left_out_are_named_with_why() -> None:
    lines = disruption_summary(
        {
            "node1": {
                "failed": True,
                "msg": "the disruption probe pyflannel-disrupt does not answer",
            }
        },
        setups={
            "node1": {"changed": False, "pods": []},
            "node2": {"failed": True, "msg": "CNI ADD for pyflannel-disrupt failed: no subnet.env"},
        },
    )
    assert lines == [
        "node2: left out of the probe, its pods could not be set up: CNI ADD for "
        "pyflannel-disrupt failed: no subnet.env",
        "node1: the probe did not answer its check: the disruption probe pyflannel-disrupt does "
        "not answer",
    ]


def test_nothing_opened_says_nothing() -> None:
    assert (
        disruption_summary({"node1": {"skipped": True}}, setups={"node1": {"skipped": True}}) == []
    )
