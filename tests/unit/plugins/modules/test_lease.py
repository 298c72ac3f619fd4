"""pyflannel.network.lease: input problems fail before the lease store is contacted (the live
release and pin are tested against a real etcd and the Node API test double in
tests/integration/test_lease_store.py)."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.modules import lease

from ..conftest import RunModule

# Nothing listens here: a test that reached etcd would fail with "connection refused".
NOWHERE = {"etcd_endpoints": ["http://127.0.0.1:9"]}


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


def test_the_etcd_datastore_needs_its_endpoints(run_module: RunModule) -> None:
    result = run_module(lease.main, {"state": "absent", "public_ip": "192.0.2.1"})
    assert result["failed"] and "etcd_endpoints" in result["msg"]


def test_an_unreachable_etcd_is_reported(run_module: RunModule) -> None:
    args = {**NOWHERE, "state": "absent", "public_ip": "192.0.2.1"}
    result = run_module(lease.main, args, check=True)
    assert result["failed"] and "127.0.0.1:9" in result["msg"]
