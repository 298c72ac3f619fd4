"""inventories/example, and the INI inventory in kubespray's layout of docs/operating.md, pass
the preflight's cluster check, as an operator copying them would run it (the preflight's own
settings task, then its action), without reaching the hosts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "example"
SHOWN = ("flannel_vxlan_vni", "flannel_subnet_len", "flannel_ip_masq", "flannel_etcd_endpoints")

CHECK_PLAYBOOK = f"""
- name: The inventory through the preflight's cluster check, without reaching the hosts
  hosts: flannel_nodes
  gather_facts: false
  connection: local
  become: false
  vars:
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
  tasks:
    - name: Collect the settings as the preflight role does
      ansible.builtin.include_role:
        name: pyflannel.network.preflight
        tasks_from: settings.yml
    - name: Check them as one cluster
      pyflannel.network.preflight:
        group: flannel_nodes
        facts: false
    - name: Keep the checked settings the later roles get
      ansible.builtin.copy:
        content: "{{{{ ansible_facts._flannel_cluster | dict2items
          | selectattr('key', 'in', {list(SHOWN)}) | items2dict | to_json }}}}"
        dest: "{{{{ playbook_dir }}}}/checked.json"
        mode: "0644"
      run_once: true
"""


def ansible_playbook(*args: str, json_report: bool = False) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook *args`` from the repository's root with its ansible.cfg; the output is
    the JSON report (ansible.builtin.json) with ``json_report``, plain text otherwise."""
    output = (
        {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
        if json_report
        else {"ANSIBLE_NOCOLOR": "1"}
    )
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), *args],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **output},
        capture_output=True,
        text=True,
        check=False,
    )


def check_inventory(
    tmp_path: Path, *extra_vars: str, inventory: Path = INVENTORY
) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "check.yml"
    playbook.write_text(CHECK_PLAYBOOK)
    extra = (arg for var in extra_vars for arg in ("-e", var))
    return ansible_playbook("-i", str(inventory), *extra, str(playbook))


def checked_settings(tmp_path: Path) -> dict[str, object]:
    settings: dict[str, object] = json.loads((tmp_path / "checked.json").read_text())
    return settings


def passed(done: subprocess.CompletedProcess[str]) -> bool:
    """Every node checked, and nothing but the controller's checked.json written."""
    return done.returncode == 0 and all(
        re.search(
            rf"^{node} +: ok=\d+ +changed={int(node == 'node1')} .* failed=0 ", done.stdout, re.M
        )
        for node in ("node1", "node2", "node3")
    )


def test_the_example_inventory_passes_the_preflight_cluster_check(tmp_path: Path) -> None:
    done = check_inventory(tmp_path)
    assert passed(done), done.stdout + done.stderr
    refused = check_inventory(tmp_path, "flannel_subnet_len=8")
    assert refused.returncode != 0 and "flannel_subnet_len" in refused.stdout, refused.stdout


def test_extra_vars_given_as_key_value_text_are_converted(tmp_path: Path) -> None:
    done = check_inventory(
        tmp_path, "flannel_vxlan_vni=7", "flannel_subnet_len=25", "flannel_ip_masq=false"
    )
    assert passed(done), done.stdout + done.stderr
    assert checked_settings(tmp_path) == {
        "flannel_vxlan_vni": 7,
        "flannel_subnet_len": 25,
        "flannel_ip_masq": False,
        "flannel_etcd_endpoints": ["https://192.0.2.11:2379"],
    }


def docs_ini_inventory() -> str:
    page = (ROOT / "docs" / "operating.md").read_text()
    section = page.split("\n### A kubespray inventory\n", 1)[1].split("\n### ", 1)[0]
    (block,) = re.findall(r"```ini\n(.*?)```", section, re.S)
    return block


def test_the_docs_kubespray_ini_inventory_passes_with_its_strings_converted(
    tmp_path: Path,
) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(docs_ini_inventory())
    done = check_inventory(tmp_path, inventory=inventory)
    assert passed(done), done.stdout + done.stderr
    assert checked_settings(tmp_path) == {
        "flannel_vxlan_vni": 1,
        "flannel_subnet_len": 24,
        "flannel_ip_masq": True,
        "flannel_etcd_endpoints": ["https://192.0.2.11:2379"],
    }
    refused = check_inventory(tmp_path, "flannel_ip_masq=sometimes", inventory=inventory)
    assert refused.returncode != 0, refused.stdout
    assert "flannel_ip_masq" in refused.stdout and "sometimes" in refused.stdout, refused.stdout
