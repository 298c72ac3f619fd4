"""pyflannel.network.routes: its settings and input checks before anything is read (the live
verify and repair run against real hosts in tests/integration/test_site.py)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.pyflannel.network.plugins.modules import routes

from ..conftest import RunModule

# Nothing listens on these ports: a check that got there fails with "connection refused".
NOWHERE = {"etcd_endpoints": ["http://127.0.0.1:9"], "agent_env": ""}


def test_without_options_the_agents_environment_file_names_the_lease_store(
    run_module: RunModule, tmp_path: Path
) -> None:
    env = tmp_path / "pyflanneld.env"
    env.write_text("FLANNELD_ETCD_ENDPOINTS=http://127.0.0.1:9\nFLANNELD_ETCD_PREFIX=/agents\n")
    result = run_module(routes.main, {"agent_env": str(env)}, check=True)
    assert result["failed"]
    assert result["msg"].startswith(
        "cannot verify: cannot read leases from etcd http://127.0.0.1:9"
    )
    assert "(prefix /agents)" in result["msg"]


def test_options_given_override_the_agents_settings(run_module: RunModule, tmp_path: Path) -> None:
    env = tmp_path / "pyflanneld.env"
    env.write_text("FLANNELD_ETCD_ENDPOINTS=http://127.0.0.1:9\nFLANNELD_ETCD_PREFIX=/agents\n")
    args = {"agent_env": str(env), "etcd_endpoints": ["http://127.0.0.1:10"]}
    result = run_module(routes.main, args, check=True)
    assert result["failed"]
    assert "etcd http://127.0.0.1:10 (prefix /agents)" in result["msg"], result["msg"]


def test_an_unreadable_agent_environment_file_is_named(
    run_module: RunModule, tmp_path: Path
) -> None:
    result = run_module(routes.main, {"agent_env": str(tmp_path / "none.env")}, check=True)
    assert result["failed"]
    assert result["msg"].startswith("the agent's settings: cannot read the agent's environment")
    assert "none.env" in result["msg"]


def test_a_bad_public_ip_is_named(run_module: RunModule) -> None:
    result = run_module(routes.main, {**NOWHERE, "public_ip": "10.0.0.300"})
    assert result["failed"]
    assert result["msg"] == (
        'the agent\'s settings: invalid value "10.0.0.300" for flag -public-ip: not an IPv4 address'
    )


def test_an_unreachable_lease_store_fails_the_check(run_module: RunModule) -> None:
    result = run_module(routes.main, NOWHERE, check=True)
    assert result["failed"] and result["msg"].startswith("cannot verify: ")


def test_a_health_port_the_agent_refuses_is_named(run_module: RunModule) -> None:
    result = run_module(routes.main, {**NOWHERE, "healthz_port": 70000})
    assert result["failed"]
    assert result["msg"] == (
        'the agent\'s settings: invalid value "70000" for flag -healthz-port: '
        "out of range (0 to 65535)"
    )
