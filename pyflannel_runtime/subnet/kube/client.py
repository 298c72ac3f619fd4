"""A small client for the Kubernetes API calls flannel makes: JSON over urllib3, no models.

The `kubernetes` package builds hundreds of model classes (and pulls in pydantic, requests and
oauthlib) when imported: about 30 MB that an agent would carry for its four node calls. This
speaks the same HTTP to the same settings. They come from a kubeconfig's current context
(server, CA, client certificate, bearer token or token file, user name and password, an exec
credential plugin (`exec_credential`), proxy; `--kube-api-url` overrides the server), else from the
pod's service account (clientcmd's in-cluster config). A user with an auth provider (gcp,
azure, oidc) is refused, as flanneld refuses it: flanneld registers none of client-go's
provider plugins, so client-go's GetAuthProvider (rest/plugin.go) finds none.

urllib3 and PyYAML come with the runtime's `kube` extra, which nodes of the Kubernetes
datastore install.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import os
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.subnet.kube.exec_credential import (
    CLUSTER_EXTENSION,
    Credential,
    ExecCluster,
    ExecConfig,
    ExecConfigError,
    ExecCredentialError,
    ExecPlugin,
)

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# Answers are read up to a size before anything decodes them (documents from outside). One
# object: the API server refuses to store a request body over 3 MiB (its
# --max-request-bytes), so a Node, a Pod or a watch event of one is at most about that; the
# margin covers JSON's escapes. A list page's own limit is its caller's (kube.py).
MAX_OBJECT_BYTES = 8 << 20
# An error answer's Status is a few hundred bytes: what is past this is left unread.
MAX_STATUS_BYTES = 64 << 10
TOKEN_RELOAD = 60.0  # seconds: a service account's token is rotated well before it expires


class KubeConfigError(PyflannelError, ValueError):
    """Connection settings that cannot be used."""


class ResponseTooLarge(PyflannelError):
    """An answer larger than the limit it was read with."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the API server's answer is larger than {limit} bytes")
        self.limit = limit


class KubeApiError(PyflannelError):
    """An HTTP error answer of the API server; `body` is its Status object, as sent."""

    def __init__(self, status: int, reason: str, body: bytes = b"") -> None:
        super().__init__(f"({status}) {reason}")
        self.status = status
        self.reason = reason
        self.body = body

    def message(self) -> str:
        """What client-go prints: the Status message, else the status line."""
        try:
            status = json.loads(self.body or b"null")
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
        return f"{self.status} {self.reason}"


@dataclass(frozen=True)
class Access:
    """Where the API is and how to authenticate to it."""

    server: str
    verify: bool = True
    ca_file: str | None = None
    ca_data: bytes | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    tls_server_name: str | None = None
    proxy: str | None = None
    exec_plugin: ExecConfig | None = None

    def with_server(self, server: str) -> Access:
        return dataclasses.replace(self, server=server)

    def basic_auth(self) -> str | None:
        """The Authorization header of a user name and password (client-go's basic auth)."""
        if not self.username and not self.password:
            return None
        pair = f"{self.username or ''}:{self.password or ''}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"

    def runs_plugin(self) -> bool:
        """client-go uses an exec plugin only when the user gives no token, user name and
        password, or client certificate of its own (exec.go: UpdateTransportConfig)."""
        own_cert = bool(self.cert_data or self.cert_file) and bool(self.key_data or self.key_file)
        own = self.token or self.token_file or self.basic_auth() or own_cert
        return self.exec_plugin is not None and not own

    def exec_cluster(self) -> ExecCluster:
        """What an exec plugin is told of the cluster (client-go's ConfigToExecCluster)."""
        ca_data = self.ca_data
        if ca_data is None and self.ca_file:
            try:
                with open(self.ca_file, "rb") as handle:
                    ca_data = handle.read()
            except OSError as err:
                raise KubeConfigError(f"failed to load CA bundle for execProvider: {err}") from None
        return ExecCluster(
            server=self.server,
            tls_server_name=self.tls_server_name,
            insecure=not self.verify,
            ca_data=ca_data,
            proxy_url=self.proxy,
        )


# --- where the settings come from -------------------------------------------------------------


def load_access(api_url: str, kubeconfig_file: str, environ: Mapping[str, str]) -> Access:
    """clientcmd.BuildConfigFromFlags: a kubeconfig (its server overridden by the URL), else
    the bare URL, else the in-cluster service account. Raises KubeConfigError."""
    if kubeconfig_file:
        access = kubeconfig_access(kubeconfig_file)
        return access.with_server(api_url) if api_url else access
    if api_url:
        return Access(server=api_url)
    return in_cluster_access(environ)


def in_cluster_access(environ: Mapping[str, str], root: str = SERVICE_ACCOUNT) -> Access:
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("Service host/port is not set.")
    token_file, ca_file = os.path.join(root, "token"), os.path.join(root, "ca.crt")
    if not os.path.isfile(token_file):
        raise KubeConfigError("Service token file does not exist.")
    if not os.path.isfile(ca_file):
        raise KubeConfigError("Service certification file does not exist.")
    server_host = f"[{host}]" if ":" in host else host
    return Access(server=f"https://{server_host}:{port}", ca_file=ca_file, token_file=token_file)


def kubeconfig_access(path: str) -> Access:
    """The current context of a kubeconfig file."""
    try:
        import yaml  # the kubernetes package's dependency, not one of the node runtime's own
    except ImportError:
        raise KubeConfigError("reading a kubeconfig needs PyYAML") from None
    try:
        with open(path, "rb") as handle:
            config = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as err:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {err}") from None
    if not isinstance(config, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig")
    context = _named(config, "contexts", config.get("current-context"), "context", path)
    cluster = _named(config, "clusters", context.get("cluster"), "cluster", path)
    user_name = context.get("user")
    user = _named(config, "users", user_name, "user", path) if user_name else {}
    base = os.path.dirname(os.path.abspath(path))
    provider = user.get("auth-provider")
    if provider:
        name = provider.get("name") if isinstance(provider, dict) else provider
        raise KubeConfigError(
            f"kubeconfig {path}: user {user_name!r} authenticates with the auth provider "
            f"{name!r}, which flanneld cannot use either (no Auth Provider found for name "
            f'"{name}"): give the user an exec credential plugin instead '
            "(client.authentication.k8s.io)"
        )
    exec_plugin = None
    if user.get("exec"):
        try:
            exec_plugin = ExecConfig.parse(
                user["exec"], base, _extension(cluster, CLUSTER_EXTENSION)
            )
        except ExecConfigError as err:
            raise KubeConfigError(f"kubeconfig {path}: user {user_name!r}: {err}") from None

    def file_of(value: Any) -> str | None:
        return os.path.join(base, str(value)) if value else None

    access = Access(
        server=str(cluster.get("server") or ""),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        ca_file=file_of(cluster.get("certificate-authority")),
        ca_data=_b64(cluster.get("certificate-authority-data"), "certificate-authority-data", path),
        cert_file=file_of(user.get("client-certificate")),
        key_file=file_of(user.get("client-key")),
        cert_data=_b64(user.get("client-certificate-data"), "client-certificate-data", path),
        key_data=_b64(user.get("client-key-data"), "client-key-data", path),
        token=str(user["token"]) if user.get("token") else None,
        token_file=file_of(user.get("tokenFile")),
        username=str(user["username"]) if user.get("username") else None,
        password=str(user["password"]) if user.get("password") else None,
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
        exec_plugin=exec_plugin,
    )
    if access.basic_auth() and (access.token or access.token_file):
        # client-go's HTTPWrappersForConfig refuses the pair
        raise KubeConfigError(
            f"kubeconfig {path}: username/password or bearer token may be set, but not both"
        )
    return access


def _extension(cluster: dict[str, Any], name: str) -> Any:
    """A named entry of the cluster's `extensions` list, as it is; None when absent."""
    for item in cluster.get("extensions") or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item.get("extension")
    return None


def _named(config: dict[str, Any], section: str, name: Any, key: str, path: str) -> dict[str, Any]:
    for item in config.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name and isinstance(item.get(key), dict):
            entry: dict[str, Any] = item[key]
            return entry
    raise KubeConfigError(f"kubeconfig {path}: no {key} named {name!r}")


def _b64(value: Any, what: str, path: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise KubeConfigError(f"kubeconfig {path}: {what} is not base64") from None


# --- requests ---------------------------------------------------------------------------------


def _ssl_context(access: Access, client: tuple[bytes, bytes] | None) -> ssl.SSLContext:
    """The kubeconfig's TLS settings; `client`: an exec plugin's certificate and key (PEM)."""
    context = ssl.create_default_context()
    if not access.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if access.ca_file:
        context.load_verify_locations(cafile=access.ca_file)
    if access.ca_data:
        context.load_verify_locations(cadata=access.ca_data.decode("ascii", "replace"))
    cert_data, key_data = client or (access.cert_data, access.key_data)
    if client or access.cert_data or access.cert_file:
        with (
            _as_file(cert_data, access.cert_file) as cert,
            _as_file(key_data, access.key_file) as key,
        ):
            assert cert is not None
            context.load_cert_chain(cert, key)
    return context


@contextlib.contextmanager
def _as_file(data: bytes | None, path: str | None) -> Iterator[str | None]:
    """A path to `data` (a memory file, never on disk), else `path`."""
    if data is None:
        yield path
        return
    fd = os.memfd_create("kube-credential", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


class KubeClient:
    """Thread-safe; one pool of connections to the server (a new one when an exec plugin
    hands out another client certificate)."""

    def __init__(self, access: Access, timeout: float) -> None:
        if not access.server:
            raise KubeConfigError("no API server: the kubeconfig names none")
        self.access = access
        self.timeout = timeout
        self._base = access.server.rstrip("/")
        self._plugin = (
            ExecPlugin(access.exec_plugin, access.exec_cluster())
            if access.exec_plugin is not None and access.runs_plugin()
            else None
        )
        if self._base.startswith("https:") and not access.verify:
            # The kubeconfig asked for it: said once here, not warned at every request.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            log.warning("The API server's certificate is not checked (%s)", self._base)
        self._pool_lock = threading.Lock()
        self._pool_client: tuple[bytes, bytes] | None = None
        try:
            self._pool = self._new_pool(None)
        except (OSError, ssl.SSLError) as err:
            raise KubeConfigError(f"cannot load TLS settings: {err}") from None
        self._token_lock = threading.Lock()
        self._token: tuple[float, str] | None = None

    def _new_pool(self, client: tuple[bytes, bytes] | None) -> urllib3.PoolManager:
        access = self.access
        options: dict[str, Any] = {"maxsize": 4, "retries": False}
        if self._base.startswith("https:"):
            options["ssl_context"] = _ssl_context(access, client)
            if access.tls_server_name:
                options["server_hostname"] = access.tls_server_name
            if not access.verify:
                options["assert_hostname"] = False
        if access.proxy:
            return urllib3.ProxyManager(access.proxy, **options)
        return urllib3.PoolManager(**options)

    def close(self) -> None:
        self._pool.clear()

    def _credential(self) -> tuple[urllib3.PoolManager, Credential | None]:
        """The pool to send with, and the exec plugin's credential it carries, if any."""
        if self._plugin is None:
            return self._pool, None
        try:
            credential = self._plugin.credential()
        except ExecCredentialError as err:
            raise ExecCredentialError(f"getting credentials: {err}") from None
        client = credential.client_pair
        with self._pool_lock:
            if client != self._pool_client:
                try:
                    pool = self._new_pool(client)
                except (OSError, ssl.SSLError) as err:
                    self._plugin.rejected(credential)  # not kept: the next request asks again
                    raise ExecCredentialError(
                        f"getting credentials: failed parsing client key/certificate: {err}"
                    ) from None
                self._pool.clear()
                self._pool, self._pool_client = pool, client
            return self._pool, credential

    def _headers(
        self, accept: str, content_type: str | None, credential: Credential | None
    ) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "pyflanneld"}
        if content_type:
            headers["Content-Type"] = content_type
        token = credential.token if credential is not None else self._bearer()
        basic = self.access.basic_auth()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif basic:
            headers["Authorization"] = basic
        return headers

    def _bearer(self) -> str | None:
        if self.access.token_file is None:
            return self.access.token
        with self._token_lock:
            now = time.monotonic()
            if self._token is None or now - self._token[0] > TOKEN_RELOAD:
                with open(self.access.token_file, encoding="utf-8") as handle:
                    self._token = (now, handle.read().strip())
            return self._token[1]

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str = "application/json",
        read_timeout: float | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """The response of a successful request, its body unread (the caller reads it, with
        ``read_limited`` or ``lines``, and closes it); raises KubeApiError for an error answer,
        urllib3's HTTPError when none came, ExecCredentialError when the exec plugin gave no
        credential."""
        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        pool, credential = self._credential()
        response = pool.request(
            method,
            url,
            body=body,
            headers=self._headers(accept, content_type, credential),
            timeout=urllib3.Timeout(connect=self.timeout, read=read_timeout or self.timeout),
            preload_content=False,
            redirect=False,
        )
        if response.status >= 400:
            try:
                data = read_limited(response, MAX_STATUS_BYTES, truncate=True)
            finally:
                release(response)
            if response.status == 401 and self._plugin is not None and credential is not None:
                self._plugin.rejected(credential)
            raise KubeApiError(response.status, response.reason or "", data)
        return response

    def fetch(self, method: str, path: str, limit: int = MAX_OBJECT_BYTES, **options: Any) -> bytes:
        """The whole body of a successful request, read up to ``limit`` bytes (ResponseTooLarge
        past it)."""
        response = self.request(method, path, **options)
        try:
            data = read_limited(response, limit)
        except BaseException:
            release(response)
            raise
        response.release_conn()
        return data

    def get_json(self, path: str, **options: Any) -> Any:
        return json.loads(self.fetch("GET", path, **options))

    def patch(self, path: str, body: Mapping[str, Any], content_type: str) -> None:
        """A patch whose answer (the patched object) is not needed: it is read and dropped."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.fetch("PATCH", path, body=data, content_type=content_type)


def read_limited(
    response: urllib3.BaseHTTPResponse, limit: int, *, truncate: bool = False
) -> bytes:
    """The body, read until its end or past ``limit`` bytes: ResponseTooLarge then, or with
    ``truncate`` its first ``limit`` bytes. Read in pieces of up to 1 MiB and joined once: a
    page of 1 500 nodes is 15 MB."""
    pieces: list[bytes] = []
    size = 0
    for piece in response.stream(min(1 << 20, limit + 1), decode_content=True):
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            if truncate:
                return b"".join(pieces)[:limit]
            raise ResponseTooLarge(limit)
    return b"".join(pieces)


def release(response: urllib3.BaseHTTPResponse) -> None:
    """Drop the connection of a response whose body may be partly unread (it cannot carry
    another request)."""
    response.close()
    response.release_conn()


def lines(
    response: urllib3.BaseHTTPResponse, limit: int = MAX_OBJECT_BYTES, size: int = 1 << 16
) -> Iterator[list[bytes]]:
    """The complete lines of a streamed answer, in the batches they arrived in (a watch's
    events: one batch per read, so a burst is handed on at once). A line longer than ``limit``
    is dropped with a warning, never held whole."""
    rest = b""
    dropping = False  # the line being read is past the limit: dropped up to its end
    for chunk in response.stream(size, decode_content=True):
        *complete, rest = (rest + chunk).split(b"\n")
        if dropping and complete:
            complete[0], dropping = b"", False
        if len(rest) > limit:
            if not dropping:
                complete.append(rest)  # warned about below, with any other
            rest, dropping = b"", True
        batch = [line for line in complete if line]
        if any(len(line) > limit for line in batch):
            log.warning("Dropped a watch event larger than %d bytes", limit)
            batch = [line for line in batch if len(line) <= limit]
        if batch:
            yield batch
    if rest.strip() and not dropping:
        yield [rest]
