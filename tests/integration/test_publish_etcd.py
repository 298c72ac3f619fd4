"""ops/publish.py against a real etcd: the config and reservations, read-compare-write."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import EtcdServer
from pyflannel_runtime.ops.publish import PublishError, Reservation, publish
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from tests.integration.etcd_tls import make_tls_material

pytestmark = pytest.mark.etcd

CONFIG = '{\n  "Network": "10.244.0.0/16",\n  "Backend": {\n    "Type": "vxlan"\n  }\n}\n'


def settings(server: EtcdServer, prefix: str, **tls: str) -> EtcdSettings:
    return EtcdSettings(endpoints=(server.endpoint,), prefix=prefix, **tls)


def test_config_is_written_once_then_reported_unchanged(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    store = settings(etcd_server, etcd_prefix)
    (dry,) = publish(store, CONFIG, check=True)
    assert dry.changed and dry.before is None
    assert etcd_server.etcdctl("get", f"{etcd_prefix}/config") == ""

    (first,) = publish(store, CONFIG, check=False)
    assert first.changed and first.key == f"{etcd_prefix}/config"
    assert (
        etcd_server.etcdctl("get", "--print-value-only", f"{etcd_prefix}/config") == CONFIG + "\n"
    )

    (again,) = publish(store, CONFIG, check=False)
    assert not again.changed and again.before == CONFIG

    changed = CONFIG.replace("vxlan", "host-gw")
    (update,) = publish(store, changed, check=False)
    assert update.changed and (update.before, update.after) == (CONFIG, changed)


def test_an_invalid_config_is_refused_before_etcd_is_touched(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    bad = '{"Network": "10.244.0.0/16", "SubnetLen": 8, "Backend": {"Type": "vxlan"}}'
    with pytest.raises(PublishError, match="four subnets"):
        publish(settings(etcd_server, etcd_prefix), bad, check=False)
    assert etcd_server.etcdctl("get", "--prefix", etcd_prefix) == ""


def test_a_leased_subnet_becomes_a_reservation_keeping_the_agents_value(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    key = f"{etcd_prefix}/subnets/10.244.7.0-24"
    value = (
        '{"PublicIP":"192.0.2.7","PublicIPv6":null,"BackendType":"vxlan",'
        '"BackendData":{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}}'
    )
    lease = etcd_server.etcdctl("lease", "grant", "600").split()[1]
    etcd_server.etcdctl("put", "--lease", lease, key, value)
    pin = Reservation(IPv4Network("10.244.7.0/24"), None, IPv4Address("192.0.2.7"))

    (dry,) = publish(settings(etcd_server, etcd_prefix), None, [pin], check=True)
    assert dry.changed and dry.after == value
    (first,) = publish(settings(etcd_server, etcd_prefix), None, [pin], check=False)
    assert first.changed
    listed = etcd_server.etcdctl("get", key, "-w", "fields")
    assert '"Lease" : 0' in listed and value.replace('"', '\\"') in listed
    (again,) = publish(settings(etcd_server, etcd_prefix), None, [pin], check=False)
    assert not again.changed


def test_a_subnet_leased_by_another_node_is_not_taken(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    key = f"{etcd_prefix}/subnets/10.244.8.0-24"
    lease = etcd_server.etcdctl("lease", "grant", "600").split()[1]
    etcd_server.etcdctl("put", "--lease", lease, key, '{"PublicIP":"192.0.2.9","PublicIPv6":null}')
    pin = Reservation(IPv4Network("10.244.8.0/24"), None, IPv4Address("192.0.2.8"))
    with pytest.raises(PublishError, match=r"192\.0\.2\.9"):
        publish(settings(etcd_server, etcd_prefix), None, [pin], check=False)


def test_a_new_reservation_over_tls_with_client_certificates(
    etcd_factory: Any, tmp_path: Path, etcd_prefix: str
) -> None:
    tls = make_tls_material(tmp_path / "pki")
    server: EtcdServer = etcd_factory(tls=tls)
    store = settings(
        server, etcd_prefix, certfile=tls.client_cert, keyfile=tls.client_key, cafile=tls.ca_file
    )
    pin = Reservation(IPv4Network("10.244.9.0/24"), None, IPv4Address("192.0.2.10"))
    config, reservation = publish(store, CONFIG, [pin], check=False)
    assert config.changed and reservation.changed
    assert reservation.after == '{"PublicIP":"192.0.2.10","PublicIPv6":null}'
    assert not any(change.changed for change in publish(store, CONFIG, [pin], check=False))


def test_pyflannel_config_publish_dry_run_then_publish(
    etcd_server: EtcdServer, etcd_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyflannel_runtime.cli.main import main

    net_conf = tmp_path / "net-conf.json"
    net_conf.write_text(CONFIG)
    flags = ["--etcd-endpoints", etcd_server.endpoint, "--etcd-prefix", etcd_prefix]
    assert main(["config", "publish", str(net_conf), *flags, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '+  "Network": "10.244.0.0/16",' in out
    assert out.endswith(f"{etcd_prefix}/config: would publish\n")
    assert etcd_server.etcdctl("get", f"{etcd_prefix}/config") == ""

    assert main(["config", "publish", str(net_conf), *flags]) == 0
    assert capsys.readouterr().out.endswith(f"{etcd_prefix}/config: published\n")
    assert main(["config", "publish", str(net_conf), *flags]) == 0
    assert capsys.readouterr().out == f"{etcd_prefix}/config: unchanged\n"

    net_conf.write_text('{"Network": "10.244.0.0/16", "Backend": {"Type": "geneve"}}')
    assert main(["config", "publish", str(net_conf), *flags]) == 1
    assert "geneve" in capsys.readouterr().err
