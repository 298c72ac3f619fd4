"""The agent-only lab: `scripts/lab netns up` then `scripts/lab netns down`, leaving nothing
behind.

Other labs may come and go on the machine meanwhile (other checkouts run the same tests), so
what is compared is this lab's own: the namespaces, processes and directories named by its
state file and its token."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.etcd]

# The lab runs from the checkout: no wheel installs it.
ROOT = Path(__file__).resolve().parents[2]
NETNS_LAB = [sys.executable, "-m", "pyflannel_lab", "netns"]
SUMMARY = "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready"


def _netns() -> set[str]:
    return {
        line.split()[0]
        for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True
        ).stdout.splitlines()
        if line
    }


def _alive(pid: int, marker: str) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_lab_up_prints_status_and_reachability_then_down_cleans_up(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    env = dict(os.environ, PYFLANNEL_NETNS_LAB_STATE=str(state_file))
    up = subprocess.run(
        [*NETNS_LAB, "up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    state = json.loads(state_file.read_text()) if state_file.exists() else None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None
        assert SUMMARY in up.stdout
        assert "all pods reach each other" in up.stdout
        # Each agent's log is named, and is where the agent writes.
        logs = up.stdout.split("\nAgent logs (tail -f to follow):\n")[1].split("\n\n")[0]
        named = dict(line.split() for line in logs.splitlines())
        assert sorted(named) == sorted(name for name in state["pids"] if name != "etcd")
        assert all(
            "Exiting" not in Path(log).read_text() and Path(log).stat().st_size
            for log in named.values()
        )
        # The status command is printed in full, and pasted as it is, it runs the same.
        (shown,) = [line[2:] for line in up.stdout.splitlines() if line.startswith("$ ")]
        assert shown == state["status_command"]
        pasted = subprocess.run(shlex.split(shown), capture_output=True, text=True, timeout=120)
        assert pasted.returncode == 0, pasted.stdout + pasted.stderr
        assert pasted.stdout.endswith(f"\n{SUMMARY}\n")
        again = subprocess.run(
            [*NETNS_LAB, "up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 1 and "already up" in again.stderr
    finally:
        down = subprocess.run(
            [*NETNS_LAB, "down"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert not state_file.exists()
    assert state is not None
    assert state["namespaces"] and all(ns.startswith(state["token"]) for ns in state["namespaces"])
    assert not {ns for ns in _netns() if ns.startswith(f"{state['token']}-")}
    for name, pid in state["pids"].items():
        assert not _alive(pid, "etcd" if name == "etcd" else "pyflannel_runtime.agent.main"), name
    assert not [d for d in state["dirs"] if Path(d).exists()]
