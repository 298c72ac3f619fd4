"""`pyflannel config publish` reaches etcd the way the agent does: TLS client certificates from
FLANNELD_ETCD_* variables or the agent's environment file, user and password from flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_runtime.cli.main import main
from tests.integration.etcd_tls import make_tls_material

pytestmark = pytest.mark.etcd

CONFIG = '{"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}\n'


@pytest.fixture
def net_conf(tmp_path: Path) -> Path:
    path = tmp_path / "net-conf.json"
    path.write_text(CONFIG)
    return path


def test_tls_settings_come_from_the_environment_or_the_agents_file(
    etcd_factory: Any,
    tmp_path: Path,
    net_conf: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tls = make_tls_material(tmp_path / "pki")
    server: EtcdServer = etcd_factory(tls=tls)
    agent_env = tmp_path / "pyflanneld.env"
    agent_env.write_text(
        f"FLANNELD_ETCD_ENDPOINTS={server.endpoint}\n"
        f"FLANNELD_ETCD_PREFIX=/from-file/network\n"
        f"FLANNELD_ETCD_CAFILE={tls.ca_file}\n"
        f"FLANNELD_ETCD_CERTFILE={tls.client_cert}\n"
        f"FLANNELD_ETCD_KEYFILE={tls.client_key}\n"
    )
    assert main(["config", "publish", str(net_conf), f"--agent-env={agent_env}"]) == 0
    assert capsys.readouterr().out.endswith("/from-file/network/config: published\n")
    assert server.etcdctl("get", "--print-value-only", "/from-file/network/config") == (
        CONFIG + "\n"
    )

    for name, value in (("ENDPOINTS", server.endpoint), ("CAFILE", tls.ca_file),
                        ("CERTFILE", tls.client_cert), ("KEYFILE", tls.client_key)):  # fmt: skip
        monkeypatch.setenv(f"FLANNELD_ETCD_{name}", value)
    assert main(["config", "publish", str(net_conf), "--agent-env=", "--dry-run"]) == 0
    assert capsys.readouterr().out.endswith("/coreos.com/network/config: would publish\n")
    # A flag wins over the variable, as with the agent.
    monkeypatch.setenv("FLANNELD_ETCD_KEYFILE", str(tmp_path / "absent.key"))
    assert main(["config", "publish", str(net_conf), "--agent-env=",
                 f"--etcd-keyfile={tls.client_key}"]) == 0  # fmt: skip
    assert capsys.readouterr().out.endswith("/coreos.com/network/config: published\n")


def test_username_and_password_are_the_agents_flags(
    etcd_factory: Any, net_conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server: EtcdServer = etcd_factory()
    server.etcdctl("user", "add", "root:rootpw")
    server.etcdctl("user", "grant-role", "root", "root")
    server.etcdctl("auth", "enable")
    flags = [f"--etcd-endpoints={server.endpoint}", "--etcd-username=root", "--agent-env="]
    assert main(["config", "publish", str(net_conf), *flags, "--etcd-password=nope"]) == 1
    assert capsys.readouterr() == (
        "",
        f"cannot publish to etcd {server.endpoint} (prefix /coreos.com/network): "
        "etcdserver: authentication failed, invalid user ID or password\n",
    )
    assert main(["config", "publish", str(net_conf), *flags, "--etcd-password=rootpw"]) == 0
    assert capsys.readouterr().out.endswith("/coreos.com/network/config: published\n")
    value = server.etcdctl("get", "--print-value-only", "/coreos.com/network/config",
                           user="root:rootpw")  # fmt: skip
    assert value == CONFIG + "\n"
