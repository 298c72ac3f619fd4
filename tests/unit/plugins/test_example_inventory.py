"""inventories/example passes the preflight's cluster check, as an operator copying it would
run it (the preflight's own settings task, then its action), without reaching the hosts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "example"


CHECK_PLAYBOOK = """
- name: The inventory through the preflight's cluster check, without reaching the hosts
  hosts: flannel_nodes
  gather_facts: false
  connection: local
  become: false
  tasks:
    - name: Collect the settings as the preflight role does
      ansible.builtin.include_role:
        name: pyflannel.network.preflight
        tasks_from: settings.yml
    - name: Check them as one cluster
      pyflannel.network.preflight:
        group: flannel_nodes
        facts: false
"""


def check_example_inventory(tmp_path: Path, *extra_vars: str) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "check.yml"
    playbook.write_text(CHECK_PLAYBOOK)
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(INVENTORY)]
    return subprocess.run(
        [*argv, *(arg for var in extra_vars for arg in ("-e", var)), str(playbook)],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_example_inventory_passes_the_preflight_cluster_check(tmp_path: Path) -> None:
    done = check_example_inventory(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for node in ("node1", "node2", "node3"):
        assert re.search(rf"^{node} +: ok=3 +changed=0 .* failed=0 ", done.stdout, re.M)
    refused = check_example_inventory(tmp_path, "flannel_subnet_len=8")
    assert refused.returncode != 0 and "flannel_subnet_len" in refused.stdout, refused.stdout
