"""site.yml with the Kubernetes datastore, then the udp backend, on systemd lab hosts over SSH.

No kube-apiserver can run here: the Node API TEST DOUBLE (tests/fakes/kube_api.py, checked
against the official ``kubernetes`` client) stands in for it, served from this process on the lab
bridge's address, which the hosts route to. Its Node objects node1..node3 carry the podCIDRs
kube-controller-manager would have assigned (in its order, from the network's first /24). The
kubeconfig is a controller file (flannel_kubeconfig_src) the agent role copies to each node.

One lab serves the module, in this order: a kubeconfig the nodes lack fails in preflight; the
kube datastore converges (vxlan) and its re-run changes nothing; then the udp backend (same
datastore) converges, its extra joins the virtualenv, its re-run changes nothing and its unit
keeps the sandbox, a real Prometheus reads the udp forwarder's and the Kubernetes datastore's
metrics through the agents' file_sd document, and the disruption probe's TCP connections
outlive every agent restarting (udp forwards in the agent: the gap is reported); switching away
from udp takes the extra out and back puts it in again; last, reset.yml removes the copied
kubeconfig.
"""

from __future__ import annotations

import json
import re
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pyflannel_lab.disruption import Probe, each, shown
from pyflannel_lab.playbook import run_playbook
from tests.fakes.kube_api import FLANNEL_AGENT, FakeKubeApi
from tests.integration.prometheus_server import Prometheus, prometheus_for
from tests.integration.scrape import promtool_problems, samples
from tests.integration.site_lab import (
    BASE_PROJECTS,
    assert_converged,
    lab_hosts,
    on_host,
    venv_projects,
)

pytestmark = [pytest.mark.root, pytest.mark.podman]

underlay = pytest.importorskip("pyflannel_lab.underlay")

PREFIX = "flannel.alpha.coreos.com"
# What the agent's virtualenv holds: the runtime and its extras for the Kubernetes datastore
# (not the `kubernetes` package), and for the udp backend.
KUBE_VENV = {*BASE_PROJECTS, "urllib3", "pyyaml"}
UDP_VENV = {*KUBE_VENV, "numpy"}
KUBECONFIG_ON_NODES = "/etc/pyflannel/kubeconfig"
TOKEN = f"pyft-{secrets.token_hex(8)}"
# What kubelet puts on every Node before any network plugin runs; flannel's patches keep it.
KUBELET_ANNOTATION = {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}


def pod_cidr(name: str) -> str:
    return f"10.244.{int(name.removeprefix('node')) - 1}.0/24"


@pytest.fixture(scope="module")
def lab() -> Iterator[Any]:
    with lab_hosts() as state:
        yield state


@pytest.fixture(scope="module")
def kube_api(lab: Any) -> Iterator[FakeKubeApi]:
    """The TEST DOUBLE of the Node API, where the hosts reach the controller; the kubeconfig's
    token may do what the agents' ClusterRole allows (docs/operating.md, "Kubernetes RBAC") and
    no more."""
    tokens = {TOKEN: FLANNEL_AGENT}
    with FakeKubeApi(host=str(underlay.gateway(lab.network)), tokens=tokens) as api:
        for name in lab.names():
            api.add_node(name, pod_cidr=pod_cidr(name), annotations=KUBELET_ANNOTATION)
        yield api


@pytest.fixture(scope="module")
def file_sd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where site.yml writes the agents' file_sd document (flannel_prometheus_file_sd_path)."""
    return tmp_path_factory.mktemp("file-sd") / "pyflannel-nodes.json"


class Kube(NamedTuple):
    api: FakeKubeApi
    extra_vars: dict[str, Any]


@pytest.fixture(scope="module")
def kube(kube_api: FakeKubeApi, tmp_path_factory: pytest.TempPathFactory) -> Kube:
    """The double, and the lab inventory switched to the Kubernetes datastore (its etcd settings
    unset) with the double's kubeconfig as a controller file."""
    source = tmp_path_factory.mktemp("kube") / "flannel.kubeconfig"
    source.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: lab\n  cluster:\n    server: {kube_api.url}\n"
        f"users:\n- name: flannel\n  user:\n    token: {TOKEN}\n"
        "contexts:\n- name: flannel@lab\n  context:\n    cluster: lab\n    user: flannel\n"
        "current-context: flannel@lab\n"
    )
    source.chmod(0o600)
    extra_vars = {
        "flannel_datastore": "kubernetes",
        "flannel_kubeconfig_file": KUBECONFIG_ON_NODES,
        "flannel_kubeconfig_src": str(source),
        **dict.fromkeys(
            ("flannel_etcd_endpoints", "flannel_etcd_cafile", "flannel_etcd_certfile"), None
        ),
        "flannel_etcd_keyfile": None,
    }
    return Kube(kube_api, extra_vars)


def annotations(kube_api: FakeKubeApi, name: str) -> dict[str, str]:
    node = kube_api.node(name)
    assert node is not None
    return dict(node["metadata"]["annotations"])


def flannel_annotations(kube_api: FakeKubeApi, name: str) -> dict[str, str]:
    found = annotations(kube_api, name)
    assert {k: found.get(k) for k in KUBELET_ANNOTATION} == KUBELET_ANNOTATION, found
    return {k.removeprefix(f"{PREFIX}/"): v for k, v in found.items() if k.startswith(PREFIX)}


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")


def test_a_kubeconfig_the_nodes_lack_fails_in_preflight(lab: Any, kube: Kube) -> None:
    without_source = {**kube.extra_vars, "flannel_kubeconfig_src": None}
    run = run_playbook("site.yml", extra_vars=without_source)
    assert run.returncode != 0, run.explain()
    for name in lab.names():
        assert (
            f"{name}: flannel_kubeconfig_file: {KUBECONFIG_ON_NODES} is not a file on {name}"
            in run.output
        ), run.explain()
    assert "TASK [pyflannel.network.cni" not in run.output, run.explain()


def test_the_kubernetes_datastore_converges_and_the_rerun_changes_nothing(
    lab: Any, kube: Kube, capsys: pytest.CaptureFixture[str]
) -> None:
    kube_api, kube_vars = kube
    first = run_playbook("site.yml", extra_vars=kube_vars)
    assert_converged(first, lab.names())
    assert first.output.count("3 leases, 2 peers programmed, 0 missing, 0 stale") == 3
    source = Path(kube_vars["flannel_kubeconfig_src"]).read_text()
    for host in lab.hosts:
        name = host.name
        assert on_host(lab, name, "systemctl is-active pyflanneld").strip() == "active"
        assert on_host(lab, name, f"stat -c '%U %a' {KUBECONFIG_ON_NODES}").split() == [
            "root",
            "600",
        ]
        assert on_host(lab, name, f"cat {KUBECONFIG_ON_NODES}") == source
        assert venv_projects(lab, name) == KUBE_VENV
        assert '"Type": "vxlan"' in on_host(lab, name, "cat /etc/kube-flannel/net-conf.json")
        # The lease is the podCIDR the controller assigned, the network's first /24 included.
        subnet = pod_cidr(name).replace(".0/24", ".1/24")
        assert f"FLANNEL_SUBNET={subnet}\n" in on_host(lab, name, "cat /run/flannel/subnet.env")
        mac = on_host(lab, name, "cat /sys/class/net/flannel.1/address").strip()
        assert flannel_annotations(kube_api, name) == {
            "backend-data": json.dumps({"VNI": 1, "VtepMAC": mac}, separators=(",", ":")),
            "backend-type": "vxlan",
            "kube-subnet-manager": "true",
            "public-ip": str(host.address),
        }
        node = kube_api.node(name)
        assert node is not None
        (condition,) = node["status"]["conditions"]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "NetworkUnavailable",
            "False",
            "FlannelIsUp",
        )
    assert "etcd" not in on_host(lab, "node1", "systemctl list-units --state=active --no-legend")
    # Every agent and the verify role's routes module spoke with the kubeconfig's credentials.
    assert {r.authorization for r in kube_api.requests()} == {f"Bearer {TOKEN}"}

    kube_api.clear_requests()
    again = run_playbook("site.yml", extra_vars=kube_vars)
    assert_converged(again, lab.names(), suite=False)
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()
    assert kube_api.requests("PATCH") == [], "a re-run must not write to the API"
    report(capsys, f"kube datastore: site.yml {first.seconds:.0f} s, re-run {again.seconds:.0f} s")


def test_the_udp_backend_under_systemd(
    lab: Any, kube: Kube, file_sd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube_api, kube_vars = kube
    udp = {
        **kube_vars,
        "flannel_backend_type": "udp",
        "flannel_prometheus_file_sd_path": str(file_sd),
    }
    switch = run_playbook("site.yml", extra_vars=udp)
    assert_converged(switch, lab.names())
    # udp forwards in user space: each peer is checked against the routes the agent's forwarder
    # publishes on /statusz.
    summary = "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready"
    assert switch.output.count(summary) == 3, switch.output
    for host in lab.hosts:
        name = host.name
        # The switch installed the udp backend's extra into the virtualenv that was there.
        assert venv_projects(lab, name) == UDP_VENV
        links = on_host(lab, name, "ls /sys/class/net")
        assert "flannel0" in links.split() and "flannel.1" not in links.split(), links
        assert on_host(lab, name, "cat /sys/class/net/flannel0/mtu").strip() == "1472"
        assert "10.244.0.0/16 dev flannel0" in on_host(lab, name, "ip -4 route")
        # The forwarding workers run in the agent's unit, with the TUN device allowed.
        unit = on_host(lab, name, "systemctl show pyflanneld -p DeviceAllow")
        assert "DeviceAllow=/dev/net/tun rw" in unit, unit
        workers = on_host(lab, name, "systemd-cgls --no-pager --unit pyflanneld.service")
        assert workers.count("pyflannel_runtime.backend.udp.worker") == 2, workers
        # flannel's udp backend leaves BackendType unset: the annotation is empty, its data null.
        assert flannel_annotations(kube_api, name) == {
            "backend-data": "null",
            "backend-type": "",
            "kube-subnet-manager": "true",
            "public-ip": str(host.address),
        }

    again = run_playbook("site.yml", extra_vars=udp)
    assert_converged(again, lab.names(), suite=False)
    assert again.changed() == dict.fromkeys(lab.names(), 0), again.explain()

    security = on_host(lab, "node1", "systemd-analyze security pyflanneld.service --no-pager")
    score = re.search(r"Overall exposure level for pyflanneld\.service: ([0-9.]+) (\w+)", security)
    assert score is not None, security
    report(
        capsys,
        f"udp backend: site.yml {switch.seconds:.0f} s, re-run {again.seconds:.0f} s; "
        f"systemd-analyze security pyflanneld.service: {score[1]} {score[2]}",
    )
    assert float(score[1]) < 5.0, security


UDP_DROP_REASONS = (
    "foreign_source",
    "malformed",
    "no_route",
    "send_errors",
    "socket_drops",
    "super_packets_dropped",
    "ttl_exceeded",
)


def test_prometheus_reads_the_udp_forwarder_and_the_kubernetes_datastore(
    lab: Any, kube: Kube, file_sd: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = sorted(lab.names())
    assert {group["labels"]["backend"] for group in json.loads(file_sd.read_text())} == {"udp"}
    with prometheus_for(file_sd, tmp_path / "prometheus") as prometheus:
        prometheus.wait("up == 1 for every node", lambda: up(prometheus) == names)
        dropped = prometheus.query("pyflannel_udp_datagrams_dropped_total")
        assert sorted({(r["metric"]["node"], r["metric"]["reason"]) for r in dropped}) == [
            (name, reason) for name in names for reason in UDP_DROP_REASONS
        ]
        restarts = prometheus.query("pyflannel_datastore_watch_restarts_total")
        assert {r["metric"]["reason"] for r in restarts} == {"closed", "expired", "error"}
        assert nodes_of(prometheus, 'pyflannel_build_info{backend="udp"}') == names
        assert nodes_of(prometheus, "pyflannel_peers_programmed == 2") == names
        assert nodes_of(prometheus, "pyflannel_lease_renewals_total == 0") == names
        assert prometheus.query("pyflannel_own_lease_expiry_timestamp_seconds") == []
    url = f"http://{lab.host('node1').address}:8081/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    assert promtool_problems(text) == ""
    assert samples(text)['pyflannel_udp_datagrams_dropped_total{reason="malformed"}'] == 0
    report(capsys, f"node1's /metrics, udp and the Kubernetes datastore:\n{text}")


def up(prometheus: Prometheus) -> list[str]:
    return nodes_of(prometheus, 'up{job="pyflannel"} == 1')


def nodes_of(prometheus: Prometheus, expr: str) -> list[str]:
    return sorted(r["metric"]["node"] for r in prometheus.query(expr))


def test_udp_connections_outlive_agent_restarts_on_both_ends_and_a_third_node(
    lab: Any, kube: Kube, capsys: pytest.CaptureFixture[str]
) -> None:
    """flannel0 goes with the agent that forwards through it: every restart is an outage, and
    TCP rides it out with retransmissions (no reset, nothing lost); the gap is the figure."""
    probe = Probe(lab, lab.names(), lab.outside.target)
    try:
        opened = probe.open()
        assert all(row.report.up for row in opened), shown("opened", opened)
        each(["node1", "node2"], lambda n: on_host(lab, n, "systemctl restart pyflanneld"))
        on_host(lab, "node3", "systemctl restart pyflanneld")
        # TCP's retransmissions back off while flannel0 is gone: the echoes come back late.
        rows = probe.check("udp: pyflanneld restarted on every node", settle=30.0)
    finally:
        probe.close()
    report(capsys, shown("udp: pyflanneld restarted on every node", rows))
    disturbed = [row for row in rows if row.disturbed]
    assert not disturbed, shown("reset, lost, awaited or down", disturbed)


def test_switching_away_from_udp_and_back_converges(lab: Any, kube: Kube) -> None:
    """flannel0 goes with the udp agent that held it, before the agent role removes the old
    backend's devices (whose list the preflight took while it was there)."""
    _, kube_vars = kube
    vxlan = run_playbook("site.yml", extra_vars=kube_vars)
    assert_converged(vxlan, lab.names())
    for name in lab.names():
        links = on_host(lab, name, "ls /sys/class/net").split()
        assert "flannel.1" in links and "flannel0" not in links, links
        assert venv_projects(lab, name) == KUBE_VENV  # numpy went with the udp backend
    udp = run_playbook("site.yml", extra_vars={**kube_vars, "flannel_backend_type": "udp"})
    assert_converged(udp, lab.names())
    assert {name: venv_projects(lab, name) for name in lab.names()} == dict.fromkeys(
        lab.names(), UDP_VENV
    )


def test_reset_removes_the_kubeconfig_it_copied(lab: Any, kube: Kube) -> None:
    run = run_playbook("reset.yml", extra_vars=kube.extra_vars)
    assert run.returncode == 0 and not run.failed_hosts(), run.explain()
    for name in lab.names():
        left = on_host(lab, name, f"ls {KUBECONFIG_ON_NODES} /etc/kube-flannel 2>&1 || true")
        assert "No such file" in left and "net-conf.json" not in left, left
