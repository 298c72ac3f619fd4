"""The agent-only lab: `scripts/lab netns up` then `scripts/lab netns down`, leaving nothing
behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.etcd]

NETNS_LAB = [sys.executable, "-m", "pyflannel_runtime.lab", "netns"]


def _netns() -> set[str]:
    return {
        line.split()[0]
        for line in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True
        ).stdout.splitlines()
        if line
    }


def test_lab_up_prints_status_and_reachability_then_down_cleans_up(tmp_path: Path) -> None:
    env = dict(os.environ, PYFLANNEL_NETNS_LAB_STATE=str(tmp_path / "state.json"))
    before = _netns()
    up = subprocess.run([*NETNS_LAB, "up"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
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
    assert _netns() == before
    assert not (tmp_path / "state.json").exists()
