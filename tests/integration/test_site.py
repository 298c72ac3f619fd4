"""site.yml against real systemd hosts over SSH (the podman lab of pyflannel_runtime.lab): etcd
with TLS, the CNI plugin and pyflanneld (vxlan), then the checks an operator relies on.

One lab serves the whole module, in this order: bad inventories first (on untouched hosts, so
"nothing changed" is strict), then the first run and the idempotent re-run, the installed
collection tarball's modules from a playbook outside the repository, route drift, a host
restart, the unit's sandbox score, and last a backend switch.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyflannel_runtime.lab.paths import LabPaths
from pyflannel_runtime.lab.playbook import PlaybookRun, run_playbook
from tests.integration.collection_tarball import build, install, run_outside
from tests.integration.site_lab import assert_converged, lab_hosts
from tests.integration.site_lab import on_host as ssh

pytestmark = [pytest.mark.root, pytest.mark.podman]

hosts_api = pytest.importorskip("pyflannel_runtime.lab.hosts")

# What a host looks like, minus what logging in and running commands change by itself.
SNAPSHOT = (
    "find /etc /opt /run -xdev \\( -path /run/user -o -path /run/systemd -o -path /run/sudo"
    " -o -path /run/log -o -path /run/sshd -o -path /run/utmp -o -path /etc/ld.so.cache \\) -prune"
    " -o -printf '%p %m %s\\n' | sort; systemctl list-unit-files --no-legend --no-pager"
)


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts() as state:
        yield state


def snapshot(lab: Any) -> dict[str, str]:
    return {name: ssh(lab, name, SNAPSHOT) for name in lab.names()}


# case: (extra vars for every host, host vars in an extra inventory file, what must be named)
BAD_INVENTORIES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "subnet length": ({"flannel_subnet_len": 12}, {}, r"node\d: flannel_subnet_len: "),
    "unknown backend": (
        {"flannel_backend_type": "geneve"},
        {},
        r"flannel_backend_type.*(geneve|vxlan, host-gw, udp)",
    ),
    "overlapping pins": (
        {},
        {
            "node1": {"flannel_node_subnet": "10.244.9.0/24"},
            "node3": {"flannel_node_subnet": "10.244.9.0/24"},
        },
        r"node3: flannel_node_subnet: 10\.244\.9\.0/24 overlaps node1's flannel_node_subnet",
    ),
    "missing interface": (
        {},
        {"node2": {"flannel_interface": "eth9"}},
        r"node2: flannel_interface: 'eth9': ",
    ),
}


def test_bad_inventories_fail_in_preflight_and_change_nothing(lab: Any, tmp_path: Path) -> None:
    before = snapshot(lab)
    for case, (extra_vars, host_vars, named) in BAD_INVENTORIES.items():
        extra = tmp_path / f"{case.replace(' ', '-')}.yml"
        extra.write_text(json.dumps({"all": {"hosts": host_vars}}))
        run = run_playbook(
            "site.yml", inventories=[Path("inventories/lab"), extra], extra_vars=extra_vars
        )
        assert run.returncode != 0, f"{case}: {run.explain()}"
        assert re.search(named, run.output), f"{case}: {run.explain()}"
        assert "TASK [pyflannel.network.etcd" not in run.output, f"{case}: {run.explain()}"
    assert snapshot(lab) == before


# Two runs, the first installing everything: on a loaded 2-core machine more than the default
# bound (a safety net, not a measure).
@pytest.mark.timeout(900)
def test_site_converges_and_the_rerun_changes_nothing(lab: Any) -> None:
    first = run_playbook("site.yml")
    assert_converged(first, lab.names())
    for name in lab.names():
        assert ssh(lab, name, "systemctl is-active pyflanneld").strip() == "active"
        assert "FLANNEL_SUBNET=10.244." in ssh(lab, name, "cat /run/flannel/subnet.env")
    again = run_playbook("site.yml")
    assert_converged(again, lab.names())
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()


# Outside the repository, with the installed tarball: each module that runs with the agent's
# virtualenv and needs nothing else, with no options and no interpreter setting.
OUTSIDE_PLAYBOOK = """
- name: The installed collection's modules on provisioned nodes
  hosts: flannel_nodes
  gather_facts: false
  become: true
  check_mode: true
  tasks:
    - name: Routes
      pyflannel.network.routes:
      register: routes

    - name: Pod addresses
      pyflannel.network.ipam:
      register: ipam

    - name: Network config
      pyflannel.network.network_config:
      register: network_config

    - name: CNI plugin
      pyflannel.network.cni_plugin:
      register: cni_plugin

    - name: Leases
      pyflannel.network.leases_info:
      run_once: true
      register: leases

    - name: Keep the results on the controller
      ansible.builtin.copy:
        content: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars))) | to_json }}"
        dest: results.json
        mode: "0600"
      delegate_to: localhost
      become: false
      run_once: true
      check_mode: false
"""


def test_the_installed_collections_modules_need_no_options_on_a_provisioned_node(
    lab: Any, tmp_path: Path
) -> None:
    installed = install(tmp_path, build(tmp_path))
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "play.yml").write_text(OUTSIDE_PLAYBOOK)
    # The lab's hosts and how to reach them, without the interpreter it names for them.
    hosts = LabPaths.default().inventory.read_text()
    (work / "hosts.yml").write_text(re.sub(r"(?m)^\s*ansible_python_interpreter:.*\n", "", hosts))
    done = run_outside(work, installed, "-i", "hosts.yml", "play.yml")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    results = json.loads((work / "results.json").read_text())
    names = lab.names()
    for name in names:
        found = results[name]
        routes = found["routes"]
        assert routes["summary"] == "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready"
        assert not routes["changed"] and routes["subnet_env"]["FLANNEL_SUBNET"].startswith(
            "10.244."
        )
        assert found["ipam"]["subnets"] and not found["ipam"]["changed"]
        assert found["network_config"]["keys"] == [] and not found["network_config"]["changed"]
        assert not found["cni_plugin"]["changed"]
    leases = results[names[0]]["leases"]
    assert sorted(lease["host"] for lease in leases["leases"]) == sorted(names)
    assert leases["orphans"] == []
    (usage,) = leases["utilisation"]
    assert (usage["used"], usage["free"]) == (3, usage["total"] - 3)


def routes_task(run: PlaybookRun) -> str:
    """The routes task's output in a run (with --diff: the drift, host by host)."""
    task = run.output.split(
        "Verify | Check the agent, the routes, neighbours, FDB entries and MTU", 1
    )[1]
    return task.split("TASK [", 1)[0]


def test_check_mode_reports_route_drift_and_a_normal_run_repairs_it(lab: Any) -> None:
    # The agent would repair the route itself within a reconcile interval: freeze it meanwhile.
    ssh(lab, "node2", "systemctl kill --signal=SIGSTOP pyflanneld")
    try:
        peer = ssh(lab, "node1", "sed -n 's/^FLANNEL_SUBNET=//p' /run/flannel/subnet.env").strip()
        peer_subnet = str(ipaddress.ip_interface(peer).network)
        ssh(lab, "node2", f"ip route del {peer_subnet}")
        checks = ("--tags", "flannel_preflight,flannel_verify")

        drift = run_playbook("site.yml", "--check", "--diff", *checks)
        assert drift.returncode == 0, drift.explain()
        reported = routes_task(drift)
        assert "changed: [node2]" in reported, reported
        assert re.search(rf"^\+route {re.escape(peer_subnet)} via ", reported, re.M), reported
        assert drift.changed() == {"node1": 0, "node2": 1, "node3": 0}, drift.explain()
        assert peer_subnet not in ssh(lab, "node2", "ip -4 route")
        # The frozen agent is a warning, and the summary says so; the datapath is still checked.
        assert "1 peer programmed, 1 missing, 0 stale; agent down" in drift.output, drift.output

        repair = run_playbook("site.yml", *checks)
        assert repair.returncode == 0, repair.explain()
        assert repair.changed() == {"node1": 0, "node2": 1, "node3": 0}, repair.explain()
        assert peer_subnet in ssh(lab, "node2", "ip -4 route")

        again = run_playbook("site.yml", *checks)
        assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    finally:
        ssh(lab, "node2", "systemctl kill --signal=SIGCONT pyflanneld")


def test_a_restarted_host_comes_back_with_its_subnet_and_pods_reach_it(lab: Any) -> None:
    subnet_env = ssh(lab, "node2", "cat /run/flannel/subnet.env")
    hosts_api.restart_host("node2")
    ready = False
    for _ in range(120):  # systemd starts the agent; it is ready once subnet.env is written
        probe = "systemctl is-active pyflanneld && test -s /run/flannel/subnet.env && echo ready"
        done = lab.ssh(lab.host("node2")).run(f"sudo sh -c {shlex.quote(probe)}")
        if done.returncode == 0 and "ready" in done.stdout:
            ready = True
            break
        time.sleep(1)
    assert ready, "pyflanneld did not come back on node2"
    assert ssh(lab, "node2", "cat /run/flannel/subnet.env") == subnet_env
    # Only the checks: nothing is provisioned again.
    run = run_playbook("site.yml", "--tags", "flannel_preflight,flannel_verify")
    assert_converged(run, lab.names())
    assert run.changed() == dict.fromkeys(lab.names(), 0), run.explain()


def test_the_agent_unit_is_sandboxed(lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    report = ssh(lab, "node1", "systemd-analyze security pyflanneld.service --no-pager")
    score = re.search(r"Overall exposure level for pyflanneld\.service: ([0-9.]+) (\w+)", report)
    assert score is not None, report
    with capsys.disabled():
        print(f"\nsystemd-analyze security pyflanneld.service: {score[1]} {score[2]}")
    assert float(score[1]) < 5.0, report


def flannel_links(lab: Any, name: str) -> list[str]:
    return [link for link in ssh(lab, name, "ls /sys/class/net").split() if "flannel" in link]


def test_switching_the_vni_converges(lab: Any) -> None:
    run = run_playbook("site.yml", extra_vars={"flannel_vxlan_vni": 7})
    assert_converged(run, lab.names())
    for name in lab.names():
        assert flannel_links(lab, name) == ["flannel.7"]
        routes = ssh(lab, name, "ip -4 route show root 10.244.0.0/16")
        assert routes.count("dev flannel.7") == 2 and "flannel.1" not in routes, routes
    again = run_playbook("site.yml", extra_vars={"flannel_vxlan_vni": 7})
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()


def test_switching_the_backend_converges(lab: Any) -> None:
    run = run_playbook("site.yml", extra_vars={"flannel_backend_type": "host-gw"})
    assert_converged(run, lab.names())
    for name in lab.names():
        assert flannel_links(lab, name) == []
        routes = ssh(lab, name, "ip -4 route show root 10.244.0.0/16")
        # Each peer's subnet through the peer's own underlay address (the lab's slot decides it).
        peers = [lab.host(other).address for other in lab.names() if other != name]
        assert all(f"via {peer} " in routes for peer in peers), routes
        assert "flannel" not in routes, routes
    again = run_playbook("site.yml", extra_vars={"flannel_backend_type": "host-gw"})
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()


def test_reset_removes_the_agent_its_devices_and_files(lab: Any) -> None:
    # A device of another VNI, as a cluster switched back and forth may have left.
    for name in lab.names():
        ssh(lab, name, "ip link add flannel.9 type vxlan id 9 dstport 8472 dev eth0")
    run = run_playbook("reset.yml")
    assert run.returncode == 0 and not run.failed_hosts(), run.explain()
    for name in lab.names():
        left = ssh(
            lab,
            name,
            "ls /sys/class/net; ls /etc/systemd/system/pyflanneld.service /run/flannel"
            " /etc/cni/net.d/10-flannel.conflist 2>/dev/null; systemctl is-active pyflanneld || true",
        )
        assert "inactive" in left and not re.search(
            r"cni0|flannel|conflist|pyflanneld\.service", left
        ), left
    again = run_playbook("reset.yml")
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
