"""The README's main job as a user runs it: `./scripts/lab up`, `status`, `logs`, `down`.

It uses the lab's default places (`.lab/hosts`, `inventories/lab/hosts.yml`), as the README's
command does, so it steps aside when a developer's lab is already up there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyflannel_lab import hosts
from pyflannel_lab.paths import LabPaths

pytestmark = [pytest.mark.root, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "lab"


def lab(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    for name in ("PYFLANNEL_LAB_STATE", "PYFLANNEL_LAB_INVENTORY"):
        env.pop(name, None)
    return subprocess.run(
        [str(SCRIPT), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


@pytest.mark.timeout(2400)
def test_lab_up_status_logs_down() -> None:
    paths = LabPaths.default()
    if hosts.load(paths) is not None:
        pytest.skip("a lab is already up in the default place; not touching it")
    bridge = None
    try:
        up = lab("up")
        output = up.stdout + up.stderr
        assert up.returncode == 0, output[-8000:]
        assert "ansible-playbook -i inventories/lab site.yml" in output
        assert "every pod reaches every other pod" in output
        assert "3 leases, 2 peers programmed, 0 missing, 0 stale" in output
        state = hosts.load(paths)
        assert state is not None and link_exists(state.bridge)
        bridge = state.bridge

        status = lab("status")
        output = status.stdout + status.stderr
        assert status.returncode == 0, output[-8000:]
        assert "every pod reaches every other pod" in output
        recap = output.rsplit("PLAY RECAP", 1)[-1]
        assert recap.count("changed=0") == 3, recap

        logs = lab("logs", "node2", "200")
        assert logs.returncode == 0, logs.stdout + logs.stderr
        assert "Wrote subnet file to /run/flannel/subnet.env" in logs.stdout
    finally:
        down = lab("down", timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    assert hosts.load(paths) is None
    assert not (ROOT / "inventories" / "lab" / "hosts.yml").exists()
    assert not (ROOT / "inventories" / "lab-credentials").exists()
    assert bridge is None or not link_exists(bridge)
