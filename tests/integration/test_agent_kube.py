"""pyflanneld in kube mode end to end: the Node API test double, agents in host namespaces
(docs/compatibility.md, "Node annotations"). The double enforces the least-privilege RBAC of
docs/operating.md for the agents' token (get, list, watch nodes; patch nodes/status) on every
request."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest

from pyflannel_lab.netns_agents import AgentLab
from tests.fakes.kube_api import FLANNEL_AGENT, FakeKubeApi
from tests.integration.scrape import promtool_problems, samples

pytestmark = pytest.mark.root

PREFIX = "flannel.alpha.coreos.com"
TOKEN = "pyflannel-agent-token"


def agent_lab(hosts: int) -> AgentLab:
    """Agents in kube mode against the double, which lets their token do what RBAC would."""

    def double(*, host: str) -> FakeKubeApi:
        return FakeKubeApi(host=host, tokens={TOKEN: FLANNEL_AGENT})

    return AgentLab({"Type": "vxlan"}, hosts=hosts, prefix="pkb", kube_api=double, kube_token=TOKEN)


@pytest.fixture
def lab() -> Iterator[AgentLab]:
    with agent_lab(hosts=2) as running:
        running.start_all()
        yield running


def _status_patches(lab: AgentLab, node: str) -> list[dict[str, object]]:
    assert lab.kube is not None
    return [json.loads(r.body) for r in lab.kube.requests("PATCH", f"/api/v1/nodes/{node}/status")]


def test_annotations_and_condition_patched_once_with_flannels_bodies(lab: AgentLab) -> None:
    assert all(lab.wait_reachable().values())
    assert lab.kube is not None
    for host in lab.net.hosts:
        mac = lab.net.ip(host.ns, "-br", "link", "show", "flannel.1").split()[2]
        patches = _status_patches(lab, host.ns)
        assert len(patches) == 2, patches
        annotations, condition = patches
        assert annotations == {
            "metadata": {
                "annotations": {
                    f"{PREFIX}/backend-data": json.dumps(
                        {"VNI": 1, "VtepMAC": mac}, separators=(",", ":")
                    ),
                    f"{PREFIX}/backend-type": "vxlan",
                    f"{PREFIX}/kube-subnet-manager": "true",
                    f"{PREFIX}/public-ip": str(host.underlay_ip),
                }
            }
        }
        (cond,) = condition["status"]["conditions"]  # type: ignore[index]
        assert list(cond) == [
            "type",
            "status",
            "lastHeartbeatTime",
            "lastTransitionTime",
            "reason",
            "message",
        ]
        assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
            "NetworkUnavailable",
            "False",
            "FlannelIsUp",
            "Flannel is running on this node",
        )
        assert lab.subnet_file(host).read_text() == (
            f"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.{host.n}.1/24\n"
            "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        )


def test_restart_keeps_the_vtep_mac_and_patches_nothing_new(lab: AgentLab) -> None:
    host = lab.net.hosts[0]
    mac = lab.net.ip(host.ns, "-br", "link", "show", "flannel.1").split()[2]
    lab.stop_agent(host)
    lab.net.ip(host.ns, "link", "del", "flannel.1")  # a reboot loses the device
    lab.start_agent(host)
    lab.wait_ready(host)
    assert lab.net.ip(host.ns, "-br", "link", "show", "flannel.1").split()[2] == mac
    annotation_patches = [p for p in _status_patches(lab, host.ns) if "metadata" in p]
    assert len(annotation_patches) == 1, "an unchanged node must not be patched again"
    assert all(lab.reachability().values())


def test_node_without_pod_cidr_exits_one_with_flannels_message() -> None:
    with agent_lab(hosts=1) as lab:
        assert lab.kube is not None
        host = lab.net.hosts[0]
        lab.kube.update_node(host.ns, lambda node: node["spec"].pop("podCIDR"))
        agent = lab.start_agent(host)
        assert agent.process.wait(60) == 1
        assert (
            f'Error registering network: failed to acquire lease: node "{host.ns}" pod cidr not assigned'
            in agent.log()
        )


def test_peers_follow_node_events(lab: AgentLab) -> None:
    assert lab.kube is not None
    a, b = lab.net.hosts
    lab.stop_agent(b, signal.SIGKILL)
    lab.kube.delete_node(b.ns)
    deadline = time.monotonic() + 10
    while str(b.subnet) in lab.net.ip(a.ns, "route", "show") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert str(b.subnet) not in lab.net.ip(a.ns, "route", "show")
    # The node comes back with new annotations (as a restarted agent would write them).
    lab.kube.add_node(b.ns, pod_cidr=str(b.subnet))
    lab.start_agent(b)
    lab.wait_ready(b)
    assert all(lab.wait_reachable().values())


def test_invalid_net_conf_exits_one_with_flannels_message() -> None:
    with agent_lab(hosts=1) as lab:
        lab.net_conf_path.write_text('{"Network": "fc00::/48", "Backend": {"Type": "vxlan"}}')
        host = lab.net.hosts[0]
        agent = lab.start_agent(host)
        assert agent.process.wait(60) == 1
        assert "error parsing subnet config: invalid IPv4 CIDR format" in agent.log()
        assert not lab.subnet_file(host).exists()


def test_metrics_with_the_kubernetes_datastore(lab: AgentLab) -> None:
    """The same metrics as with etcd, without renewals or an expiry; the node watch's restarts
    by their own reasons: a stream the API server ended, a resourceVersion it no longer has."""
    assert lab.kube is not None
    host = lab.net.hosts[0]
    text = lab.metrics(host)
    assert promtool_problems(text) == ""
    found = samples(text)
    assert (found["pyflannel_ready"], found["pyflannel_leases"], found["pyflannel_peers"]) == (
        1,
        2,
        1,
    )
    assert found["pyflannel_peers_programmed"] == 1
    assert found["pyflannel_lease_renewals_total"] == 0
    assert "pyflannel_own_lease_expiry_timestamp_seconds" not in found
    restarts = 'pyflannel_datastore_watch_restarts_total{reason="%s"}'
    assert {reason: found[restarts % reason] for reason in ("closed", "expired", "error")} == {
        "closed": 0,
        "expired": 0,
        "error": 0,
    }
    # The API server restarts on a store with a later history: the open stream ends, and the
    # watch started again from its resourceVersion gets 410 Gone.
    lab.kube.restart(lab.kube.resource_version + 1000)

    def restarted() -> bool:
        now = samples(lab.metrics(host))
        return now[restarts % "closed"] >= 1 and now[restarts % "expired"] >= 1

    deadline = time.monotonic() + 30
    while not restarted() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert restarted(), lab.metrics(host)
    assert samples(lab.metrics(host))["pyflannel_peers_programmed"] == 1
