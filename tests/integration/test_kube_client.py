"""The agent's own Kubernetes API client: kubeconfig and in-cluster settings, TLS with client
certificates, bearer tokens, the `kubernetes` package's loader for exec plugins, errors."""

from __future__ import annotations

import base64
import json
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from pyflannel_lab.etcd_server import EtcdTLS
from pyflannel_runtime.subnet.kube import client as kube_client
from pyflannel_runtime.subnet.kube.client import (
    KubeApiError,
    KubeClient,
    KubeConfigError,
    in_cluster_access,
    lines,
    load_access,
)
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.etcd_tls import make_tls_material


def tls_server(material: EtcdTLS, host: str = "127.0.0.1") -> FakeKubeApi:
    """The test double over HTTPS on `host`, asking for a client certificate of the CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=material.ca_file)
    context.load_cert_chain(material.server_cert, material.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    api = FakeKubeApi(tls=context, host=host)
    api.add_node("n1", pod_cidr="10.244.1.0/24")
    return api


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[FakeKubeApi, dict[str, str]]]:
    material = make_tls_material(tmp_path / "pki")
    with tls_server(material) as api:
        yield api, pem_files(material)


def pem_files(material: EtcdTLS) -> dict[str, str]:
    return {"ca": material.ca_file, "cert": material.client_cert, "key": material.client_key}


def kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "users": [{"name": "flannel", "user": user}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "flannel"}}],
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return str(path)


def b64(path: str) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def read_node(access: kube_client.Access) -> dict[str, object]:
    client = KubeClient(access, timeout=10)
    try:
        node: dict[str, object] = client.get_json("/api/v1/nodes/n1")
        return node
    finally:
        client.close()


def test_certificates_and_token_inline(tls, tmp_path: Path) -> None:
    api, files = tls
    path = kubeconfig(
        tmp_path / "kubeconfig",
        {"server": api.url, "certificate-authority-data": b64(files["ca"])},
        {
            "client-certificate-data": b64(files["cert"]),
            "client-key-data": b64(files["key"]),
            "token": "secret-token",
        },
    )
    assert read_node(load_access("", path, {}))["metadata"]["name"] == "n1"  # type: ignore[index]
    assert [r.authorization for r in api.requests("GET")] == ["Bearer secret-token"]


def test_certificate_files_relative_to_the_kubeconfig_and_a_tls_server_name(
    tmp_path: Path,
) -> None:
    # The server certificate names 127.0.0.1 and localhost; the server listens on 127.0.0.2,
    # so only the name given apart (tls-server-name) matches.
    material = make_tls_material(tmp_path / "pki")
    files = pem_files(material)
    for name in ("ca", "cert", "key"):
        (tmp_path / f"{name}.pem").write_bytes(Path(files[name]).read_bytes())
    user = {"client-certificate": "cert.pem", "client-key": "key.pem"}
    with tls_server(material, host="127.0.0.2") as api:
        named = {
            "server": api.url,
            "certificate-authority": "ca.pem",
            "tls-server-name": "localhost",
        }
        assert (
            read_node(load_access("", kubeconfig(tmp_path / "a", named, user), {}))["kind"]
            == "Node"
        )
        unnamed = {"server": api.url, "certificate-authority": "ca.pem"}
        with pytest.raises(urllib3.exceptions.HTTPError):
            read_node(load_access("", kubeconfig(tmp_path / "b", unnamed, user), {}))


def test_the_server_is_checked_against_the_ca(tls, tmp_path: Path) -> None:
    api, files = tls
    other = make_tls_material(tmp_path / "other")
    user = {"client-certificate": files["cert"], "client-key": files["key"]}
    wrong_ca = kubeconfig(
        tmp_path / "wrong", {"server": api.url, "certificate-authority": other.ca_file}, user
    )
    with pytest.raises(urllib3.exceptions.HTTPError):
        read_node(load_access("", wrong_ca, {}))
    insecure = kubeconfig(
        tmp_path / "insecure", {"server": api.url, "insecure-skip-tls-verify": True}, user
    )
    assert read_node(load_access("", insecure, {}))["kind"] == "Node"


def test_a_token_file_is_read_again_as_it_rotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    with FakeKubeApi() as api:
        api.add_node("n1")
        path = kubeconfig(tmp_path / "kubeconfig", {"server": api.url}, {"tokenFile": "token"})
        client = KubeClient(load_access("", path, {}), timeout=10)
        client.get_json("/api/v1/nodes/n1")
        token.write_text("second\n")
        client.get_json("/api/v1/nodes/n1")  # within TOKEN_RELOAD: the token read before
        monkeypatch.setattr(kube_client, "TOKEN_RELOAD", 0.0)
        client.get_json("/api/v1/nodes/n1")
        client.close()
        assert [r.authorization for r in api.requests("GET")] == [
            "Bearer first",
            "Bearer first",
            "Bearer second",
        ]


def test_an_exec_plugin_is_left_to_the_kubernetes_packages_loader(tmp_path: Path) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-a-plugin"},
    }
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(credential))})\n")
    plugin.chmod(0o755)
    with FakeKubeApi() as api:
        api.add_node("n1")
        exec_user = {"exec": {"apiVersion": credential["apiVersion"], "command": str(plugin)}}
        path = kubeconfig(tmp_path / "kubeconfig", {"server": api.url}, exec_user)
        read_node(load_access("", path, {}))
        assert [r.authorization for r in api.requests("GET")] == ["Bearer from-a-plugin"]


def test_kubeconfig_errors_name_the_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(KubeConfigError, match=f"cannot read kubeconfig {missing}"):
        load_access("", missing, {})
    no_context = tmp_path / "no-context"
    no_context.write_text("apiVersion: v1\nkind: Config\ncurrent-context: lab\n")
    with pytest.raises(KubeConfigError, match="no context named 'lab'"):
        load_access("", str(no_context), {})
    bad_data = kubeconfig(
        tmp_path / "bad", {"server": "https://x", "certificate-authority-data": "%%"}, {}
    )
    with pytest.raises(KubeConfigError, match="certificate-authority-data is not base64"):
        load_access("", bad_data, {})
    no_server = kubeconfig(tmp_path / "no-server", {}, {})
    with pytest.raises(KubeConfigError, match="no API server"):
        KubeClient(load_access("", no_server, {}), timeout=1)


def test_in_cluster_settings(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"^Service host/port is not set\.$"):
        in_cluster_access({}, str(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeConfigError, match="token file does not exist"):
        in_cluster_access(env, str(tmp_path))
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("c")
    access = in_cluster_access(env, str(tmp_path))
    assert access.server == "https://[fd00::1]:443"
    assert access.token_file == str(tmp_path / "token")
    assert access.ca_file == str(tmp_path / "ca.crt")


def test_error_answers_carry_the_servers_status() -> None:
    with FakeKubeApi() as api:
        client = KubeClient(load_access(api.url, "", {}), timeout=10)
        with pytest.raises(KubeApiError) as err:
            client.get_json("/api/v1/nodes/nope")
        client.close()
    assert err.value.status == 404
    assert err.value.message() == 'nodes "nope" not found'
    assert KubeApiError(502, "Bad Gateway", b"<html>").message() == "502 Bad Gateway"


class Chunks:
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks


def test_lines_come_whole_in_the_batches_they_arrived_in() -> None:
    response = Chunks(b'{"a":1}\n{"b"', b':2}\n{"c":3}\n', b"\n", b'{"d":4}')
    assert list(lines(response)) == [  # type: ignore[arg-type]
        [b'{"a":1}'],
        [b'{"b":2}', b'{"c":3}'],
        [b'{"d":4}'],
    ]
