"""Lab hosts: systemd containers reached over plain SSH, as Ansible reaches bare metal.

One lab of three hosts for the module (its state and inventory in a scratch directory, so a
developer's own lab is left alone); the last test takes it down and checks that the root
namespace, podman and the filesystem look as they did before it came up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyflannel_lab import hosts, underlay
from pyflannel_lab.errors import LabError
from pyflannel_lab.paths import LabPaths, cache_dir
from pyflannel_lab.podman import Podman
from pyflannel_lab.rootns import nsdelegate_mounts

# The first run builds the host image (about a minute or two); the timeout is a hang guard.
pytestmark = [pytest.mark.root, pytest.mark.podman, pytest.mark.timeout(1200)]


def _out(*argv: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout


def root_state(token: str) -> dict[str, Any]:
    """What a lab could leave behind outside its own directories.

    Links and routes of other labs (a developer's, or another checkout's coming up or going
    down meanwhile) are left out: their names carry their own tokens.
    """

    def ours(line: str) -> bool:
        return all(other == token for other in re.findall(r"plab([0-9a-f]{6})", line))

    system_podman = {k: v for k, v in os.environ.items() if not k.startswith("CONTAINERS_")}
    links = _out("ip", "-o", "link", "show").splitlines()
    routes = _out("ip", "-4", "route", "show", "table", "all").splitlines()
    routes += _out("ip", "-6", "route", "show", "table", "all").splitlines()
    return {
        "links": sorted(line.split(":")[1].strip() for line in links if ours(line)),
        "routes": [line for line in routes if ours(line)],
        "nft": _out("nft", "list", "ruleset"),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "nsdelegate": nsdelegate_mounts(Path("/proc/self/mountinfo").read_text()),
        "system podman": _out("podman", "ps", "-a", "--format", "{{.ID}}", env=system_podman),
    }


@dataclass
class Lab:
    state: hosts.LabState
    paths: LabPaths
    before: dict[str, Any]
    scratch: Path

    def ssh(self, name: str, command: str) -> subprocess.CompletedProcess[str]:
        return self.state.ssh(self.state.host(name)).run(command)

    def ansible(self, pattern: str, *args: str) -> dict[str, Any]:
        """An ad-hoc module run; the per-host results of Ansible's json callback."""
        env = {
            **os.environ,
            "ANSIBLE_HOME": str(self.scratch / "ansible"),
            "ANSIBLE_LOCAL_TEMP": str(self.scratch / "ansible/tmp"),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        }
        ansible = Path(sys.executable).parent / "ansible"
        result = subprocess.run(
            [str(ansible), "-i", str(self.paths.inventory), pattern, *args],
            cwd=self.scratch,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        report = json.loads(result.stdout)
        hosts_results: dict[str, Any] = report["plays"][0]["tasks"][0]["hosts"]
        return hosts_results


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    scratch = tmp_path_factory.mktemp("labhosts")
    paths = LabPaths(scratch / "state", scratch / "inventory" / "hosts.yml")
    before = root_state(token="")  # this lab's token is not known yet, nor used
    state = hosts.up(3, paths)
    try:
        yield Lab(state, paths, before, scratch)
    finally:
        hosts.down(paths)


def test_ansible_reaches_every_host_over_plain_ssh_with_become(lab: Lab) -> None:
    results = lab.ansible("all", "--become", "-m", "ansible.builtin.ping")
    assert sorted(results) == ["node1", "node2", "node3"]
    assert all(r["ping"] == "pong" for r in results.values()), results
    whoami = lab.ansible(
        "flannel_nodes", "--become", "-m", "ansible.builtin.command", "-a", "id -un"
    )
    assert {name: r["stdout"] for name, r in whoami.items()} == dict.fromkeys(whoami, "root")
    facts = lab.ansible("node1", "-m", "ansible.builtin.setup", "-a", "filter=ansible_service_mgr")
    assert facts["node1"]["ansible_facts"]["ansible_service_mgr"] == "systemd"


def test_inventory_groups_match_the_hosts(lab: Lab) -> None:
    data = yaml.safe_load(lab.paths.inventory.read_text())["all"]
    assert list(data["children"]["etcd"]["hosts"]) == ["node1"]
    nodes = data["children"]["flannel_nodes"]["hosts"]
    assert {name: v["ansible_host"] for name, v in nodes.items()} == {
        host.name: str(host.address) for host in lab.state.hosts
    }


def test_systemd_runs_and_each_host_is_its_own_machine(lab: Lab) -> None:
    identities = set()
    for name in lab.state.names():
        result = lab.ssh(name, "systemctl is-system-running; hostname; cat /etc/machine-id")
        status, hostname, machine_id = result.stdout.split()
        assert status in ("running", "degraded"), result
        assert hostname == name
        identities.add(machine_id)
    assert len(identities) == 3


def test_the_roles_packages_are_present_and_etcd_is_not_started(lab: Lab) -> None:
    results = lab.ansible(
        "all",
        "--become",
        "-m",
        "ansible.builtin.apt",
        "-a",
        "name=etcd-server,etcd-client,containernetworking-plugins state=present",
    )
    assert all(not r.get("failed") and not r["changed"] for r in results.values()), results
    assert lab.ssh("node1", "systemctl is-active etcd").stdout.strip() == "inactive"


def test_a_vxlan_device_works_inside_a_host(lab: Lab) -> None:
    node1, node2 = lab.state.host("node1"), lab.state.host("node2")
    create = (
        f"sudo ip link add flannel.1 type vxlan id 1 local {node1.address} dev eth0 "
        "dstport 8472 nolearning && ip -d link show flannel.1"
    )
    try:
        result = lab.ssh("node1", create)
        assert result.returncode == 0, result.stderr
        assert "vxlan id 1" in result.stdout and f"local {node1.address}" in result.stdout
    finally:
        lab.ssh("node1", "sudo ip link del flannel.1")
    assert lab.ssh("node1", f"ping -c 1 -W 5 {node2.address}").returncode == 0


def test_up_again_reuses_the_running_lab(lab: Lab) -> None:
    again = hosts.up(3, lab.paths)
    assert again.token == lab.state.token
    with pytest.raises(LabError, match="already up"):
        hosts.up(2, lab.paths)
    with pytest.raises(LabError, match="a lab of bookworm, bookworm, bookworm hosts is already up"):
        hosts.up(3, lab.paths, releases=["trixie"])


def test_a_recorded_lab_whose_links_are_gone_is_refused_at_once(lab: Lab) -> None:
    """A killed run or a reboot removes the veths; up must say so, not wait for SSH."""
    paths = LabPaths(lab.scratch / "broken", lab.scratch / "broken-inventory.yml")
    paths.state_dir.mkdir()
    record = json.loads(lab.paths.state_file.read_text())
    record["hosts"][1]["veth"] = f"{record['hosts'][1]['veth']}x"
    paths.state_file.write_text(json.dumps(record))
    with pytest.raises(LabError, match=rf"links {record['hosts'][1]['veth']} are gone"):
        hosts.up(3, paths)
    assert not paths.inventory.exists()


def test_a_restarted_host_comes_back_with_the_same_address(lab: Lab) -> None:
    podman = Podman(cache_dir())
    node2 = lab.state.host("node2")
    pid_before = podman.container_pid(node2.container)
    assert lab.ssh("node2", "sudo touch /run/before-restart").returncode == 0
    mac_before = lab.ssh("node2", "cat /sys/class/net/eth0/address").stdout

    assert hosts.restart_host("node2", lab.paths) == node2

    assert podman.container_pid(node2.container) != pid_before
    # /run is a tmpfs: a file there does not survive a reboot.
    assert lab.ssh("node2", "test -e /run/before-restart").returncode == 1
    address = lab.ssh("node2", "ip -4 -o addr show dev eth0").stdout
    assert f"inet {node2.address}/{lab.state.network.prefixlen}" in address
    assert lab.ssh("node2", "cat /sys/class/net/eth0/address").stdout == mac_before
    assert lab.ssh("node1", f"ping -c 1 -W 5 {node2.address}").returncode == 0
    results = lab.ansible("node2", "--become", "-m", "ansible.builtin.ping")
    assert results["node2"]["ping"] == "pong"


def test_down_leaves_nothing_but_the_image_cache(lab: Lab) -> None:
    podman = Podman(cache_dir())
    assert hosts.down(lab.paths) is True

    assert root_state(lab.state.token) == lab.before
    assert not lab.paths.state_dir.exists()
    assert not lab.paths.inventory.exists()
    assert hosts.load(lab.paths) is None
    label = f"label={hosts.LAB_LABEL}={lab.state.token}"
    assert podman.run("ps", "-a", "--filter", label, "--format", "{{.ID}}").stdout == ""
    masters = subprocess.run(["pgrep", "-f", str(lab.paths.control_dir)], capture_output=True)
    assert masters.stdout == b""
    assert podman.image_exists(lab.state.hosts[0].image)
    assert hosts.down(lab.paths) is False


def test_a_failed_start_takes_down_what_it_made(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path_factory.mktemp("labfail")  # short: SSH control sockets live in it
    paths = LabPaths(scratch / "state", scratch / "hosts.yml")
    before = root_state(token="")
    booted: list[hosts.LabState] = []

    def fail_the_checks(state: hosts.LabState, _: object) -> None:
        booted.append(state)
        raise LabError("injected: a kernel feature is missing")

    monkeypatch.setattr(hosts, "_check_hosts", fail_the_checks)
    with pytest.raises(LabError, match="injected"):
        hosts.up(2, paths)

    (state,) = booted
    assert all(host.container for host in state.hosts)  # it got as far as booting them
    assert root_state(state.token) == before
    label = f"label={hosts.LAB_LABEL}={state.token}"
    assert state.podman().run("ps", "-a", "--filter", label, "--format", "{{.ID}}").stdout == ""
    assert not paths.state_dir.exists()
    assert not paths.inventory.exists()


def test_no_free_underlay_range_is_a_clear_error(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short name: SSH's control sockets go under the state directory.
    scratch = tmp_path_factory.mktemp("labnone")
    paths = LabPaths(scratch / "state", scratch / "hosts.yml")
    taken = [IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/24")]
    monkeypatch.setattr(underlay, "root_routes", lambda: taken)
    with pytest.raises(LabError, match=r"no free /26 .* 198\.51\.100\.0/24, 203\.0\.113\.0/24"):
        hosts.up(1, paths)
    assert not paths.state_dir.exists()


def test_a_container_made_but_not_yet_recorded_is_removed_too(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path_factory.mktemp("labfail")
    paths = LabPaths(scratch / "state", scratch / "hosts.yml")
    saved: list[hosts.LabState] = []
    save = hosts._save

    def crash_after_the_first_container(state: hosts.LabState, paths: LabPaths) -> None:
        if any(host.container for host in state.hosts):
            saved.append(state)
            raise LabError("injected: crashed before recording the container")
        save(state, paths)

    monkeypatch.setattr(hosts, "_save", crash_after_the_first_container)
    with pytest.raises(LabError, match="injected"):
        hosts.up(1, paths)

    (state,) = saved
    label = f"label={hosts.LAB_LABEL}={state.token}"
    assert state.podman().run("ps", "-a", "--filter", label, "--format", "{{.ID}}").stdout == ""
    assert not underlay.link_exists(state.bridge)
    assert not paths.state_dir.exists()
