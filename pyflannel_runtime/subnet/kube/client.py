"""A small client for the Kubernetes API calls flannel makes: JSON over urllib3, no models.

The `kubernetes` package builds hundreds of model classes (and pulls in pydantic, requests and
oauthlib) when imported: about 30 MB that an agent would carry for its four node calls. This
speaks the same HTTP to the same settings. They come from a kubeconfig's current context
(server, CA, client certificate, bearer token or token file, proxy; `--kube-api-url`
overrides the server), else from the pod's service account (clientcmd's in-cluster config).
A kubeconfig user that authenticates another way (an exec plugin, an auth provider, a user
name and password) is read by the `kubernetes` package's own loader, imported only then.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import urllib3

from pyflannel_runtime import PyflannelError

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
_OTHER_AUTH = ("exec", "auth-provider", "username", "password")


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
    tls_server_name: str | None = None
    proxy: str | None = None
    # Request headers from elsewhere (the `kubernetes` loader's refreshed credentials).
    auth_headers: Callable[[], Mapping[str, str]] | None = field(default=None, compare=False)

    def with_server(self, server: str) -> Access:
        return dataclasses.replace(self, server=server)


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
    user = _named(config, "users", context.get("user"), "user", path) if context.get("user") else {}
    if any(user.get(key) for key in _OTHER_AUTH):
        return _kubernetes_loader_access(path)
    base = os.path.dirname(os.path.abspath(path))

    def file_of(value: Any) -> str | None:
        return os.path.join(base, str(value)) if value else None

    return Access(
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
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
    )


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


def _kubernetes_loader_access(path: str) -> Access:
    """What the `kubernetes` package makes of a kubeconfig, credentials refreshed per request."""
    import kubernetes.client
    import kubernetes.config

    config: Any = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, client_configuration=config, persist_config=False
        )
    except Exception as err:  # ConfigException and whatever its plugins raise
        raise KubeConfigError(str(err)) from None

    def headers() -> Mapping[str, str]:
        """The loader's credentials of the moment (its refresh hook runs the plugin again)."""
        settings = config.auth_settings().values()
        return {
            s["key"]: s["value"] for s in settings if s.get("in") == "header" and s.get("value")
        }

    return Access(
        server=config.host,
        verify=config.verify_ssl,
        ca_file=config.ssl_ca_cert,
        cert_file=config.cert_file,
        key_file=config.key_file,
        tls_server_name=config.tls_server_name,
        proxy=config.proxy,
        auth_headers=headers,
    )


# --- requests ---------------------------------------------------------------------------------


def _ssl_context(access: Access) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not access.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if access.ca_file:
        context.load_verify_locations(cafile=access.ca_file)
    if access.ca_data:
        context.load_verify_locations(cadata=access.ca_data.decode("ascii", "replace"))
    if access.cert_data or access.cert_file:
        with (
            _as_file(access.cert_data, access.cert_file) as cert,
            _as_file(access.key_data, access.key_file) as key,
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
    """Thread-safe; one pool of connections to the server."""

    def __init__(self, access: Access, timeout: float) -> None:
        if not access.server:
            raise KubeConfigError("no API server: the kubeconfig names none")
        self.access = access
        self.timeout = timeout
        self._base = access.server.rstrip("/")
        options: dict[str, Any] = {"maxsize": 4, "retries": False}
        if self._base.startswith("https:"):
            try:
                options["ssl_context"] = _ssl_context(access)
            except (OSError, ssl.SSLError) as err:
                raise KubeConfigError(f"cannot load TLS settings: {err}") from None
            if access.tls_server_name:
                options["server_hostname"] = access.tls_server_name
            if not access.verify:
                options["assert_hostname"] = False
                # The kubeconfig asked for it: said once here, not warned at every request.
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
                log.warning("The API server's certificate is not checked (%s)", self._base)
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(access.proxy, **options)
            if access.proxy
            else urllib3.PoolManager(**options)
        )
        self._token_lock = threading.Lock()
        self._token: tuple[float, str] | None = None

    def close(self) -> None:
        self._pool.clear()

    def _headers(self, accept: str, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "pyflanneld"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if self.access.auth_headers is not None:
            headers.update(self.access.auth_headers())
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
        urllib3's HTTPError when none came."""
        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        response = self._pool.request(
            method,
            url,
            body=body,
            headers=self._headers(accept, content_type),
            timeout=urllib3.Timeout(connect=self.timeout, read=read_timeout or self.timeout),
            preload_content=False,
            redirect=False,
        )
        if response.status >= 400:
            try:
                data = read_limited(response, MAX_STATUS_BYTES, truncate=True)
            finally:
                release(response)
            raise KubeApiError(response.status, response.reason or "", bytes(data))
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
        return bytes(data)

    def get_json(self, path: str, **options: Any) -> Any:
        return json.loads(self.fetch("GET", path, **options))

    def patch(self, path: str, body: Mapping[str, Any], content_type: str) -> None:
        """A patch whose answer (the patched object) is not needed: it is read and dropped."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.fetch("PATCH", path, body=data, content_type=content_type)


def read_limited(
    response: urllib3.BaseHTTPResponse, limit: int, *, truncate: bool = False
) -> bytearray:
    """The body, read until its end or past ``limit`` bytes: ResponseTooLarge then, or with
    ``truncate`` its first ``limit`` bytes."""
    body = bytearray()
    for chunk in response.stream(1 << 16, decode_content=True):
        body += chunk
        if len(body) > limit:
            if truncate:
                del body[limit:]
                return body
            raise ResponseTooLarge(limit)
    return body


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
