"""The Kubernetes subnet manager (``--kube-subnet-mgr``): leases are the nodes' podCIDRs,
advertised through node annotations (flannel-io/flannel pkg/subnet/kube/kube.go).

API calls are blocking (`kube_client`), so they run in worker threads, and the node watch runs
in a thread of its own that hands nodes to the event loop without ever waiting on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.subnet import kube_nodes
from pyflannel_runtime.subnet.annotations import DEFAULT_PREFIX, Annotations
from pyflannel_runtime.subnet.kube_client import (
    KubeApiError,
    KubeClient,
    KubeConfigError,
    lines,
    load_access,
)
from pyflannel_runtime.subnet.kube_exec import ExecCredentialError
from pyflannel_runtime.subnet.kube_nodes import NodeLeaseError, NodeLeaseTracker
from pyflannel_runtime.subnet.manager import (
    LeaseListing,
    LeaseWatchBatch,
    ListedLease,
    Unimplemented,
    UnreadableLease,
)
from pyflannel_runtime.subnet.node_queue import NodeChanges, NodeQueue, NodeSnapshot
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig, parse_config
from pyflannel_runtime.wire.vxlan_data import advertised_vtep_mac

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_NET_CONFIG_PATH = "/etc/kube-flannel/net-conf.json"
LEASE_DURATION = 24 * 3600.0  # kube leases are never renewed; flannel still stamps 24 h
REQUEST_TIMEOUT = 30.0
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# A watch answering with metadata only: a heartbeat's event carries ~4 KB instead of the whole
# Node's ~10 KB (tests/fakes/kube_api.py, "Metadata-only answers").
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# Nodes per page of the initial list. A page's parsed JSON sets how far the agent's RSS climbs
# for good (CPython keeps the arenas): with 5 000 realistic ~10 KB nodes, reading the list as the
# agent keeps it left 44.7 MiB at pages of 100, 39.9 at 50, 37.5 at 25, 36.3 at 10, for the
# same CPU (0.8-1.0 s); 25 costs 200 requests per 5 000 nodes.
LIST_PAGE = 25
# Errors of an API call: an error answer, none at all, or no credential to send it with.
API_ERRORS = (KubeApiError, urllib3.exceptions.HTTPError, ExecCredentialError)


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


class KubeSubnetError(PyflannelError, RuntimeError):
    """A kube subnet manager failure; ``str()`` is flannel's message."""


def api_error_text(err: BaseException) -> str:
    """What client-go would print: the Status message of an API error."""
    if isinstance(err, KubeApiError):
        return err.message()
    return str(err)


def build_api_client(
    kube_api_url: str,
    kubeconfig_file: str,
    timeout: float = REQUEST_TIMEOUT,
    environ: Mapping[str, str] | None = None,
) -> KubeClient:
    """clientcmd.BuildConfigFromFlags: a kubeconfig (its server overridden by the URL), else the
    bare URL, else the in-cluster service account."""
    if not kubeconfig_file and not kube_api_url:
        log.warning("Neither --kubeconfig nor --master was specified. Using the inClusterConfig.")
    try:
        access = load_access(
            kube_api_url, kubeconfig_file, os.environ if environ is None else environ
        )
        return KubeClient(access, timeout)
    except KubeConfigError as err:
        raise KubeSubnetError(f"fail to create kubernetes config: {err}") from None


class NodeApi:
    """The few Kubernetes calls flannel makes, returning decoded JSON. Blocking."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def close(self) -> None:
        self.client.close()

    def read_node(self, name: str) -> dict[str, Any]:
        node: dict[str, Any] = self.client.get_json(f"/api/v1/nodes/{quote(name, safe='')}")
        return node

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        pod: dict[str, Any] = self.client.get_json(path)
        return pod

    def node_pages(self, limit: int = LIST_PAGE) -> Iterator[tuple[list[dict[str, Any]], str]]:
        """The nodes in pages of one consistent list, each with the list's resourceVersion."""
        token = ""
        while True:
            query = {"limit": str(limit), **({"continue": token} if token else {})}
            listing = self.client.get_json("/api/v1/nodes", query=query)
            metadata = listing.get("metadata") or {}
            yield list(listing.get("items") or []), str(metadata["resourceVersion"])
            token = metadata.get("continue") or ""
            if not token:
                return

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        nodes: list[dict[str, Any]] = []
        version = ""
        for page, page_version in self.node_pages():
            nodes += page
            version = page_version
        return nodes, version

    def watch_nodes(
        self, resource_version: str, timeout_seconds: int, metadata_only: bool
    ) -> urllib3.BaseHTTPResponse:
        """The raw watch response (a stream of one JSON event per line)."""
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        return self.client.request(
            "GET",
            "/api/v1/nodes",
            query=query,
            accept=METADATA_ONLY if metadata_only else "application/json",
            read_timeout=timeout_seconds + self.client.timeout,
            stream=True,
        )

    def patch_node_status(self, name: str, body: Mapping[str, Any]) -> None:
        # Strategic merge, as client-go's PatchStatus.
        self.client.patch_json(
            f"/api/v1/nodes/{quote(name, safe='')}/status", body, STRATEGIC_MERGE
        )


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
    except API_ERRORS as err:
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
        api: NodeApi,
        node_name: str,
        config: NetworkConfig,
        settings: KubeSettings,
        *,
        watch_timeout: int = 300,
    ) -> None:
        self.node_name = node_name
        self.keys = Annotations.for_prefix(settings.annotation_prefix)
        self._api = api
        self._config = config
        self._settings = settings
        self._tracker = NodeLeaseTracker(self.keys, config.enable_ipv4, config.enable_ipv6)
        self._queue = NodeQueue()
        self._watch: _NodeWatch | None = None
        self._watching = False
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
        env = os.environ if environ is None else environ
        api = NodeApi(
            build_api_client(
                settings.api_url, settings.kubeconfig_file, settings.request_timeout, env
            )
        )
        try:
            node_name = ""
            if own_node:
                node_name = await asyncio.to_thread(resolve_node_name, api, env)
            config = read_net_config(settings.net_config_path)
        except BaseException:
            api.close()
            raise
        return cls(api, node_name, config, settings)

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
            except API_ERRORS as err:
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
        # The other nodes' listing starts now, while the agent sets its datapath up: it is
        # the longest step of a start, and its snapshot waits in the queue meanwhile.
        self._start_watch()
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
        except API_ERRORS as err:
            log.warning("Failed to get node %s: %s", go_quote(self.node_name), api_error_text(err))
            return {}
        return kube_nodes.node_annotations(node)

    def _start_watch(self) -> None:
        if self._watch is None:
            self._watch = _NodeWatch(self._api, self._queue, self._watch_timeout, self.keys)
            self._watch.start(asyncio.get_running_loop())

    async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        """A snapshot of the flannel nodes' leases after every (re)list, events in between."""
        if self._watching:
            raise RuntimeError("watch_leases already has a consumer")
        self._watching = True
        self._start_watch()
        while True:
            batch = self._batch(await self._queue.get())
            if batch is not None:
                yield batch

    def _batch(self, item: NodeSnapshot | NodeChanges) -> LeaseWatchBatch | None:
        """What the leases make of a queue item; the item is not kept across the generator's
        yield (a snapshot holds every node until the next change would replace it)."""
        if isinstance(item, NodeSnapshot):
            return LeaseWatchBatch(snapshot=self._tracker.reset(item.nodes.values()))
        events = [event for name, node in item for event in self._tracker.update(name, node)]
        return LeaseWatchBatch(events=tuple(events)) if events else None

    async def close(self) -> None:
        if self._watch is not None:
            await asyncio.to_thread(self._watch.stop)
        self._api.close()


class _ConsumerGone(Exception):
    pass


class _WatchEnded(Exception):
    """The server ended the watch with an ERROR event: 410 Gone, or "Too large resource
    version" from an API server whose history is now another (restored from a backup, a new
    etcd): either way the resourceVersion is no use any more, so the nodes are listed again
    (client-go's reflector lists again after any watch error)."""


def _spec(cidrs: tuple[str, ...]) -> dict[str, Any]:
    """A node spec from its podCIDR and podCIDRs, as `_NodeWatch` keeps them."""
    spec: dict[str, Any] = {"podCIDR": cidrs[0]} if cidrs[0] else {}
    if cidrs[1:]:
        spec["podCIDRs"] = list(cidrs[1:])
    return spec


class _NodeWatch:
    """List, then watch from the list's resourceVersion; re-list when the server says 410 Gone
    or ends the watch with any other ERROR event.

    Runs in its own thread. Transport failures (a stream broken off, even mid-event) resume the
    watch from the last resourceVersion seen, with backoff (100 ms doubling to 5 s, as
    flannel's etcd watch): nothing is lost, the server replays what came after it.

    The list is read in pages, and each node kept only as what a lease is made of: its name,
    flannel's annotations and its podCIDRs. The watch asks for metadata only, since a node's
    podCIDRs never change once set while its status changes with every kubelet heartbeat: the
    podCIDRs come from the list, by node UID, or (a node not listed, or listed before it had
    one) from reading that node once. A server that cannot answer with metadata only (406)
    is watched for whole nodes.
    """

    def __init__(
        self, api: NodeApi, queue: NodeQueue, timeout_seconds: int, keys: Annotations
    ) -> None:
        self._api = api
        self._queue = queue
        self._timeout_seconds = timeout_seconds
        self._keys = keys
        self._annotations = frozenset(astuple(keys))
        self._cidrs: dict[str, tuple[str, ...]] = {}  # node UID -> podCIDR, podCIDRs...
        self._metadata_only = True
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
                    resource_version = self._relist()
                started = time.monotonic()
                resource_version, delivered = self._stream(resource_version)
                if delivered or time.monotonic() - started >= 1.0:
                    delay = 0.1
                    continue
                # As client-go: a watch closed at once with nothing in it is a failure, or a
                # misbehaving server or proxy would have us reconnect in a tight loop.
                failure: BaseException = ConnectionError("watch closed immediately")
            except _WatchEnded as err:
                log.info("Node watch ended (%s); listing the nodes again", err)
                resource_version = None
                continue
            except KubeApiError as err:
                if err.status == 410:
                    log.info("Node watch expired (%s); listing the nodes again", err.message())
                    resource_version = None
                    continue
                if err.status == 406 and self._metadata_only:
                    log.info("The API server cannot watch node metadata alone; watching nodes")
                    self._metadata_only = False
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

    def _relist(self) -> str:
        """Hand every node on as a snapshot; returns the list's resourceVersion. The nodes are
        not kept in this thread's frame, which lives as long as the watch (5 000 nodes: ~4 MB)."""
        nodes, version = self._list()
        self._post(self._queue.put_snapshot, nodes)
        return version

    def _list(self) -> tuple[dict[str, kube_nodes.Node], str]:
        """Every node, as lease material, by name; and the list's resourceVersion."""
        nodes: dict[str, kube_nodes.Node] = {}
        self._cidrs = {}
        version = ""
        for page, page_version in self._api.node_pages():
            version = page_version
            for node in page:
                metadata = node.get("metadata") or {}
                spec = self._remember(metadata, node.get("spec") or {})
                nodes[str(metadata.get("name", ""))] = self._slim(metadata, spec)
        return nodes, version

    def _remember(self, metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
        """The node's podCIDR(s), kept by its UID; returns them as a spec."""
        cidrs = (spec.get("podCIDR") or "", *(spec.get("podCIDRs") or ()))
        self._cidrs[str(metadata.get("uid", ""))] = cidrs
        return _spec(cidrs)

    def _slim(self, metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> kube_nodes.Node:
        annotations = metadata.get("annotations") or {}
        return {
            "metadata": {
                "name": metadata.get("name", ""),
                "annotations": {k: v for k, v in annotations.items() if k in self._annotations},
            },
            "spec": spec,
        }

    def _change(self, kind: str, obj: Mapping[str, Any]) -> tuple[str, kube_nodes.Node | None]:
        """A watch event as (node name, lease material, or None when the node is gone)."""
        metadata = obj.get("metadata") or {}
        name, uid = str(metadata.get("name", "")), str(metadata.get("uid", ""))
        if kind == "DELETED":
            self._cidrs.pop(uid, None)
            return name, None
        if "spec" in obj:  # a whole node: the server cannot send metadata alone
            return name, self._slim(metadata, self._remember(metadata, obj.get("spec") or {}))
        cidrs = self._cidrs.get(uid)
        node = self._slim(metadata, _spec(cidrs or ("",)))
        if cidrs is None or (not cidrs[0] and kube_nodes.is_flannel_node(node, self._keys)):
            # New since the list (or renamed by a re-creation), or a flannel node whose
            # podCIDR was not set when listed: read it once.
            try:
                current = self._api.read_node(name)
            except KubeApiError as err:
                if err.status != 404:
                    raise
                return name, node  # gone already: its DELETED event follows
            if (current.get("metadata") or {}).get("uid") == uid:
                node = self._slim(metadata, self._remember(metadata, current.get("spec") or {}))
        return name, node

    def _stream(self, resource_version: str) -> tuple[str, int]:
        """Deliver watch events until the server ends the stream: the last resourceVersion seen,
        and how many events came."""
        response = self._api.watch_nodes(
            resource_version, self._timeout_seconds, self._metadata_only
        )
        with self._lock:
            if self._stopping.is_set():
                response.close()
                return resource_version, 0
            self._response = response
        delivered = 0
        try:
            for batch in lines(response):
                changes: list[tuple[str, kube_nodes.Node | None]] = []
                try:
                    for line in batch:
                        event = json.loads(line)
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            raise _WatchEnded(
                                f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
                            )
                        if kind != "BOOKMARK":
                            changes.append(self._change(kind, obj))
                        resource_version = str(obj["metadata"]["resourceVersion"])
                        delivered += 1
                finally:
                    # What came before a failure is delivered, and resumed after.
                    if changes:
                        self._post(self._queue.put_all, changes)
        finally:
            with self._lock:
                self._response = None
            # A stream left early still has unread bytes: never return it to the pool.
            response.close()
            response.release_conn()
        return resource_version, delivered
