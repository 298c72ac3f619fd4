"""remove-node.yml checks the request on the controller before it touches any host: nodes must
be named and be flannel nodes, and the removal confirmed (kubespray's prompt; a run without a
terminal is not a confirmation). Run on the example inventory, whose hosts are never reached."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "example"


def remove(*extra_vars: str) -> subprocess.CompletedProcess[str]:
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY)]
    return subprocess.run(
        [*argv, *(arg for var in extra_vars for arg in ("-e", var)), "remove-node.yml"],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )


def only_the_controller_ran(done: subprocess.CompletedProcess[str]) -> bool:
    recap = done.stdout.rsplit("PLAY RECAP", 1)[-1]
    return "localhost" in recap and "node" not in recap


def test_the_nodes_must_be_named() -> None:
    done = remove()
    assert done.returncode != 0 and "-e node=NAME[,NAME...]" in done.stdout, done.stdout
    assert only_the_controller_ran(done)


def test_only_flannel_nodes_can_be_removed() -> None:
    done = remove("node=node2,node9", "skip_confirmation=true")
    assert done.returncode != 0 and "(not flannel nodes: node9)" in done.stdout, done.stdout
    assert only_the_controller_ran(done)


def test_without_a_terminal_the_removal_is_not_confirmed() -> None:
    done = remove("node=node2")
    assert done.returncode != 0 and "Node removal was not confirmed" in done.stdout, done.stdout
    assert only_the_controller_ran(done)
