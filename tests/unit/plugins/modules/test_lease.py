"""pyflannel.network.lease: input problems fail before the lease store is contacted (the live
release and pin are tested against a real etcd and the Node API test double in
tests/integration/test_lease_store.py)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.pyflannel.network.plugins.modules import lease

from ..conftest import RunModule

# Nothing listens here: a test that reached etcd would fail with "connection refused". No
# agent's environment file is read.
NOWHERE = {"etcd_endpoints": ["http://127.0.0.1:9"], "agent_env": ""}


def test_an_address_that_does_not_parse_fails(run_module: RunModule) -> None:
    result = run_module(lease.main, {**NOWHERE, "state": "absent", "public_ip": "192.0.2.300"})
    assert result["failed"] and result["msg"].startswith("public_ip, public_ipv6, subnet, ")
    bad_subnet = run_module(lease.main, {**NOWHERE, "subnet": "10.244.1.1/24"})
    assert bad_subnet["failed"] and "has host bits set" in bad_subnet["msg"]


def test_a_release_needs_something_that_names_the_node(run_module: RunModule) -> None:
    result = run_module(lease.main, {**NOWHERE, "state": "absent"})
    assert result["failed"] and result["msg"].startswith("nothing names the node's lease")


def test_a_pin_needs_the_subnet_and_the_public_ip(run_module: RunModule) -> None:
    no_subnet = run_module(lease.main, {**NOWHERE, "public_ip": "192.0.2.1"})
    assert no_subnet["failed"] and "needs the node's subnet" in no_subnet["msg"]
    no_ip = run_module(lease.main, {**NOWHERE, "subnet": "10.244.1.0/24"})
    assert no_ip["failed"] and "needs the node's public IP" in no_ip["msg"]


def test_the_lease_store_not_given_is_the_agents(run_module: RunModule, tmp_path: Path) -> None:
    env = tmp_path / "pyflanneld.env"
    env.write_text("FLANNELD_ETCD_ENDPOINTS=http://127.0.0.1:9\n")
    args = {"agent_env": str(env), "state": "absent", "public_ip": "192.0.2.1"}
    result = run_module(lease.main, args, check=True)
    assert result["failed"] and "127.0.0.1:9" in result["msg"], result["msg"]
    env.write_text("FLANNELD_KUBE_SUBNET_MGR=true\n")
    kube = run_module(lease.main, args, check=True)
    assert kube["failed"] and kube["msg"] == "node_name: required with the kubernetes datastore"
    pin = run_module(lease.main, {**args, "state": "present", "subnet": "10.244.1.0/24"})
    assert pin["failed"] and pin["msg"].startswith("state=present: with the kubernetes datastore")


def test_an_unreachable_etcd_is_reported(run_module: RunModule) -> None:
    args = {**NOWHERE, "state": "absent", "public_ip": "192.0.2.1"}
    result = run_module(lease.main, args, check=True)
    assert result["failed"] and "127.0.0.1:9" in result["msg"]
