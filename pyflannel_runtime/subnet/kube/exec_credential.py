"""Exec credential plugins for the agent's Kubernetes client, as client-go runs them.

A kubeconfig user with `exec` names a command that prints an ExecCredential
(client.authentication.k8s.io v1 or v1beta1) holding a bearer token, or a client certificate
and key, and maybe when they expire. The command runs with the kubeconfig's `args` and `env`
added to the agent's environment, and KUBERNETES_EXEC_INFO describing the request (with the
cluster, when `provideClusterInfo` asks for it). The credential is kept until it expires or
the API server answers 401 to it; then the command runs again. This is client-go's protocol
(k8s.io/client-go plugin/pkg/client/auth/exec/exec.go: Authenticator.refreshCredsLocked,
maybeRefreshCreds; rest/exec.go: ConfigToExecCluster), and its error messages.

The agent is a daemon: a plugin never gets its standard input (client-go's `interactiveMode`
IfAvailable with no terminal; `Always` is refused, as client-go refuses it without one). Unlike
client-go, a plugin that has not answered within PLUGIN_TIMEOUT is killed and counts as failed,
so that a hung plugin cannot stop the agent's API calls for good.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyflannel_runtime import PyflannelError

API_VERSIONS = ("client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1")
EXEC_INFO_ENV = "KUBERNETES_EXEC_INFO"
# The cluster extension a plugin gets as spec.cluster.config (clientcmd's clusterExtensionKey).
CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
PLUGIN_TIMEOUT = 60.0  # seconds
_INSTALL_HELP = (
    "\n\nIt looks like you are trying to use a client-go credential plugin that is not"
    " installed.\n\nTo learn more about this feature, consult the documentation available at:"
    "\n      https://kubernetes.io/docs/reference/access-authn-authz/authentication/"
    "#client-go-credential-plugins"
)


class ExecConfigError(PyflannelError, ValueError):
    """A kubeconfig's `exec` section that client-go would refuse."""


class ExecCredentialError(PyflannelError):
    """The plugin did not give a usable credential; ``str()`` is client-go's message."""


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig user's `exec` section, checked as clientcmd checks it."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = API_VERSIONS[1]
    install_hint: str = ""
    provide_cluster_info: bool = False
    # The cluster's extension of CLUSTER_EXTENSION, handed to the plugin as it is.
    cluster_config: Any = None

    @classmethod
    def parse(cls, section: Any, base_dir: str, cluster_config: Any = None) -> ExecConfig:
        """From the kubeconfig's mapping; a command with a slash is relative to the
        kubeconfig's directory (clientcmd's ResolveLocalPaths), a bare name is looked up on
        PATH."""
        if not isinstance(section, dict):
            raise ExecConfigError("exec: not a mapping")
        command = section.get("command")
        if not isinstance(command, str) or not command:
            raise ExecConfigError("command must be specified to use exec authentication plugin")
        api_version = section.get("apiVersion")
        if not api_version:
            raise ExecConfigError("apiVersion must be specified to use exec authentication plugin")
        if api_version not in API_VERSIONS:
            raise ExecConfigError(f"exec plugin: invalid apiVersion {api_version!r}")
        # v1 makes the mode explicit; v1beta1 defaults to IfAvailable (clientcmd's defaults).
        mode = section.get("interactiveMode") or (
            "IfAvailable" if api_version != API_VERSIONS[1] else ""
        )
        if not mode:
            raise ExecConfigError(
                "interactiveMode must be specified to use exec authentication plugin"
            )
        if mode not in INTERACTIVE_MODES:
            raise ExecConfigError(f"invalid interactiveMode: {mode!r}")
        if mode == "Always":
            raise ExecConfigError(
                "exec plugin cannot support interactive mode: standard input is not a terminal"
            )
        args = section.get("args") or []
        env = section.get("env") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ExecConfigError("exec: args must be a list of strings")
        if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
            raise ExecConfigError("exec: env must be a list of name/value pairs")
        pairs = []
        for entry in env:
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                raise ExecConfigError(
                    "env variable name must be specified to use exec authentication plugin"
                )
            pairs.append((name, str(entry.get("value") or "")))
        if os.sep in command:
            command = os.path.normpath(os.path.join(base_dir, command))
        return cls(
            command=command,
            args=tuple(args),
            env=tuple(pairs),
            api_version=api_version,
            install_hint=str(section.get("installHint") or ""),
            provide_cluster_info=bool(section.get("provideClusterInfo")),
            cluster_config=cluster_config,
        )


@dataclass(frozen=True)
class ExecCluster:
    """What the plugin is told of the cluster (client-go's clientauthentication Cluster)."""

    server: str
    tls_server_name: str | None = None
    insecure: bool = False
    ca_data: bytes | None = None
    proxy_url: str | None = None

    def to_json(self, config: Any) -> dict[str, Any]:
        cluster: dict[str, Any] = {"server": self.server}
        if self.tls_server_name:
            cluster["tls-server-name"] = self.tls_server_name
        if self.insecure:
            cluster["insecure-skip-tls-verify"] = True
        if self.ca_data:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_data).decode()
        if self.proxy_url:
            cluster["proxy-url"] = self.proxy_url
        cluster["config"] = config
        return cluster


@dataclass(frozen=True, eq=False)
class Credential:
    """One answer of the plugin: a token, or a PEM certificate and key, or both."""

    token: str | None
    cert: bytes | None
    key: bytes | None
    expires: float | None  # seconds since the epoch

    @property
    def client_pair(self) -> tuple[bytes, bytes] | None:
        return (self.cert, self.key) if self.cert and self.key else None


def parse_credential(output: bytes, api_version: str) -> Credential:
    """An ExecCredential as the plugin printed it."""
    try:
        answer = json.loads(output)
    except ValueError as err:
        raise ExecCredentialError(f"decoding stdout: {err}") from None
    if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
        raise ExecCredentialError("decoding stdout: not an ExecCredential")
    if answer.get("apiVersion") != api_version:
        raise ExecCredentialError(
            f"exec plugin is configured to use API version {api_version}, plugin returned "
            f"version {answer.get('apiVersion')}"
        )
    status = answer.get("status")
    if not isinstance(status, dict):
        raise ExecCredentialError("exec plugin didn't return a status field")
    token, cert, key = (
        str(status.get(name) or "") for name in ("token", "clientCertificateData", "clientKeyData")
    )
    if not (token or cert or key):
        raise ExecCredentialError("exec plugin didn't return a token or cert/key pair")
    if bool(cert) != bool(key):
        raise ExecCredentialError("exec plugin returned only certificate or key, not both")
    expires = None
    if status.get("expirationTimestamp"):
        try:
            expires = datetime.fromisoformat(str(status["expirationTimestamp"])).timestamp()
        except ValueError as err:
            raise ExecCredentialError(f"decoding stdout: expirationTimestamp: {err}") from None
    return Credential(
        token or None, cert.encode() if cert else None, key.encode() if key else None, expires
    )


class ExecPlugin:
    """The credential of the moment; thread-safe, the plugin runs once at a time."""

    def __init__(
        self,
        config: ExecConfig,
        cluster: ExecCluster,
        environ: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self._environ = os.environ if environ is None else environ
        self._now = now
        self._lock = threading.Lock()
        self._credential: Credential | None = None

    def credential(self) -> Credential:
        with self._lock:
            current = self._credential
            if current is None or (current.expires is not None and self._now() > current.expires):
                current = self._credential = self._run()
            return current

    def rejected(self, used: Credential) -> None:
        """The API server answered 401 to `used`: the next request runs the plugin again,
        unless another one did already."""
        with self._lock:
            if self._credential is used:
                self._credential = None

    def _request(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.config.provide_cluster_info:
            spec["cluster"] = self.cluster.to_json(self.config.cluster_config)
        request = {"kind": "ExecCredential", "apiVersion": self.config.api_version, "spec": spec}
        return json.dumps(request, separators=(",", ":"))

    def _run(self) -> Credential:
        command = self.config.command
        env = {**self._environ, **dict(self.config.env), EXEC_INFO_ENV: self._request()}
        try:
            done = subprocess.run(
                [command, *self.config.args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                timeout=PLUGIN_TIMEOUT,
                check=False,
            )
        except FileNotFoundError:
            hint = f"\n\n{self.config.install_hint}" if self.config.install_hint else ""
            raise ExecCredentialError(
                f"exec: executable {command} not found{_INSTALL_HELP}{hint}"
            ) from None
        except subprocess.TimeoutExpired:
            raise ExecCredentialError(
                f"exec: executable {command} did not answer within {PLUGIN_TIMEOUT:.0f} s"
            ) from None
        except OSError as err:
            raise ExecCredentialError(f"exec: {err}") from None
        if done.returncode != 0:
            raise ExecCredentialError(
                f"exec: executable {command} failed with exit code {done.returncode}"
            )
        return parse_credential(done.stdout, self.config.api_version)
