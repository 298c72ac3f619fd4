"""A node module's settings (pyflannel_runtime.ops.agent_settings): its options, else FLANNELD_*
in its environment, else the agent's environment file, else pyflanneld's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflannel_runtime.agent.cli_flags import AgentFlagsError
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.ops.agent_settings import agent_settings, lease_store, module_flags
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from pyflannel_runtime.subnet.kube.kube import KubeSettings


def test_module_options_become_the_agents_flags() -> None:
    flags = module_flags(
        {
            "etcd_endpoints": ["https://a:2379", "https://b:2379"],
            "kube_subnet_mgr": False,
            "healthz_port": 8081,
            "etcd_prefix": "/x",
            "etcd_cafile": None,
        }
    )
    assert flags == {
        "etcd-endpoints": "https://a:2379,https://b:2379",
        "kube-subnet-mgr": "false",
        "healthz-port": "8081",
        "etcd-prefix": "/x",
    }


def test_options_then_environment_then_the_agents_file_then_defaults(tmp_path: Path) -> None:
    env_file = tmp_path / "pyflanneld.env"
    env_file.write_text(
        "FLANNELD_ETCD_ENDPOINTS=https://file:2379\n"
        "FLANNELD_ETCD_PREFIX=/file\n"
        'FLANNELD_ETCD_USERNAME="flannel user"\n'
        "FLANNELD_HEALTHZ_PORT=8081\n"
    )
    environ = {"FLANNELD_ETCD_PREFIX": "/environment", "FLANNELD_HEALTHZ_PORT": "9"}
    opts = agent_settings({"healthz_port": 7}, str(env_file), environ)
    assert opts.healthz_port == 7
    assert opts.etcd_prefix == "/environment"
    assert (opts.etcd_endpoints, opts.etcd_username) == ("https://file:2379", "flannel user")
    assert opts.subnet_file == Options().subnet_file


def test_no_file_leaves_pyflanneld_s_defaults() -> None:
    assert agent_settings({}, "", {}) == Options()


def test_a_value_the_agent_refuses_is_an_error(tmp_path: Path) -> None:
    env_file = tmp_path / "pyflanneld.env"
    env_file.write_text("FLANNELD_HEALTHZ_IP=not-an-ip\n")
    with pytest.raises(AgentFlagsError, match="healthz-ip"):
        agent_settings({}, str(env_file), {})
    with pytest.raises(AgentFlagsError, match="cannot read the agent's environment file"):
        agent_settings({}, str(tmp_path / "missing.env"), {})


def test_the_settings_name_the_lease_store() -> None:
    etcd = lease_store(agent_settings({"etcd_endpoints": ["http://e:2379"]}, "", {}), 3.0)
    assert isinstance(etcd, EtcdSettings)
    assert (etcd.endpoints, etcd.request_timeout) == (("http://e:2379",), 3.0)
    kube = lease_store(agent_settings({"kube_subnet_mgr": True}, "", {}), 3.0)
    assert isinstance(kube, KubeSettings) and kube.request_timeout == 3.0


def test_without_a_timeout_the_store_keeps_its_own() -> None:
    opts = agent_settings({"etcd_endpoints": ["http://e:2379"]}, "", {})
    assert lease_store(opts).request_timeout == EtcdSettings(endpoints=("x",)).request_timeout
    kube = lease_store(agent_settings({"kube_subnet_mgr": True}, "", {}))
    assert kube.request_timeout == KubeSettings().request_timeout
