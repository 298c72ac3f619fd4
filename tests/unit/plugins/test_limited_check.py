"""A limited run (--limit) still checks the whole inventory as one cluster: the hosts outside
the play get their settings from the inventory (templates in their own context, hostvars
included, under the preflight role's defaults and the extra vars), so a problem on one of them
fails the run, and every node's lease identity is exported. Run on the example inventory
without reaching the hosts, as tests/unit/plugins/test_example_inventory.py does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.plugins.test_example_inventory import CHECK_PLAYBOOK, INVENTORY, ansible_playbook

SHOW_NODES = """
    - name: Show every node's identity
      ansible.builtin.debug:
        var: ansible_facts._flannel_nodes
"""


def check(tmp_path: Path, *args: str, host_vars: dict[str, Any] | None = None) -> str:
    """``rc=N`` and the run's JSON report (ansible.builtin.json)."""
    playbook = tmp_path / "check.yml"
    playbook.write_text(CHECK_PLAYBOOK + SHOW_NODES)
    extra = tmp_path / "hosts.yml"
    extra.write_text(json.dumps({"all": {"hosts": host_vars or {}}}))
    done = ansible_playbook(
        "-i", str(INVENTORY), "-i", str(extra), *args, str(playbook), json_report=True
    )
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def test_a_limited_check_computes_the_other_nodes_settings(tmp_path: Path) -> None:
    out = check(tmp_path, "--limit", "node1")
    assert out.startswith("rc=0"), out
    report, _ = json.JSONDecoder().raw_decode(out.split("\n", 1)[1])
    shown = report["plays"][0]["tasks"][-1]["hosts"]["node1"]
    nodes = shown["ansible_facts._flannel_nodes"]
    assert sorted(nodes) == ["node1", "node2", "node3"]
    assert nodes["node3"]["address"] == "192.0.2.13" and nodes["node3"]["subnet"] is None


def test_a_problem_on_a_node_outside_the_limit_fails_the_limited_run(tmp_path: Path) -> None:
    pins = {name: {"flannel_node_subnet": "10.233.70.0/24"} for name in ("node2", "node3")}
    out = check(tmp_path, "--limit", "node1", host_vars=pins)
    assert out.startswith("rc=2"), out
    assert "node3: flannel_node_subnet: 10.233.70.0/24 overlaps node2's" in out, out


def test_extra_vars_reach_the_nodes_outside_the_limit(tmp_path: Path) -> None:
    """An -e value is every host's: the others agree with the limited host."""
    out = check(tmp_path, "--limit", "node1", "-e", "flannel_backend_type=host-gw")
    assert out.startswith("rc=0"), out
    node2_only = {"node2": {"flannel_backend_type": "udp"}}
    out = check(tmp_path, "--limit", "node1", host_vars=node2_only)
    assert out.startswith("rc=2") and "node2: flannel_backend_type: 'udp' here but" in out, out
