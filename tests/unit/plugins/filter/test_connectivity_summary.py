"""pyflannel.network.connectivity_summary: the suite's summary from each node's verify results."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.filter.connectivity_summary import (
    connectivity_summary,
)

CLUSTER = {"flannel_iptables_forward_rules": True}


def row(
    scenario: str, source: str, target: str, verdict: str = "ok", **data: Any
) -> dict[str, Any]:
    return {"scenario": scenario, "source": source, "target": target, "verdict": verdict,
            "detail": "200 of 200 datagrams lost", "data": data}  # fmt: skip


def host(name: str, peer: str, rows: list[dict[str, Any]], **run: Any) -> dict[str, Any]:
    return {
        "routes": {
            "agent": {"state": "ready"},
            "subnet_env": {"FLANNEL_SUBNET": "10.244.1.1/24", "FLANNEL_MTU": "1450"},
        },
        "suite": {
            "pods": [{"ip": "10.244.1.2"}],
            "pod_mtu": 1450,
            "host": {"address": "198.51.100.11"},
            "firewall": {"readable": True, "forward_drop": [], "forward_rules": True, "masquerade": True},
            "offload": {"device": "flannel.1", "enabled": True, "mode": "auto"},
        },
        "connectivity": {"rows": rows, "times": {"pods": 0.2}, **run},
    }  # fmt: skip


def test_the_matrix_the_causes_and_what_auto_did() -> None:
    reports = {
        "h1": host("h1", "h2", [row("pod-icmp", "h1", "h2"),
                                row("udp-checksum", "h1", "h2", "FAIL", pod_csum_errors=200)]),
        "h2": host("h2", "h1", [row("pod-icmp", "h2", "h1"), row("udp-checksum", "h2", "h1")],
                   offload_change="turned tx checksum offload off on flannel.1 (auto): why"),
        "h3": {"connectivity": {"failed": True, "msg": "no rows"}},
    }  # fmt: skip
    lines = connectivity_summary(reports, cluster=CLUSTER)
    assert lines[0].endswith("nodes 1 h1, 2 h2):")
    assert any(
        line.startswith("UDP checksums") and line.split()[-2:] == ["FAIL", "ok"] for line in lines
    )
    assert lines[lines.index("1 failed, by most likely cause:") + 1].startswith(
        "  UDP from h1 arrives"
    )
    assert "h2: turned tx checksum offload off on flannel.1 (auto): why" in lines
    assert lines[-1] == "every pod reaches every other pod; 1 other scenario path FAILED"


def test_nothing_when_the_suite_did_not_run() -> None:
    reports = {"h1": {"connectivity": {"skipped": True}}}
    assert connectivity_summary(reports, cluster=CLUSTER) == []
