"""The lab's generated inventory: groups, plain SSH with become, and it never clobbers a user's file."""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml

from pyflannel_lab import inventory
from pyflannel_lab.errors import LabError
from pyflannel_lab.paths import STATE_ENV
from pyflannel_lab.ssh import check_control_dir

HOSTS = [(f"node{n}", IPv4Address(f"198.51.100.{10 + n}")) for n in (1, 2, 3)]


def rendered(tmp_path: Path) -> str:
    return inventory.render(HOSTS, "pyflannel", tmp_path / "id_ed25519", tmp_path / "cp")


def test_groups_and_connection(tmp_path: Path) -> None:
    data = yaml.safe_load(rendered(tmp_path))["all"]
    assert list(data["children"]["etcd"]["hosts"]) == ["node1"]
    nodes = data["children"]["flannel_nodes"]["hosts"]
    assert {name: v["ansible_host"] for name, v in nodes.items()} == {
        "node1": "198.51.100.11",
        "node2": "198.51.100.12",
        "node3": "198.51.100.13",
    }
    conn = data["vars"]
    assert conn["ansible_user"] == "pyflannel"
    assert conn["ansible_ssh_private_key_file"] == str(tmp_path / "id_ed25519")
    assert conn["ansible_python_interpreter"] == "/usr/bin/python3"
    assert "ansible_connection" not in conn  # Ansible's default: ssh
    args = conn["ansible_ssh_common_args"].split()
    for option in (
        "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null",
        "ControlMaster=auto",
        f"ControlPath={tmp_path / 'cp'}/%h",
    ):
        assert option in args


def test_the_first_hosts_are_the_etcd_members(tmp_path: Path) -> None:
    three = inventory.render(HOSTS, "pyflannel", tmp_path / "key", tmp_path / "cp", etcd_members=3)
    children = yaml.safe_load(three)["all"]["children"]
    assert list(children["etcd"]["hosts"]) == ["node1", "node2", "node3"]
    assert list(children["flannel_nodes"]["hosts"]) == ["node1", "node2", "node3"]


def test_write_and_remove_only_the_generated_file(tmp_path: Path) -> None:
    path = tmp_path / "inventories/lab/hosts.yml"
    inventory.write(path, rendered(tmp_path))
    inventory.write(path, rendered(tmp_path))  # rewriting its own file is fine
    assert path.stat().st_mode & 0o777 == 0o644
    inventory.remove(path)
    assert not path.exists()

    path.write_text("all:\n  hosts:\n    mine:\n")
    with pytest.raises(LabError, match="not generated"):
        inventory.write(path, rendered(tmp_path))
    inventory.remove(path)
    assert path.read_text() == "all:\n  hosts:\n    mine:\n"


def test_a_state_directory_too_deep_for_control_sockets_is_refused(tmp_path: Path) -> None:
    check_control_dir(Path("/work/main/.lab/hosts/cp"))
    with pytest.raises(LabError, match=STATE_ENV):
        check_control_dir(Path("/tmp") / ("d" * 80) / "cp")
