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


def test_peers_a_backend_does_not_check_are_not_counted_as_programmed() -> None:
    counts = {"total": 3, "programmed": 0, "unchecked": 2}
    assert routes.summarize(counts, 0, 0) == (
        "3 leases, 0 peers programmed, 2 not checked, 0 missing, 0 stale"
    )
    counts = {"total": 3, "programmed": 2, "unchecked": 0}
    assert routes.summarize(counts, 1, 0) == "3 leases, 2 peers programmed, 1 missing, 0 stale"
