"""The Kubernetes subnet manager (``--kube-subnet-mgr``): leases are the nodes' podCIDRs,
advertised through node annotations (flannel-io/flannel pkg/subnet/kube/kube.go).

The ``kubernetes`` client is synchronous, so its calls run in worker threads and the node watch
runs in a thread of its own that hands nodes to the event loop without ever waiting on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch import watch as k8s_watch

from pyflannel_runtime.backend.vxlan_data import advertised_vtep_mac
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.model.lease import Lease, LeaseAttrs
from pyflannel_runtime.model.netconf import ConfigError, NetworkConfig, parse_config
from pyflannel_runtime.subnet import kube_nodes
from pyflannel_runtime.subnet.annotations import DEFAULT_PREFIX, Annotations
from pyflannel_runtime.subnet.kube_nodes import NodeLeaseError, NodeLeaseTracker
from pyflannel_runtime.subnet.manager import (
    LeaseListing,
    LeaseWatchBatch,
    ListedLease,
    Unimplemented,
    UnreadableLease,
)
from pyflannel_runtime.subnet.node_queue import NodeQueue, NodeSnapshot

log = logging.getLogger(__name__)

T = TypeVar("T")

# The parts of the kubernetes package that carry no type annotations.
_k8s_config: Any = kubernetes.config
_iter_resp_lines: Callable[[Any], Iterator[str]] = k8s_watch.iter_resp_lines

DEFAULT_NET_CONFIG_PATH = "/etc/kube-flannel/net-conf.json"
LEASE_DURATION = 24 * 3600.0  # kube leases are never renewed; flannel still stamps 24 h
REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class KubeSettings:
    """The API server, net-conf.json and annotations flanneld's --kube-* flags describe."""

    api_url: str = ""
    kubeconfig_file: str = ""
    net_config_path: str = DEFAULT_NET_CONFIG_PATH
    annotation_prefix: str = DEFAULT_PREFIX
    set_node_network_unavailable: bool = True
    request_timeout: float = REQUEST_TIMEOUT
    retry_interval: float = 3.0  # patches of the own node are retried this often ...
    retry_timeout: float = 30.0  # ... for this long


class KubeSubnetError(RuntimeError):
    """A kube subnet manager failure; ``str()`` is flannel's message."""


def api_error_text(err: BaseException) -> str:
    """What client-go would print: the Status message of an API error."""
    if isinstance(err, ApiException):
        try:
            status = json.loads(err.body or "")
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
        return f"{err.status} {err.reason}"
    return str(err)


def build_api_client(kube_api_url: str, kubeconfig_file: str) -> kubernetes.client.ApiClient:
    """clientcmd.BuildConfigFromFlags: a kubeconfig (its server overridden by the URL), else the
    bare URL, else the in-cluster service account."""
    config = kubernetes.client.Configuration()
    try:
        if kubeconfig_file:
            _k8s_config.load_kube_config(
                config_file=kubeconfig_file, client_configuration=config, persist_config=False
            )
        elif not kube_api_url:
            log.warning(
                "Neither --kubeconfig nor --master was specified. Using the inClusterConfig."
            )
            _k8s_config.load_incluster_config(client_configuration=config)
    except (_k8s_config.ConfigException, OSError, ValueError) as err:
        raise KubeSubnetError(f"fail to create kubernetes config: {err}") from None
    if kube_api_url:
        config.host = kube_api_url
        refresh = config.refresh_api_key_hook
        if refresh is not None:
            # The kubeconfig loader's token refresh rewrites every setting, its server included.
            def refresh_keeping_server(cfg: Any) -> None:
                refresh(cfg)
                cfg.host = kube_api_url

            config.refresh_api_key_hook = refresh_keeping_server
    return kubernetes.client.ApiClient(config)


class NodeApi:
    """The few Kubernetes calls flannel makes, returning decoded JSON. Blocking."""

    def __init__(
        self, api_client: kubernetes.client.ApiClient, timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.api_client: Any = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._timeout = timeout

    @staticmethod
    def _decode(response: Any) -> Any:
        data = response.data  # the whole body, so the pooled connection can be reused
        response.release_conn()
        return json.loads(data)

    def read_node(self, name: str) -> dict[str, Any]:
        response = self._core.read_node(
            name, _preload_content=False, _request_timeout=self._timeout
        )
        node: dict[str, Any] = self._decode(response)
        return node

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        response = self._core.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=self._timeout
        )
        pod: dict[str, Any] = self._decode(response)
        return pod

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        response = self._core.list_node(_preload_content=False, _request_timeout=self._timeout)
        listing = self._decode(response)
        return list(listing.get("items") or []), str(listing["metadata"]["resourceVersion"])

    def watch_nodes(self, resource_version: str, timeout_seconds: int) -> Any:
        """The raw watch response (a urllib3 response streaming one JSON event per line)."""
        return self._core.list_node(
            watch=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            _preload_content=False,
            _request_timeout=(self._timeout, timeout_seconds + self._timeout),
        )

    def patch_node_status(self, name: str, body: Mapping[str, Any]) -> None:
        # Strategic merge is the client's default for object bodies (client-go PatchStatus).
        response: Any = self._core.patch_node_status(
            name,
            dict(body),
            _content_type="application/strategic-merge-patch+json",
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        self._decode(response)


def resolve_node_name(api: NodeApi, environ: Mapping[str, str]) -> str:
    """NODE_NAME, else the node the POD_NAMESPACE/POD_NAME pod runs on (kube.go:
    NewSubnetManager)."""
    name = environ.get("NODE_NAME", "")
    if name:
        return name
    pod_name = environ.get("POD_NAME", "")
    namespace = environ.get("POD_NAMESPACE", "")
    if not pod_name or not namespace:
        raise KubeSubnetError("env variables POD_NAME and POD_NAMESPACE must be set")
    try:
        pod = api.read_pod(namespace, pod_name)
    except (ApiException, urllib3.exceptions.HTTPError) as err:
        raise KubeSubnetError(
            f"error retrieving pod spec for '{namespace}/{pod_name}': {api_error_text(err)}"
        ) from None
    name = str((pod.get("spec") or {}).get("nodeName") or "")
    if not name:
        raise KubeSubnetError(f"node name not present in pod spec '{namespace}/{pod_name}'")
    return name


def read_net_config(path: str) -> NetworkConfig:
    """net-conf.json, parsed but (as in flannel's kube mode) not CheckNetworkConfig'd."""
    try:
        data = read_small_file(path)
    except OSError as err:  # Go's wording: "open <path>: no such file or directory"
        raise KubeSubnetError(f"failed to read net conf: {err}") from None
    try:
        return parse_config(data)
    except ConfigError as err:
        raise KubeSubnetError(f"error parsing subnet config: {err}") from None


class KubeSubnetManager:
    """flannel's kubeSubnetManager. Build it with ``create``."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        node_name: str,
        config: NetworkConfig,
        settings: KubeSettings,
        *,
        watch_timeout: int = 300,
    ) -> None:
        self.node_name = node_name
        self.keys = Annotations.for_prefix(settings.annotation_prefix)
        self._api = NodeApi(api_client, settings.request_timeout)
        self._config = config
        self._settings = settings
        self._tracker = NodeLeaseTracker(self.keys, config.enable_ipv4, config.enable_ipv6)
        self._queue = NodeQueue()
        self._watch: _NodeWatch | None = None
        self._watch_timeout = watch_timeout

    @classmethod
    async def create(
        cls,
        settings: KubeSettings,
        *,
        environ: Mapping[str, str] | None = None,
        own_node: bool = True,
    ) -> KubeSubnetManager:
        """The manager for this node (NODE_NAME, or the pod's node). `own_node=False`: one that
        only reads (`get_network_config`, `list_leases`), for no node, so no name is looked up.
        Raises KubeSubnetError, or AnnotationPrefixError for a bad prefix."""
        Annotations.for_prefix(settings.annotation_prefix)  # a bad one fails before the client
        api_client: Any = build_api_client(settings.api_url, settings.kubeconfig_file)
        try:
            node_name = ""
            if own_node:
                env = os.environ if environ is None else environ
                api = NodeApi(api_client, settings.request_timeout)
                node_name = await asyncio.to_thread(resolve_node_name, api, env)
            config = read_net_config(settings.net_config_path)
        except BaseException:
            api_client.close()
            raise
        return cls(api_client, node_name, config, settings)

    async def get_network_config(self) -> NetworkConfig:
        return self._config

    async def list_leases(self) -> LeaseListing:
        """The flannel nodes' leases, by node name; a flannel node whose annotations cannot
        be read is listed as unreadable."""
        nodes, _ = await asyncio.to_thread(self._api.list_nodes)
        config = self._config
        leases: list[ListedLease] = []
        unreadable: list[UnreadableLease] = []
        for node in sorted(nodes, key=kube_nodes.node_name):
            if not kube_nodes.is_flannel_node(node, self.keys):
                continue
            name = kube_nodes.node_name(node)
            try:
                lease = kube_nodes.node_to_lease(
                    node, self.keys, config.enable_ipv4, config.enable_ipv6
                )
            except NodeLeaseError as err:
                unreadable.append(UnreadableLease(name, str(err)))
                continue
            leases.append(ListedLease(lease, name))
        return LeaseListing(tuple(leases), tuple(unreadable))

    async def _retry(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """flannel's PollUntilContextTimeout: try now, then every interval until the timeout."""
        deadline = time.monotonic() + self._settings.retry_timeout
        while True:
            try:
                return await call()
            except (ApiException, urllib3.exceptions.HTTPError) as err:
                log.warning(
                    "Failed to %s node %s: %s", what, go_quote(self.node_name), api_error_text(err)
                )
                if time.monotonic() + self._settings.retry_interval > deadline:
                    raise KubeSubnetError(
                        f"timeout contacting kube-api, failed to patch node "
                        f"{go_quote(self.node_name)}. Error: {api_error_text(err)}"
                    ) from None
            await asyncio.sleep(self._settings.retry_interval)

    async def _read_own_node(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._api.read_node, self.node_name)

    async def _patch_own_status(self, body: Mapping[str, Any]) -> None:
        await asyncio.to_thread(self._api.patch_node_status, self.node_name, body)

    async def acquire_lease(self, attrs: LeaseAttrs) -> Lease:
        node = await self._retry(self._read_own_node, "get")
        try:
            v4, v6 = kube_nodes.own_pod_cidrs(node)
        except NodeLeaseError as err:
            raise KubeSubnetError(str(err)) from None
        changes = kube_nodes.annotation_changes(kube_nodes.node_annotations(node), attrs, self.keys)
        if changes:
            body = kube_nodes.annotations_patch(changes)
            await self._retry(lambda: self._patch_own_status(body), "patch")
        config = self._config
        try:
            return kube_nodes.own_lease(
                v4,
                v6,
                attrs,
                network=config.network,
                ipv6_network=config.ipv6_network,
                enable_ipv4=config.enable_ipv4,
                enable_ipv6=config.enable_ipv6,
                backend_type=config.backend_type,
                name=self.node_name,
                expiration=time.time() + LEASE_DURATION,
            )
        except NodeLeaseError as err:
            raise KubeSubnetError(str(err)) from None

    async def renew_lease(self, lease: Lease) -> Lease:
        raise Unimplemented()

    async def complete_lease(self, lease: Lease) -> None:
        if not self._settings.set_node_network_unavailable:
            return
        body = kube_nodes.network_available_patch(datetime.now(UTC))
        try:
            await self._retry(lambda: self._patch_own_status(body), "patch")
        except KubeSubnetError as err:
            # A node left marked unavailable keeps its taint; flanneld itself can still run.
            log.error("Failed to set NetworkUnavailable to False: %s", err)

    async def get_stored_public_ip(self) -> tuple[str, str]:
        annotations = await self._own_annotations()
        return (
            annotations.get(self.keys.node_public_ip, ""),
            annotations.get(self.keys.node_public_ipv6, ""),
        )

    async def get_stored_mac_addresses(self) -> tuple[str, str]:
        # flannel builds these two keys as "<raw prefix>/backend-data", which misses the real
        # annotation whenever the prefix has a name part; the normalised keys always match.
        annotations = await self._own_annotations()
        return (
            advertised_vtep_mac(annotations.get(self.keys.backend_data)),
            advertised_vtep_mac(annotations.get(self.keys.backend_v6_data)),
        )

    async def _own_annotations(self) -> Mapping[str, str]:
        try:
            node = await self._read_own_node()
        except (ApiException, urllib3.exceptions.HTTPError) as err:
            log.warning("Failed to get node %s: %s", go_quote(self.node_name), api_error_text(err))
            return {}
        return kube_nodes.node_annotations(node)

    async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        """A snapshot of the flannel nodes' leases after every (re)list, events in between."""
        if self._watch is not None:
            raise RuntimeError("watch_leases already has a consumer")
        self._watch = _NodeWatch(self._api, self._queue, self._watch_timeout)
        self._watch.start(asyncio.get_running_loop())
        while True:
            item = await self._queue.get()
            if isinstance(item, NodeSnapshot):
                yield LeaseWatchBatch(snapshot=self._tracker.reset(item.nodes.values()))
                continue
            events = [event for name, node in item for event in self._tracker.update(name, node)]
            if events:
                yield LeaseWatchBatch(events=tuple(events))

    async def close(self) -> None:
        if self._watch is not None:
            await asyncio.to_thread(self._watch.stop)
        self._api.api_client.close()


class _ConsumerGone(Exception):
    pass


class _NodeWatch:
    """List, then watch from the list's resourceVersion; re-list when the server says 410 Gone.

    Runs in its own thread. Transport failures resume the watch from the last resourceVersion
    seen, with backoff (100 ms doubling to 5 s, as flannel's etcd watch).
    """

    def __init__(self, api: NodeApi, queue: NodeQueue, timeout_seconds: int) -> None:
        self._api = api
        self._queue = queue
        self._timeout_seconds = timeout_seconds
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="kube-node-watch", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            if self._response is not None:
                self._response.shutdown()
        self._thread.join()

    def _post(self, deliver: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(deliver, *args)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            raise _ConsumerGone() from None

    def _run(self) -> None:
        delay = 0.1
        resource_version: str | None = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    nodes, resource_version = self._api.list_nodes()
                    self._post(
                        self._queue.put_snapshot, {kube_nodes.node_name(n): n for n in nodes}
                    )
                started = time.monotonic()
                resource_version, delivered = self._stream(resource_version)
                if delivered or time.monotonic() - started >= 1.0:
                    delay = 0.1
                    continue
                # As client-go: a watch closed at once with nothing in it is a failure, or a
                # misbehaving server or proxy would have us reconnect in a tight loop.
                failure: BaseException = ConnectionError("watch closed immediately")
            except ApiException as err:
                if err.status == 410:
                    log.info("Node watch expired (%s); listing the nodes again", err.reason)
                    resource_version = None
                    continue
                failure = err
            except _ConsumerGone:
                return
            except Exception as err:  # transport errors, malformed lines: resume after a pause
                failure = err
            if self._stopping.is_set():
                return
            log.warning("Node watch failed (retrying in %.1fs): %s", delay, api_error_text(failure))
            self._stopping.wait(delay)
            delay = min(delay * 2, 5.0)

    def _stream(self, resource_version: str) -> tuple[str, int]:
        """Deliver watch events until the server ends the stream: the last resourceVersion seen,
        and how many events came."""
        response = self._api.watch_nodes(resource_version, self._timeout_seconds)
        with self._lock:
            if self._stopping.is_set():
                response.close()
                return resource_version, 0
            self._response = response
        delivered = 0
        try:
            for line in _iter_resp_lines(response):
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    raise ApiException(
                        status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}"
                    )
                resource_version = str(obj["metadata"]["resourceVersion"])
                delivered += 1
                if kind == "BOOKMARK":
                    continue
                name = kube_nodes.node_name(obj)
                self._post(self._queue.put, name, None if kind == "DELETED" else obj)
        finally:
            with self._lock:
                self._response = None
            # A stream left early still has unread bytes: never return it to the pool.
            response.close()
            response.release_conn()
        return resource_version, delivered
