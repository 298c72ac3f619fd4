"""pyflannel.network.network_config: input problems fail before etcd is contacted (the live
read-compare-write is tested against a real etcd in tests/integration/test_publish_etcd.py)."""

from __future__ import annotations

from ansible_collections.pyflannel.network.plugins.modules import network_config

from ..conftest import RunModule

# Nothing listens here: a test that reached etcd would fail with "connection refused".
NOWHERE = {"etcd_endpoints": ["http://127.0.0.1:9"], "agent_env": ""}


def test_an_invalid_config_fails_with_flannels_message(run_module: RunModule) -> None:
    bad = '{"Network": "10.244.0.0/16", "Backend": {"Type": "geneve"}}'
    result = run_module(network_config.main, {**NOWHERE, "config": bad})
    assert result["failed"] and result["msg"].startswith("invalid network config: ")


def test_a_bad_reservation_fails(run_module: RunModule) -> None:
    result = run_module(
        network_config.main, {**NOWHERE, "reservations": [{"subnet": "10.244.1.1/24"}]}
    )
    assert result["failed"] and result["msg"].startswith("reservations: ")


def test_an_unreachable_etcd_is_reported(run_module: RunModule) -> None:
    good = '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'
    result = run_module(network_config.main, {**NOWHERE, "config": good}, check=True)
    assert result["failed"] and "127.0.0.1:9" in result["msg"]
