"""site.yml against real systemd hosts over SSH (the podman lab of pyflannel_lab): etcd
with TLS, the CNI plugin and pyflanneld (vxlan), then the checks an operator relies on.

One lab serves the whole module, in this order: bad inventories and check mode first (on
untouched hosts, so "nothing changed" is strict), then the first run and the idempotent re-run
(with the agents' file_sd document for Prometheus), a real Prometheus scraping every agent
through it (each metric, the dashboard's queries, the agent-down alert of a stopped agent), the
same cluster from a kubespray INI inventory, the installed collection tarball's modules from
a playbook outside the repository, route drift, a host restart, the unit's sandbox score, a VNI
switch given as `-e key=value`, a backend switch, reset.yml (twice: the second changes nothing),
and last the installed tarball's own playbooks from outside the repository: its reset (nothing
left to reset), its site converging the reset nodes again, and a re-run that changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
import re
import shlex
import shutil
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pyflannel_controller.wheelhouse import distribution_name
from pyflannel_lab.playbook import (
    LAB_INVENTORY,
    WHEELHOUSE_CACHE,
    PlaybookRun,
    run_playbook,
)
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, EtcdSubnetManager
from tests.integration.collection_tarball import install, play_outside, run_outside
from tests.integration.prometheus_server import Prometheus, dashboard_queries, prometheus_for
from tests.integration.scrape import promtool_problems
from tests.integration.site_lab import (
    BASE_PROJECTS,
    SNAPSHOT,
    assert_converged,
    lab_hosts,
    venv_projects,
)
from tests.integration.site_lab import on_host as ssh

pytestmark = [pytest.mark.root, pytest.mark.podman]

hosts_api = pytest.importorskip("pyflannel_lab.hosts")


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts() as state:
        yield state


@pytest.fixture(scope="module")
def file_sd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where site.yml writes the agents' file_sd document (flannel_prometheus_file_sd_path)."""
    return tmp_path_factory.mktemp("file-sd") / "pyflannel-nodes.json"


@pytest.fixture(scope="module")
def prometheus(
    lab: Any, file_sd: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    with prometheus_for(file_sd, tmp_path_factory.mktemp("prometheus")) as server:
        yield server


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


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
        run = run_playbook("site.yml", inventories=[LAB_INVENTORY, extra], extra_vars=extra_vars)
        assert run.returncode != 0, f"{case}: {run.explain()}"
        assert re.search(named, run.output), f"{case}: {run.explain()}"
        assert "TASK [pyflannel.network.etcd" not in run.output, f"{case}: {run.explain()}"
    assert snapshot(lab) == before


def test_check_mode_on_new_hosts_says_what_it_would_do_and_changes_nothing(
    lab: Any, tmp_path: Path, file_sd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A brand-new inventory: no runtime on the hosts, no etcd CA on the controller yet."""
    before = snapshot(lab)
    pki = tmp_path / "etcd-pki"
    settings = {"flannel_etcd_pki_dir": str(pki), "flannel_prometheus_file_sd_path": str(file_sd)}
    run = run_playbook("site.yml", "--check", extra_vars=settings)
    assert run.returncode == 0 and not run.failed_hosts(), run.explain()
    assert all(changed > 0 for changed in run.changed().values()), run.explain()
    for said in (
        "check mode: a real run installs the pyflannel runtime",
        "until it is there, the tasks that run its modules on this host are skipped",
        f"a real run makes the cluster CA in {pki} and this host",
        "client, server, peer certificates in",
    ):
        assert said in " ".join(run.output.split()), run.explain()
    assert snapshot(lab) == before
    assert not pki.exists()
    assert "TASK [pyflannel.network.agent : Agent | Write the Prometheus file_sd" in run.output
    assert not file_sd.exists()
    report(capsys, f"site.yml --check on new hosts: {run.seconds:.0f} s")


# A re-run that changes nothing runs one module per host: node_facts, whose reads stand for the
# later roles' checks, the verify role's, the network config's publication in etcd and the
# leases' listing (no subnet is pinned here).
RERUN_MODULES_PER_HOST = 1


# Two runs, the first installing everything: on a loaded 2-core machine more than the default
# bound (a safety net, not a measure).
@pytest.mark.timeout(900)
def test_site_converges_and_the_rerun_changes_nothing(lab: Any, file_sd: Path) -> None:
    sd = {"flannel_prometheus_file_sd_path": str(file_sd)}
    first = run_playbook("site.yml", extra_vars=sd)
    assert_converged(first, lab.names())
    for name in lab.names():
        assert ssh(lab, name, "systemctl is-active pyflanneld").strip() == "active"
        assert "FLANNEL_SUBNET=10.244." in ssh(lab, name, "cat /run/flannel/subnet.env")
        # An etcd node's wheelhouse and virtualenv: the runtime and its dependencies alone.
        stamp = ssh(lab, name, "cat /opt/pyflannel/venv/.pyflannel-wheelhouse").strip()
        with tarfile.open(WHEELHOUSE_CACHE / stamp / "wheelhouse.tar") as tar:
            assert {distribution_name(n) for n in tar.getnames()} == BASE_PROJECTS
        assert venv_projects(lab, name) == BASE_PROJECTS
    # One target per node, where Ansible reaches it, on the health port.
    labels = {"backend": "vxlan", "network": "10.244.0.0/16"}
    assert json.loads(file_sd.read_text()) == [
        {"targets": [f"{host.address}:8081"], "labels": {"node": host.name, **labels}}
        for host in lab.hosts
    ]
    assert oct(file_sd.stat().st_mode & 0o777) == "0o644"
    addresses = {host.name: str(host.address) for host in lab.hosts}
    again = run_playbook("site.yml", extra_vars=sd, count_modules=addresses)
    # Nothing changed and every node checked clean: the connectivity suite is left out.
    assert_converged(again, lab.names(), suite=False)
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    assert again.modules == dict.fromkeys(lab.names(), RERUN_MODULES_PER_HOST), again.modules
    # Every host's datapath was still checked, by the preflight.
    assert again.output.count("0 missing, 0 stale; agent ready") == len(lab.names())


# docs/metrics.md's metrics an etcd and vxlan agent serves (udp's: test_site_kube_udp.py).
METRICS = (
    "pyflannel_build_info",
    "pyflannel_ready",
    "pyflannel_leases",
    "pyflannel_peers",
    "pyflannel_peers_programmed",
    "pyflannel_leases_rejected",
    "pyflannel_own_lease_expiry_timestamp_seconds",
    "pyflannel_lease_renewals_total",
    "pyflannel_lease_renewal_failures_total",
    "pyflannel_datastore_watch_restarts_total",
    "pyflannel_event_to_kernel_seconds_bucket",
    "pyflannel_event_to_kernel_seconds_count",
    "pyflannel_drift_repairs_total",
    "pyflannel_subnets_free",
    "pyflannel_subnet_pool_size",
)
# A peer's lease put by hand and deleted again: two lease events for every agent.
EXTRA_LEASE = (
    "/coreos.com/network/subnets/10.244.250.0-24",
    json.dumps({"PublicIP": "203.0.113.250", "BackendType": "vxlan",
                "BackendData": {"VNI": 1, "VtepMAC": "02:00:00:00:00:fa"}}),
)  # fmt: skip


def by_node(prometheus: Prometheus, expr: str) -> dict[str, float]:
    """An instant query's value for each node."""
    return {r["metric"]["node"]: float(r["value"][1]) for r in prometheus.query(expr)}


def a_peer_comes_and_goes(lab: Any, prometheus: Prometheus) -> None:
    """Two lease events on every agent: a peer's lease put, programmed, deleted, withdrawn."""
    names = sorted(lab.names())
    key, value = EXTRA_LEASE
    etcdctl(lab, "put", key, value)
    prometheus.wait(
        "every agent programs the third peer",
        lambda: by_node(prometheus, "pyflannel_peers_programmed") == dict.fromkeys(names, 3),
    )
    etcdctl(lab, "del", key)
    prometheus.wait(
        "every agent withdraws it",
        lambda: by_node(prometheus, "pyflannel_peers_programmed") == dict.fromkeys(names, 2),
    )


def test_prometheus_scrapes_every_agent_through_the_file_sd_document(
    lab: Any, prometheus: Prometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    names = sorted(lab.names())
    prometheus.wait(
        "up == 1 for every node", lambda: sorted(by_node(prometheus, "up == 1")) == names
    )
    targets = [r["metric"] for r in prometheus.query('up{job="pyflannel"}')]
    assert {(m["backend"], m["network"]) for m in targets} == {("vxlan", "10.244.0.0/16")}
    a_peer_comes_and_goes(lab, prometheus)
    for metric in METRICS:
        assert sorted({r["metric"]["node"] for r in prometheus.query(metric)}) == names, metric
    assert by_node(prometheus, "pyflannel_ready") == dict.fromkeys(names, 1)
    assert by_node(prometheus, "pyflannel_leases") == dict.fromkeys(names, 3)
    assert by_node(prometheus, "pyflannel_peers") == dict.fromkeys(names, 2)
    assert all(
        n >= 2 for n in by_node(prometheus, "pyflannel_event_to_kernel_seconds_count").values()
    )
    left = by_node(prometheus, "pyflannel_own_lease_expiry_timestamp_seconds - time()")
    assert all(0 < seconds <= 24 * 3600 for seconds in left.values()), left

    # The agent's own answer, as Prometheus reads it.
    url = f"http://{lab.host('node1').address}:8081/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        content_type, text = answer.headers["Content-Type"], answer.read().decode()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert promtool_problems(text) == ""
    report(capsys, f"GET {url} (promtool check metrics: no problem):\n{text}")


# The dashboard's variables as Grafana fills them in: every node, and a rate window that holds
# several of the lab's 1 s scrapes.
DASHBOARD_VARIABLES = {"$__rate_interval": "1m", "$node": ".*"}
# Panels that show something in any running cluster (udp's drops, repairs, restarts and
# failures are empty until something happens).
CORE_PANELS = {
    "Agents up and ready",
    "Leases",
    "Peers programmed",
    "Own lease expires in",
    "Lease event to kernel latency",
}


def test_every_dashboard_query_answers_and_the_core_panels_show_every_node(
    lab: Any, prometheus: Prometheus
) -> None:
    queries = dashboard_queries(DASHBOARD_VARIABLES)
    assert {title for title, _ in queries} >= CORE_PANELS
    a_peer_comes_and_goes(lab, prometheus)  # events inside the latency panel's window
    for title, expr in queries:
        result = prometheus.query(expr)  # an error fails here
        if title in CORE_PANELS:
            values = {r["metric"].get("node"): float(r["value"][1]) for r in result}
            assert sorted(values) == sorted(lab.names()), (title, expr, result)
            assert all(math.isfinite(v) for v in values.values()), (title, expr, result)


def firing(prometheus: Prometheus) -> set[tuple[str, str]]:
    """The alerts that fire: (name, node)."""
    found = prometheus.query('ALERTS{alertstate="firing"}')
    return {(r["metric"]["alertname"], r["metric"].get("node", "")) for r in found}


def test_a_stopped_agent_fires_its_agent_down_alert(lab: Any, prometheus: Prometheus) -> None:
    """With the shipped rules, their waits 0 s (prometheus_server.rules_without_waits: the
    durations are tests/prometheus/pyflannel.rules.test.yml's)."""
    assert firing(prometheus) == set()
    ssh(lab, "node3", "systemctl stop pyflanneld")
    try:
        prometheus.wait(
            "PyflannelAgentDown fires for node3",
            lambda: ("PyflannelAgentDown", "node3") in firing(prometheus),
        )
        assert firing(prometheus) == {("PyflannelAgentDown", "node3")}
    finally:
        ssh(lab, "node3", "systemctl start pyflanneld")
    prometheus.wait(
        "node3 is scraped and ready again",
        lambda: by_node(prometheus, "pyflannel_ready == 1") == dict.fromkeys(lab.names(), 1),
    )
    prometheus.wait("no alert fires", lambda: firing(prometheus) == set())


def kubespray_ini(lab_inventory: Path) -> str:
    """The lab as a kubespray INI inventory: its groups, node1 the control plane and etcd, and
    every setting in [all:vars] (strings, as INI gives them), equal to the lab's own."""
    inventory = yaml.safe_load((lab_inventory / "hosts.yml").read_text())["all"]
    nodes = inventory["children"]["flannel_nodes"]["hosts"]
    (control_plane,) = inventory["children"]["etcd"]["hosts"]
    cluster = yaml.safe_load((lab_inventory / "group_vars/all/flannel.yml").read_text())
    settings = {
        **inventory["vars"],
        **cluster,
        # The lab's list expression, written out as the comma-separated string INI users write.
        "flannel_etcd_endpoints": f"https://{nodes[control_plane]['ansible_host']}:2379",
        # The lab's CA (by default it sits beside the inventory's directory).
        "flannel_etcd_pki_dir": f"{lab_inventory}-credentials/etcd-pki",
        # Defaults, in the words kubespray inventories use.
        "flannel_ip_masq": "true",
        "flannel_enable_ipv6": "no",
        "flannel_healthz_port": "8081",
        "flannel_etcd_tls": "yes",
        "flannel_verify_repair": "on",
        # Asks for the connectivity suite on this run, which changes nothing.
        "flannel_verify_connectivity": "always",
    }
    sections = {
        "all": [f"{name} ansible_host={host['ansible_host']}" for name, host in nodes.items()],
        "kube_control_plane": [control_plane],
        "etcd:children": ["kube_control_plane"],
        "kube_node": [name for name in nodes if name != control_plane],
        "k8s_cluster:children": ["kube_control_plane", "kube_node"],
        "flannel_nodes:children": ["k8s_cluster"],
        "all:vars": [f"{key}={value}" for key, value in settings.items()],
    }
    return "".join(
        f"[{name}]\n" + "".join(f"{line}\n" for line in lines) + "\n"
        for name, lines in sections.items()
    )


def test_a_kubespray_ini_inventory_with_string_values_drives_the_same_cluster(
    lab: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(kubespray_ini(LAB_INVENTORY))
    run = run_playbook("site.yml", inventories=[inventory])
    # The suite ran, as asked.
    assert_converged(run, lab.names())
    # The same settings as the YAML inventory's, once converted: nothing to change.
    assert run.changed() == dict.fromkeys(lab.names(), 0), run.explain()
    report(capsys, f"site.yml from the kubespray INI inventory: {run.seconds:.0f} s")


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
    lab: Any, collection_tarball: Path, tmp_path: Path
) -> None:
    installed = install(tmp_path, collection_tarball)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "play.yml").write_text(OUTSIDE_PLAYBOOK)
    # The lab's hosts and how to reach them, without the interpreter it names for them.
    hosts = (LAB_INVENTORY / "hosts.yml").read_text()
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
    # Only the checks: nothing is provisioned again; the connectivity suite asked for by its tag.
    run = run_playbook(
        "site.yml", "--tags", "flannel_preflight,flannel_verify,flannel_connectivity"
    )
    assert_converged(run, lab.names())
    assert run.changed() == dict.fromkeys(lab.names(), 0), run.explain()


def etcdctl(lab: Any, *args: str) -> str:
    """etcdctl on node1 (the lab's etcd member) with a flannel node's client certificate."""
    pki = "/etc/pyflannel/pki"
    return ssh(lab, "node1", shlex.join([
        "env", "ETCDCTL_API=3", "etcdctl", f"--endpoints=https://{lab.host('node1').address}:2379",
        f"--cacert={pki}/etcd-ca.crt", f"--cert={pki}/etcd-client.crt",
        f"--key={pki}/etcd-client.key", *args,
    ]))  # fmt: skip


def test_a_lease_with_no_subnet_fails_no_node_and_the_summary_counts_it(lab: Any) -> None:
    key = "/coreos.com/network/subnets/0.0.0.0-0"
    value = json.dumps({"PublicIP": "192.0.2.99", "BackendType": "vxlan",
                        "BackendData": {"VtepMAC": "0a:58:0a:f4:63:00"}})  # fmt: skip
    etcdctl(lab, "put", key, value)
    try:
        run = run_playbook("site.yml", "--tags", "flannel_preflight,flannel_verify")
        assert_converged(run, lab.names())
        assert run.changed() == dict.fromkeys(lab.names(), 0), run.explain()
        summary = run.output.split("Verify | Summary", 1)[1]
        assert summary.count(", 0 stale, 1 rejected; agent") == 3, summary
        assert summary.count("rejected    0.0.0.0-0: no subnet in either family") == 3, summary
        assert "1 lease(s) rejected, never programmed: 0.0.0.0-0: " in run.output, run.output
        done = lab.ssh(lab.host("node2")).run("sudo /opt/pyflannel/venv/bin/pyflannel status")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "\nRejected (never programmed):\n  0.0.0.0-0: no subnet" in done.stdout
    finally:
        etcdctl(lab, "del", key)


def test_the_agent_unit_is_sandboxed(lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    security = ssh(lab, "node1", "systemd-analyze security pyflanneld.service --no-pager")
    score = re.search(r"Overall exposure level for pyflanneld\.service: ([0-9.]+) (\w+)", security)
    assert score is not None, security
    report(capsys, f"systemd-analyze security pyflanneld.service: {score[1]} {score[2]}")
    assert float(score[1]) < 5.0, security


def flannel_links(lab: Any, name: str) -> list[str]:
    return [link for link in ssh(lab, name, "ls /sys/class/net").split() if "flannel" in link]


def test_switching_the_vni_given_as_a_key_value_extra_var_converges(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-e flannel_vxlan_vni=7` is the string "7", converted by the role's argument spec."""
    run = run_playbook("site.yml", "-e", "flannel_vxlan_vni=7")
    assert_converged(run, lab.names())
    for name in lab.names():
        assert flannel_links(lab, name) == ["flannel.7"]
        assert " vxlan id 7 " in ssh(lab, name, "ip -d link show flannel.7")
        routes = ssh(lab, name, "ip -4 route show root 10.244.0.0/16")
        assert routes.count("dev flannel.7") == 2 and "flannel.1" not in routes, routes
    again = run_playbook("site.yml", "-e", "flannel_vxlan_vni=7")
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    report(
        capsys,
        f"-e flannel_vxlan_vni=7: site.yml {run.seconds:.0f} s, re-run {again.seconds:.0f} s",
    )


@pytest.mark.timeout(900)  # a converge per backend and back, on a busy machine
def test_switching_the_backend_converges(lab: Any) -> None:
    run = run_playbook("site.yml", extra_vars={"flannel_backend_type": "host-gw"})
    assert_converged(run, lab.names())
    for name in lab.names():
        assert flannel_links(lab, name) == []
        routes = ssh(lab, name, "ip -4 route show root 10.244.0.0/16")
        peers = [host.address for host in lab.hosts if host.name != name]
        assert all(f" via {peer} " in routes for peer in peers), routes
        assert "flannel" not in routes, routes
    again = run_playbook("site.yml", extra_vars={"flannel_backend_type": "host-gw"})
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()


# Someone else's state on a node, which a reset must leave: an iptables chain with a rule and a
# jump into it, an nft table, a route, a CNI plugin, another CNI network's address store.
THEIRS = (
    "iptables -N PYFT-KEEP && iptables -A PYFT-KEEP -s 192.0.2.0/24 -j RETURN"
    " && iptables -I INPUT -j PYFT-KEEP && nft add table inet pyft-keep"
    " && ip route add 192.0.2.128/25 dev eth0 && touch /opt/cni/bin/pyft-keep"
    " && mkdir -p /var/lib/cni/networks/pyft-keep && touch /var/lib/cni/networks/pyft-keep/x"
)
# What flannel leaves that this lab's agents did not make: a device of another VNI and the
# firewall state of other modes and families (nft mode, IPv6).
FLANNELS_TOO = (
    "ip link add flannel.9 type vxlan id 9 dstport 8472 dev eth0"
    " && nft add table ip flannel-ipv4 && ip6tables -t nat -N FLANNEL-POSTRTG"
    " && ip6tables -t nat -A POSTROUTING -m comment --comment 'flanneld masq' -j FLANNEL-POSTRTG"
    " && ip6tables -N FLANNEL-FWD && ip6tables -A FORWARD -j FLANNEL-FWD"
)
OURS = (
    "/etc/systemd/system/pyflanneld.service /etc/pyflannel /opt/pyflannel /run/flannel"
    " /etc/cni/net.d/10-flannel.conflist /opt/cni/bin/flannel /opt/cni/bin/bridge"
    " /opt/cni/bin/host-local /var/lib/cni/flannel /var/lib/cni/networks/cbr0 /var/lib/pyflannel"
)


def theirs(lab: Any, name: str) -> str:
    return ssh(
        lab,
        name,
        "iptables -S PYFT-KEEP; iptables -S INPUT; nft list table inet pyft-keep;"
        " ip -4 route show 192.0.2.128/25; ls /opt/cni/bin/pyft-keep /var/lib/cni/networks/pyft-keep",
    )


def ssh_session(lab: Any, name: str) -> subprocess.Popen[str]:
    """A login of its own (no shared connection master) that answers one line when asked."""
    target = lab.ssh(lab.host(name))
    argv = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    argv += ["-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-i", str(target.key)]
    argv += ["-l", target.user, str(target.address), "echo ready && read line && echo still $line"]
    session = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert session.stdout is not None and session.stdout.readline() == "ready\n", name
    return session


def leases(lab: Any) -> list[str]:
    """The subnets leased in the lab's etcd, asked from here with node1's client certificate."""
    pki = Path(f"{LAB_INVENTORY}-credentials/etcd-pki")
    store = EtcdSettings(
        endpoints=(f"https://{lab.host('node1').address}:2379",),
        cafile=str(pki / "ca.crt"),
        certfile=str(pki / "node1" / "client.crt"),
        keyfile=str(pki / "node1" / "client.key"),
    )

    async def listing() -> list[str]:
        manager = EtcdSubnetManager(store)
        try:
            return sorted(str(lease.lease.subnet) for lease in (await manager.list_leases()).leases)
        finally:
            await manager.close()

    return asyncio.run(listing())


# Each node's own firewall rules, routes and CNI files as the reset found them (the next test's
# first run after the reset leaves them alone too).
THEIRS_BEFORE: dict[str, str] = {}


@pytest.mark.timeout(900)  # two resets, on a busy machine
def test_reset_removes_ours_and_only_ours_and_a_second_reset_changes_nothing(
    lab: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in lab.names():
        ssh(lab, name, f"{THEIRS} && {FLANNELS_TOO}")
        # What the agents and the probe pods made is there to remove.
        ssh(lab, name, f"ls -d {OURS} /etc/pyflannel/pki/etcd-client.crt >/dev/null")
    before = {name: theirs(lab, name) for name in lab.names()}
    assert len(leases(lab)) == 3
    sessions = {name: ssh_session(lab, name) for name in lab.names()}
    try:
        # As an INI inventory or -e gives it: a string.
        run = run_playbook("reset.yml", "-e", "flannel_reset_release_lease=true")
        assert run.returncode == 0 and not run.failed_hosts(), run.explain()
        for name, session in sessions.items():
            out, err = session.communicate("here\n", timeout=60)
            assert out == "still here\n", f"{name}: the SSH session did not survive: {err}"
    finally:
        for session in sessions.values():
            session.kill()
    assert leases(lab) == []
    for name in lab.names():
        assert theirs(lab, name) == before[name]
        for family in ("iptables", "ip6tables"):
            assert ssh(lab, name, f"{family}-save | grep -c FLANNEL || true").strip() == "0"
        assert "flannel" not in ssh(lab, name, "nft list tables")
        left = ssh(
            lab,
            name,
            f"ls /sys/class/net; ip -4 route show root 10.244.0.0/16; ls -d {OURS} 2>/dev/null;"
            " systemctl is-active pyflanneld || true",
        )
        assert "inactive" in left, left
        assert not re.search(r"cni0|cbr0|flannel|10\.244|bridge|host-local", left), left
    assert ssh(lab, "node1", "systemctl is-active etcd").strip() == "active"
    again = run_playbook("reset.yml")
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    # What the next test's first run must leave alone.
    THEIRS_BEFORE.update(before)
    report(capsys, f"reset.yml {run.seconds:.0f} s, again {again.seconds:.0f} s")


@pytest.mark.timeout(900)  # a reset, a first run and a re-run, on a busy machine
def test_the_installed_tarballs_playbooks_provision_the_reset_lab_from_outside(
    lab: Any, collection_tarball: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From a directory holding only the installed tarball and the lab's inventory (with the etcd
    CA beside it, where the etcd role keeps it for any inventory): no ansible.cfg, no checkout.
    The nodes come from the reset above: the tarball's reset finds nothing of ours left, and its
    site.yml brings every node back, leaving their own rules, routes and files alone."""
    assert sorted(THEIRS_BEFORE) == sorted(lab.names()), "the reset test runs first"
    work = tmp_path / "elsewhere"
    work.mkdir()
    installed = install(work, collection_tarball, into="collections")
    shutil.copytree(LAB_INVENTORY, work / "inventory")
    shutil.copytree(
        Path(f"{LAB_INVENTORY}-credentials") / "etcd-pki",
        work / "inventory-credentials" / "etcd-pki",
    )
    assert sorted(path.name for path in work.iterdir()) == [
        "collections",
        "inventory",
        "inventory-credentials",
    ]
    # The wheelhouse cache every lab test shares, not the user's home.
    cache = f"flannel_wheelhouse_cache_dir={WHEELHOUSE_CACHE}"

    reset = play_outside(work, installed, "-i", "inventory", "pyflannel.network.reset", "-e", cache)
    assert reset.returncode == 0 and not reset.failed_hosts(), reset.explain()
    assert reset.changed() == dict.fromkeys(lab.names(), 0), reset.explain()
    for name in lab.names():
        assert ssh(lab, name, "systemctl is-active pyflanneld || true").strip() == "inactive"
        assert ssh(lab, name, "ls /opt/pyflannel 2>/dev/null || true").strip() == ""

    first = play_outside(work, installed, "-i", "inventory", "pyflannel.network.site", "-e", cache)
    assert_converged(first, lab.names())
    assert len(leases(lab)) == 3
    for name in lab.names():
        assert ssh(lab, name, "systemctl is-active pyflanneld").strip() == "active"
        assert theirs(lab, name) == THEIRS_BEFORE[name]
        # Built from the tarball's copy of pyflannel_runtime alone: no controller code, no lab.
        site_packages = ssh(lab, name, "ls /opt/pyflannel/venv/lib/python3*/site-packages")
        assert "pyflannel_runtime" in site_packages.split(), site_packages
        assert "pyflannel_controller" not in site_packages.split(), site_packages
        runtime = ssh(
            lab, name, "ls /opt/pyflannel/venv/lib/python3*/site-packages/pyflannel_runtime"
        )
        assert "agent" in runtime.split(), runtime
        assert not {"lab", "model", "render"} & set(runtime.split()), runtime

    again = play_outside(work, installed, "-i", "inventory", "pyflannel.network.site", "-e", cache)
    assert_converged(again, lab.names(), suite=False)
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    report(
        capsys,
        f"outside the repository: pyflannel.network.reset {reset.seconds:.0f} s,"
        f" pyflannel.network.site {first.seconds:.0f} s (changed {first.changed()}),"
        f" re-run {again.seconds:.0f} s (changed {again.changed()})",
    )
