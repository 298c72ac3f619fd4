"""etcd endpoints and TLS files: a bad one is named at start, not retried (issue 9 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflannel_runtime.subnet.etcd.client import Endpoint
from pyflannel_runtime.subnet.etcd.etcd import EtcdError, EtcdSettings, client_tls, parse_endpoint


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("http://192.0.2.1:2379", Endpoint("192.0.2.1", 2379)),
        ("https://etcd-0.example", Endpoint("etcd-0.example", 2379)),
        ("http://[2001:db8::1]:4001/", Endpoint("2001:db8::1", 4001)),
    ],
)
def test_endpoint_urls(text: str, endpoint: Endpoint) -> None:
    assert parse_endpoint(text, None) == endpoint


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("garbage", "'garbage' is not an http:// or https:// URL"),
        ("192.0.2.1:2379", "'192.0.2.1:2379' is not an http:// or https:// URL"),
        ("unix:///run/etcd.sock", "'unix:///run/etcd.sock' is not an http:// or https:// URL"),
        ("http://", "'http://' is not an http:// or https:// URL"),
        ("http://:2379", "'http://:2379' names no host"),
        ("http://192.0.2.1:0", "'http://192.0.2.1:0' has an invalid port (1 to 65535)"),
        ("http://192.0.2.1:65536", "'http://192.0.2.1:65536' has an invalid port (1 to 65535)"),
        ("http://192.0.2.1:x", "'http://192.0.2.1:x' has an invalid port (1 to 65535)"),
    ],
)
def test_bad_endpoints(text: str, reason: str) -> None:
    with pytest.raises(EtcdError) as err:
        parse_endpoint(text, None)
    assert str(err.value) == f"invalid etcd endpoint: {reason}"


def test_an_unreadable_tls_file_is_named(tmp_path: Path) -> None:
    cert = tmp_path / "client.pem"
    cert.write_text("not a certificate")
    missing = tmp_path / "client-key.pem"
    settings = EtcdSettings(certfile=str(cert), keyfile=str(missing))
    with pytest.raises(EtcdError) as err:
        client_tls(settings)
    assert str(err.value) == (
        f"failed to read etcd TLS files: open {missing}: no such file or directory"
    )
