"""pyflannel.network.node_reset: its input checks and where a lease release takes its settings
from, before anything on the host is touched (what it removes is tested in network namespaces
in tests/integration/test_firewall_netns.py, and on lab hosts by reset.yml in test_site.py)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.pyflannel.network.plugins.modules import node_reset

from ..conftest import RunModule


def test_a_network_that_does_not_parse_fails(run_module: RunModule) -> None:
    result = run_module(node_reset.main, {"networks": ["10.244.0.0/33"]}, check=True)
    assert result["failed"] and result["msg"].startswith("networks: ")


def test_a_lease_release_takes_the_settings_not_given_from_the_agents_environment_file(
    run_module: RunModule, tmp_path: Path
) -> None:
    subnet_env = tmp_path / "subnet.env"
    subnet_env.write_text("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\n")
    env = tmp_path / "pyflanneld.env"
    # Nothing listens on port 9: the release fails there, before anything else is removed.
    env.write_text(
        f"FLANNELD_ETCD_ENDPOINTS=http://127.0.0.1:9\nFLANNELD_SUBNET_FILE={subnet_env}\n"
    )
    args = {"release_lease": True, "agent_env": str(env), "networks": ["10.244.0.0/16"]}
    result = run_module(node_reset.main, args, check=True)
    assert result["failed"], result
    assert result["msg"].startswith("cannot release the lease of 10.244.7.0/24: "), result["msg"]
    assert "127.0.0.1:9" in result["msg"]
    given = run_module(
        node_reset.main, {**args, "etcd_endpoints": ["http://127.0.0.1:10"]}, check=True
    )
    assert given["failed"] and "127.0.0.1:10" in given["msg"], given["msg"]
