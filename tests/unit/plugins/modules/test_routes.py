"""pyflannel.network.routes: input checks before anything is read (the live verify and repair
run against real hosts in tests/integration/test_site.py)."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.modules import routes

from ..conftest import RunModule


def test_etcd_needs_endpoints(run_module: RunModule) -> None:
    result = run_module(routes.main, {"datastore": "etcd"})
    assert result["failed"] and "etcd_endpoints" in result["msg"]


def test_a_bad_public_ip_is_named(run_module: RunModule) -> None:
    args = {"etcd_endpoints": ["http://127.0.0.1:9"], "public_ip": "10.0.0.300"}
    result = run_module(routes.main, args)
    assert result["failed"] and result["msg"].startswith("public_ip: ")


def test_an_unreachable_lease_store_fails_the_check(run_module: RunModule) -> None:
    result = run_module(routes.main, {"etcd_endpoints": ["http://127.0.0.1:9"]}, check=True)
    assert result["failed"] and result["msg"].startswith("cannot verify: ")


def test_a_health_port_the_agent_refuses_is_named(run_module: RunModule) -> None:
    args = {"etcd_endpoints": ["http://127.0.0.1:9"], "healthz_port": 70000}
    result = run_module(routes.main, args)
    assert result["failed"]
    assert result["msg"] == "healthz_ip, healthz_port: port 70000 is not in 0-65535"
