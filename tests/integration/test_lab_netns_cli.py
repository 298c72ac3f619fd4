"""The agent-only lab: `scripts/lab netns up` then `scripts/lab netns down`, leaving nothing
behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.etcd]

NETNS_LAB = [sys.executable, "-m", "pyflannel_runtime.lab", "netns"]


def _netns(token: str) -> set[str]:
    """The lab's namespaces (other labs on this machine come and go meanwhile)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.startswith(f"{token}-")}


def test_lab_up_prints_status_and_reachability_then_down_cleans_up(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    env = dict(os.environ, PYFLANNEL_NETNS_LAB_STATE=str(state))
    up = subprocess.run([*NETNS_LAB, "up"], env=env, capture_output=True, text=True, timeout=300)
    token = json.loads(state.read_text())["token"] if state.exists() else ""
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"pyflannel lab {token}: backend vxlan" in up.stdout
        assert len(_netns(token)) == 7  # underlay, three hosts, three pods
        assert "3 leases, 2 peers programmed, 0 missing, 0 stale" in up.stdout
        assert "all pods reach each other" in up.stdout
        again = subprocess.run(
            [*NETNS_LAB, "up"], env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 1 and "already up" in again.stderr
    finally:
        down = subprocess.run(
            [*NETNS_LAB, "down"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert _netns(token) == set()
    assert not state.exists()
