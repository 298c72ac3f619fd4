"""pyflannel.network.lease and ops/lease.py against a real etcd and the Node API test double:
a node's lease released (check mode first, then for real, then nothing left to do), a
reservation kept unless asked, a subnet another node holds refused, a subnet pinned; in
Kubernetes mode only flannel's own annotations go, and the peers' lease tracker sees the node
leave."""

from __future__ import annotations

import json
from collections.abc import Iterator
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pyflannel.network.plugins.modules import lease as lease_module

from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_runtime.ops.lease import LeaseOpError, NodeLease, release_etcd
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.nodes import NodeLeaseTracker
from pyflannel_runtime.wire.lease import EventType
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data
from tests.fakes.kube_api import FakeKubeApi
from tests.unit.plugins.conftest import RunModule, run_module_main

pytestmark = pytest.mark.etcd


@pytest.fixture
def run_module() -> RunModule:
    """The module harness of the unit tests (tests/unit/plugins/conftest.py)."""
    return run_module_main


P = "flannel.alpha.coreos.com/"


def lease_value(ip: str, mac: str = "c6:d2:32:6f:8f:44") -> str:
    return (
        f'{{"PublicIP":"{ip}","PublicIPv6":null,"BackendType":"vxlan",'
        f'"BackendData":{{"VNI":1,"VtepMAC":"{mac}"}}}}'
    )


def lease(server: EtcdServer, prefix: str, subnet: str, ip: str) -> str:
    """A subnet key under an etcd lease, as an agent writes it; returns the key."""
    key = f"{prefix}/subnets/{subnet.replace('/', '-')}"
    grant = server.etcdctl("lease", "grant", "600").split()[1]
    server.etcdctl("put", "--lease", grant, key, lease_value(ip))
    return key


def keys(server: EtcdServer, prefix: str) -> list[str]:
    return server.etcdctl("get", "--prefix", "--keys-only", f"{prefix}/subnets/").split()


# The module's options alone: no agent's environment file on this machine is read.
NO_AGENT = {"agent_env": ""}


def etcd_args(server: EtcdServer, prefix: str, **args: Any) -> dict[str, Any]:
    return {**NO_AGENT, "etcd_endpoints": [server.endpoint], "etcd_prefix": prefix, **args}


def test_a_nodes_lease_is_released_by_its_public_ip_check_mode_first(
    etcd_server: EtcdServer, etcd_prefix: str, run_module: RunModule
) -> None:
    gone = lease(etcd_server, etcd_prefix, "10.244.3.0/24", "192.0.2.13")
    # A stale lease of the same node (left by an earlier network config) goes with it.
    stale = lease(etcd_server, etcd_prefix, "10.244.9.0/24", "192.0.2.13")
    other = lease(etcd_server, etcd_prefix, "10.244.4.0/24", "192.0.2.14")
    args = etcd_args(etcd_server, etcd_prefix, state="absent", public_ip="192.0.2.13")

    dry = run_module(lease_module.main, args, check=True, diff=True)
    assert dry["changed"] and not dry["failed"], dry
    assert sorted(k["key"] for k in dry["keys"]) == sorted([gone, stale])
    assert all(k["after"] is None and k["changed"] for k in dry["keys"])
    assert {d["before_header"]: d["after"] for d in dry["diff"]} == {gone: "", stale: ""}
    assert dry["diff"][0]["before"] == lease_value("192.0.2.13")
    assert sorted(keys(etcd_server, etcd_prefix)) == sorted([gone, stale, other])

    done = run_module(lease_module.main, args)
    assert done["changed"] and done["kept"] == []
    assert keys(etcd_server, etcd_prefix) == [other]

    again = run_module(lease_module.main, args)
    assert not again["changed"] and again["keys"] == []


def test_a_pinned_subnet_finds_the_lease_of_a_node_with_no_known_address(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    key = lease(etcd_server, etcd_prefix, "10.244.5.0/24", "192.0.2.15")
    settings = EtcdSettings(endpoints=(etcd_server.endpoint,), prefix=etcd_prefix)
    done = release_etcd(settings, NodeLease(subnet=IPv4Network("10.244.5.0/24")), check=False)
    assert [(c.key, c.changed) for c in done.changes] == [(key, True)]
    assert keys(etcd_server, etcd_prefix) == []
    with pytest.raises(LeaseOpError, match="nothing names the node's lease"):
        release_etcd(settings, NodeLease(), check=False)


def test_a_reservation_is_kept_unless_asked(
    etcd_server: EtcdServer, etcd_prefix: str, run_module: RunModule
) -> None:
    pin = etcd_args(
        etcd_server, etcd_prefix, state="present", subnet="10.244.7.0/24", public_ip="192.0.2.17"
    )
    dry = run_module(lease_module.main, pin, check=True)
    assert dry["changed"] and keys(etcd_server, etcd_prefix) == []
    pinned = run_module(lease_module.main, pin, diff=True)
    key = f"{etcd_prefix}/subnets/10.244.7.0-24"
    assert pinned["changed"] and pinned["keys"][0]["key"] == key
    assert pinned["diff"][0]["after"] == '{"PublicIP":"192.0.2.17","PublicIPv6":null}'
    assert '"Lease" : 0' in etcd_server.etcdctl("get", key, "-w", "fields")
    assert not run_module(lease_module.main, pin)["changed"]

    release = etcd_args(etcd_server, etcd_prefix, state="absent", public_ip="192.0.2.17")
    kept = run_module(lease_module.main, release)
    assert not kept["changed"] and kept["kept"] == [key]
    assert keys(etcd_server, etcd_prefix) == [key]

    released = run_module(lease_module.main, {**release, "release_reservation": True})
    assert released["changed"] and released["kept"] == []
    assert keys(etcd_server, etcd_prefix) == []


def test_a_subnet_another_node_holds_is_neither_released_nor_pinned(
    etcd_server: EtcdServer, etcd_prefix: str, run_module: RunModule
) -> None:
    key = lease(etcd_server, etcd_prefix, "10.244.8.0/24", "192.0.2.19")
    node = {"subnet": "10.244.8.0/24", "public_ip": "192.0.2.18"}
    for state in ("absent", "present"):
        result = run_module(
            lease_module.main, etcd_args(etcd_server, etcd_prefix, state=state, **node)
        )
        assert result["failed"] and "192.0.2.19" in result["msg"], result
    assert keys(etcd_server, etcd_prefix) == [key]


def test_over_tls_with_the_nodes_client_certificate(
    etcd_factory: Any, tmp_path: Path, etcd_prefix: str, run_module: RunModule
) -> None:
    from tests.integration.etcd_tls import make_tls_material

    tls = make_tls_material(tmp_path / "pki")
    server: EtcdServer = etcd_factory(tls=tls)
    lease(server, etcd_prefix, "10.244.6.0/24", "192.0.2.16")
    args = etcd_args(
        server,
        etcd_prefix,
        state="absent",
        public_ip="192.0.2.16",
        etcd_cafile=tls.ca_file,
        etcd_certfile=tls.client_cert,
        etcd_keyfile=tls.client_key,
    )
    assert run_module(lease_module.main, args)["changed"]
    assert keys(server, etcd_prefix) == []
    without_certificate = {**args, "etcd_certfile": None, "etcd_keyfile": None}
    refused = run_module(lease_module.main, without_certificate)
    assert refused["failed"], refused


# --- Kubernetes ------------------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def kubeconfig(api: FakeKubeApi, directory: Path) -> str:
    path = directory / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        f"clusters: [{{name: lab, cluster: {{server: '{api.url}'}}}}]\n"
        "users: [{name: admin, user: {token: admin-token}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: admin}}]\n"
    )
    return str(path)


FLANNELS = {
    P + "kube-subnet-manager": "true",
    P + "backend-type": "vxlan",
    P + "backend-data": vxlan_backend_data(1, "aa:bb:cc:00:00:03"),
    P + "public-ip": "192.0.2.23",
}
OPERATORS = {P + "public-ip-overwrite": "203.0.113.23", "kubelet.example/owned": "yes"}


def test_kubernetes_only_flannels_annotations_go_and_peers_see_the_node_leave(
    api: FakeKubeApi, tmp_path: Path, run_module: RunModule
) -> None:
    api.add_node("node3", pod_cidr="10.244.3.0/24", annotations={**FLANNELS, **OPERATORS})
    keys_ = Annotations.for_prefix()
    tracker = NodeLeaseTracker(keys_, enable_ipv4=True, enable_ipv6=False)
    (held,) = tracker.reset([api.node("node3") or {}])
    assert held.subnet == IPv4Network("10.244.3.0/24")
    args = {
        **NO_AGENT,
        "state": "absent",
        "datastore": "kubernetes",
        "kubeconfig_file": kubeconfig(api, tmp_path),
        "node_name": "node3",
    }

    dry = run_module(lease_module.main, args, check=True, diff=True)
    assert dry["changed"] and dry["keys"][0]["key"] == "nodes/node3"
    assert dry["diff"][0]["before"] == "".join(
        f"{key}: {json.dumps(value)}\n" for key, value in sorted(FLANNELS.items())
    )
    assert api.requests("PATCH") == []

    done = run_module(lease_module.main, args)
    assert done["changed"]
    node = api.node("node3") or {}
    assert node["metadata"]["annotations"] == OPERATORS
    assert node["spec"]["podCIDR"] == "10.244.3.0/24"  # the cluster's, not flannel's
    (patch,) = api.requests("PATCH")
    assert patch.path == "/api/v1/nodes/node3/status"
    assert patch.authorization == "Bearer admin-token"
    (event,) = tracker.update("node3", node)
    assert event.type is EventType.REMOVED and event.lease.subnet == held.subnet

    assert not run_module(lease_module.main, args)["changed"]
    api.delete_node("node3")
    gone = run_module(lease_module.main, args)
    assert not gone["changed"] and gone["keys"][0]["before"] is None


def test_kubernetes_has_nothing_to_pin_and_needs_the_node_name(
    api: FakeKubeApi, tmp_path: Path, run_module: RunModule
) -> None:
    args = {**NO_AGENT, "datastore": "kubernetes", "kubeconfig_file": kubeconfig(api, tmp_path)}
    pin = run_module(lease_module.main, {**args, "node_name": "node3", "state": "present"})
    assert pin["failed"] and "podCIDR" in pin["msg"]
    unnamed = run_module(lease_module.main, {**args, "state": "absent"})
    assert unnamed["failed"] and "node_name" in unnamed["msg"]
    assert api.requests() == []


def test_an_unreachable_api_server_is_reported(tmp_path: Path, run_module: RunModule) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters: [{name: lab, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: admin, user: {token: t}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: admin}}]\n"
    )
    args = {**NO_AGENT, "state": "absent", "datastore": "kubernetes", "kubeconfig_file": str(path)}
    result = run_module(lease_module.main, {**args, "node_name": "node3"})
    assert result["failed"] and result["msg"].startswith("nodes/node3: "), result
