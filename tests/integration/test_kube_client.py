"""The agent's own Kubernetes API client: kubeconfig and in-cluster settings, TLS with client
certificates, bearer tokens, basic auth, exec credential plugins (without the `kubernetes`
package), the users client-go refuses, errors."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
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
from pyflannel_runtime.subnet.kube.exec_credential import ExecCredentialError
from tests.fakes.kube_api import FLANNEL_AGENT, FakeKubeApi
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


V1BETA1 = "client.authentication.k8s.io/v1beta1"
V1 = "client.authentication.k8s.io/v1"


def plugin(path: Path, answer: str) -> Path:
    """An exec credential plugin: appends what it was run with (args, the kubeconfig's env and
    KUBERNETES_EXEC_INFO) as one JSON line to `path`.calls, then prints `answer`, a Python
    expression over `calls` (how many runs before this one)."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"log = {str(path) + '.calls'!r}\n"
        "calls = len(open(log).readlines()) if os.path.exists(log) else 0\n"
        "seen = {'args': sys.argv[1:], 'env': os.environ.get('PLUGIN_ENV'),\n"
        "        'info': json.loads(os.environ['KUBERNETES_EXEC_INFO']),\n"
        "        'stdin_tty': os.isatty(0)}\n"
        "open(log, 'a').write(json.dumps(seen) + '\\n')\n"
        f"print(json.dumps({answer}))\n"
    )
    path.chmod(0o755)
    return path


def runs(path: Path) -> list[dict[str, object]]:
    calls = Path(f"{path}.calls")
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines()]


def credential(status: str, api_version: str = V1BETA1) -> str:
    return f"{{'apiVersion': {api_version!r}, 'kind': 'ExecCredential', 'status': {status}}}"


def test_an_exec_plugin_gives_the_token_without_the_kubernetes_package(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    command = plugin(tmp_path / "bin" / "plugin", credential("{'token': f'run-{calls}'}"))
    exec_user = {
        "exec": {
            "apiVersion": V1BETA1,
            "command": "./bin/plugin",  # relative to the kubeconfig, as clientcmd resolves it
            "args": ["--cluster", "lab"],
            "env": [{"name": "PLUGIN_ENV", "value": "from-kubeconfig"}],
        }
    }
    with FakeKubeApi() as api:
        api.add_node("n1")
        path = kubeconfig(tmp_path / "kubeconfig", {"server": api.url}, exec_user)
        client = KubeClient(load_access("", path, {}), timeout=10)
        client.get_json("/api/v1/nodes/n1")
        client.get_json("/api/v1/nodes/n1")  # no expiry: the credential is kept
        client.close()
        assert [r.authorization for r in api.requests("GET")] == ["Bearer run-0", "Bearer run-0"]
    [seen] = runs(command)
    assert seen == {
        "args": ["--cluster", "lab"],
        "env": "from-kubeconfig",
        "info": {"kind": "ExecCredential", "apiVersion": V1BETA1, "spec": {"interactive": False}},
        "stdin_tty": False,
    }
    probe = "import sys; assert 'kubernetes' not in sys.modules and 'yaml' in sys.modules"
    code = (
        "from pyflannel_runtime.subnet.kube.client import KubeClient, load_access\n"
        f"KubeClient(load_access('', {path!r}, {{}}), timeout=10)\n{probe}\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_an_expired_or_refused_credential_runs_the_plugin_again(tmp_path: Path) -> None:
    # The first answer expired long ago; the second is good until 2999, until the server
    # refuses it; the third is the one the server takes then.
    answer = credential(
        "{'token': f'run-{calls}', "
        "'expirationTimestamp': '2000-01-01T00:00:00Z' if calls == 0 else '2999-01-01T00:00:00Z'}"
    )
    command = plugin(tmp_path / "plugin", answer)
    exec_user = {"exec": {"apiVersion": V1, "command": str(command), "interactiveMode": "Never"}}
    answer_v1 = command.read_text().replace(V1BETA1, V1)
    command.write_text(answer_v1)
    tokens = {f"run-{n}": FLANNEL_AGENT for n in (0, 1)}
    with FakeKubeApi(tokens=tokens) as api:
        api.add_node("n1")
        path = kubeconfig(tmp_path / "kubeconfig", {"server": api.url}, exec_user)
        client = KubeClient(load_access("", path, {}), timeout=10)
        client.get_json("/api/v1/nodes/n1")  # run-0, expired: run-1 for the next request
        client.get_json("/api/v1/nodes/n1")
        api.tokens = {"run-2": FLANNEL_AGENT}  # run-1 revoked
        with pytest.raises(KubeApiError) as refused:
            client.get_json("/api/v1/nodes/n1")
        assert refused.value.status == 401
        client.get_json("/api/v1/nodes/n1")
        client.close()
        assert [r.authorization for r in api.requests("GET")] == [
            "Bearer run-0",
            "Bearer run-1",
            "Bearer run-1",
            "Bearer run-2",
        ]
    assert len(runs(command)) == 3


def test_an_exec_plugins_client_certificate_and_the_cluster_it_is_told_of(tls, tmp_path) -> None:
    api, files = tls
    cert, key = (Path(files[name]).read_text() for name in ("cert", "key"))
    answer = credential(f"{{'clientCertificateData': {cert!r}, 'clientKeyData': {key!r}}}", V1)
    command = plugin(tmp_path / "plugin", answer)
    cluster = {
        "server": api.url,
        "certificate-authority": files["ca"],
        "extensions": [
            {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "lab"}}
        ],
    }
    exec_user = {
        "exec": {
            "apiVersion": V1,
            "command": str(command),
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": True,
        }
    }
    path = kubeconfig(tmp_path / "kubeconfig", cluster, exec_user)
    assert read_node(load_access("", path, {}))["kind"] == "Node"
    assert [r.authorization for r in api.requests("GET")] == [""]  # the certificate alone
    [seen] = runs(command)
    assert seen["info"] == {
        "kind": "ExecCredential",
        "apiVersion": V1,
        "spec": {
            "interactive": False,
            "cluster": {
                "server": api.url,
                "certificate-authority-data": b64(files["ca"]),
                "config": {"audience": "lab"},
            },
        },
    }


def test_a_token_of_the_users_own_comes_before_its_plugin(tmp_path: Path) -> None:
    command = plugin(tmp_path / "plugin", credential("{'token': 'from-the-plugin'}"))
    exec_user = {
        "token": "own-token",
        "exec": {"apiVersion": V1BETA1, "command": str(command)},
    }
    with FakeKubeApi() as api:
        api.add_node("n1")
        read_node(load_access("", kubeconfig(tmp_path / "k", {"server": api.url}, exec_user), {}))
        assert [r.authorization for r in api.requests("GET")] == ["Bearer own-token"]
    assert runs(command) == []


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            credential("{'token': 't'}", V1),
            "configured to use API version .*v1beta1, plugin "
            "returned version client.authentication.k8s.io/v1$",
        ),
        (
            "{'apiVersion': 'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential'}",
            "didn't return a status field",
        ),
        (credential("{}"), "didn't return a token or cert/key pair"),
        (credential("{'clientKeyData': 'k'}"), "returned only certificate or key, not both"),
        (credential("{'token': 't', 'expirationTimestamp': 'soon'}"), "expirationTimestamp"),
        ("'not json' + '{'", "decoding stdout"),
        (
            credential("{'clientCertificateData': 'c', 'clientKeyData': 'k'}"),
            "failed parsing client key/certificate",
        ),
    ],
)
def test_a_plugins_bad_answer_is_said_at_the_request(
    tmp_path: Path, answer: str, message: str
) -> None:
    command = plugin(tmp_path / "plugin", answer)
    exec_user = {"exec": {"apiVersion": V1BETA1, "command": str(command)}}
    path = kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"}, exec_user)
    client = KubeClient(load_access("", path, {}), timeout=1)
    with pytest.raises(ExecCredentialError, match=f"^getting credentials: .*{message}"):
        client.get_json("/api/v1/nodes/n1")


def test_a_plugin_that_fails_or_is_missing(tmp_path: Path) -> None:
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o755)
    for command, hint, message in (
        (str(failing), "", f"exec: executable {failing} failed with exit code 3$"),
        (
            "no-such-plugin",
            "apt install the-plugin",
            "exec: executable no-such-plugin not found\n\nIt looks like.*\n\napt install the-plugin$",
        ),
    ):
        exec_user = {"exec": {"apiVersion": V1BETA1, "command": command, "installHint": hint}}
        path = kubeconfig(tmp_path / "k", {"server": "https://127.0.0.1:1"}, exec_user)
        client = KubeClient(load_access("", path, {}), timeout=1)
        with pytest.raises(ExecCredentialError, match=f"(?s)^getting credentials: {message}"):
            client.get_json("/api/v1/nodes/n1")


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"apiVersion": V1, "command": "p"}}, "interactiveMode must be specified"),
        ({"exec": {"apiVersion": "v2", "command": "p"}}, "invalid apiVersion 'v2'"),
        ({"exec": {"command": "p"}}, "apiVersion must be specified"),
        (
            {"exec": {"apiVersion": V1BETA1, "command": "p", "interactiveMode": "Always"}},
            "standard input is not a terminal",
        ),
        (
            {"exec": {"apiVersion": V1BETA1, "command": "p", "env": [{"value": "v"}]}},
            "env variable name must be specified",
        ),
        (
            {"auth-provider": {"name": "oidc", "config": {}}},
            "auth provider 'oidc', which flanneld cannot use either.*exec credential plugin",
        ),
        ({"username": "u", "password": "p", "token": "t"}, "may be set, but not both"),
    ],
)
def test_users_client_go_refuses_are_refused(
    tmp_path: Path, user: dict[str, object], message: str
) -> None:
    path = kubeconfig(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1"}, user)
    with pytest.raises(KubeConfigError, match=f"^kubeconfig {path}: .*{message}"):
        load_access("", path, {})


def test_a_user_name_and_password_are_sent_as_basic_auth(tmp_path: Path) -> None:
    with FakeKubeApi() as api:
        api.add_node("n1")
        user = {"username": "admin", "password": "s3cret"}
        read_node(load_access("", kubeconfig(tmp_path / "k", {"server": api.url}, user), {}))
        expected = "Basic " + base64.b64encode(b"admin:s3cret").decode()
        assert [r.authorization for r in api.requests("GET")] == [expected]


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
