"""Roles say what they need: the cni and agent roles depend on the runtime role (their
meta/main.yml), and a play that runs one of them without the preflight role fails at its first
task, before any host is reached, saying so. Run on the example inventory, whose hosts (TEST-NET
addresses) cannot be reached: a task that needed a host would fail differently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.plugins.test_example_inventory import INVENTORY, ansible_playbook

ALONE = """
- name: The role alone
  hosts: flannel_nodes
  gather_facts: false
  become: true
  roles:
    - role: {role}
"""


def run_alone(tmp_path: Path, role: str) -> tuple[int, dict[str, Any]]:
    playbook = tmp_path / "alone.yml"
    playbook.write_text(ALONE.format(role=role))
    done = ansible_playbook("-i", str(INVENTORY), str(playbook), json_report=True)
    report, _ = json.JSONDecoder().raw_decode(done.stdout)
    return done.returncode, report


@pytest.mark.parametrize("role", ["pyflannel.network.agent", "pyflannel.network.cni"])
def test_a_role_without_the_preflight_fails_first_saying_so(tmp_path: Path, role: str) -> None:
    rc, report = run_alone(tmp_path, role)
    assert rc == 2, report
    tasks = report["plays"][0]["tasks"]
    *before, last = tasks
    # Only the argument checks ran before, and the early end the controller decides (not taken
    # without the preflight's facts): nothing reached a host.
    # (The json callback lists a meta task once per host.)
    assert list(dict.fromkeys(t["task"]["name"] for t in before)) == [
        "pyflannel.network.runtime : Validating arguments against arg spec 'main' - Install the "
        "pyflannel runtime into its "
        "virtualenv on a node (internal)",
        "pyflannel.network.runtime : Runtime | Nothing to do where this run's wheelhouse is known "
        "and installed",
    ]
    assert last["task"]["name"] == (
        "pyflannel.network.runtime : Runtime | Check that the preflight role ran"
    )
    results = last["hosts"]
    assert sorted(results) == ["node1", "node2", "node3"]
    for host, result in results.items():
        assert result["failed"], result
        assert result["msg"].startswith(
            f"{role} needs the results of the pyflannel.network.preflight role"
        ), result["msg"]
        assert f"run that role on {host} first" in result["msg"]
