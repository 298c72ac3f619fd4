"""The Kubernetes subnet manager (``--kube-subnet-mgr``): leases are the nodes' podCIDRs,
advertised through node annotations (flannel-io/flannel pkg/subnet/kube/kube.go).

API calls are blocking (`client`), so they run in worker threads, and the node watch runs
in a thread of its own that hands nodes to the event loop without ever waiting on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import astuple, dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import urllib3

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.subnet.backoff import Backoff
from pyflannel_runtime.subnet.kube import nodes as kube_nodes
from pyflannel_runtime.subnet.kube.annotations import DEFAULT_PREFIX, Annotations
from pyflannel_runtime.subnet.kube.client import (
    KubeApiError,
    KubeClient,
    KubeConfigError,
    ResponseTooLarge,
    lines,
    load_access,
    release,
)
from pyflannel_runtime.subnet.kube.decode import DecodedNode, DecodeError, NodeDecoder, NodePage
from pyflannel_runtime.subnet.kube.exec_credential import ExecCredentialError
from pyflannel_runtime.subnet.kube.node_queue import NodeChanges, NodeQueue, NodeSnapshot, NodeState
from pyflannel_runtime.subnet.kube.nodes import (
    NodeLeaseError,
    NodeLeaseTracker,
    ReadLease,
    UnreadableNode,
    read_lease,
)
from pyflannel_runtime.subnet.manager import (
    LeaseListing,
    LeaseWatchBatch,
    ListedLease,
    StoreStats,
    Unimplemented,
    UnreadableLease,
)
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig, parse_config
from pyflannel_runtime.wire.vxlan_data import advertised_vtep_mac

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_NET_CONFIG_PATH = "/etc/kube-flannel/net-conf.json"
# Why the node watch is started again (the agent's metrics count each): the API server ended the
# stream (as it does at the watch's timeout, every few minutes), the resourceVersion expired (410
# Gone or an ERROR event: the nodes are listed again), or the request or the stream failed.
WATCH_RESTART_REASONS = ("closed", "expired", "error")
LEASE_DURATION = 24 * 3600.0  # kube leases are never renewed; flannel still stamps 24 h
REQUEST_TIMEOUT = 30.0
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
# A watch answering with metadata only: a heartbeat's event carries ~4 KB instead of the whole
# Node's ~10 KB (tests/fakes/kube_api.py, "Metadata-only answers").
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# Nodes per page of the list. Decoded (decode.py), a node is held as its few fields only, so a
# page costs the agent about its JSON while it is read (~10 KB a realistic node: 15 MB). Each
# page is a round trip the programming of a cold start waits for: at 5 000 nodes, pages of 1 500
# took 0.17-0.26 s off it against pages of 500 (bench/bench_kube_scale.py --pages).
LIST_PAGE = 1500
# A page is read up to this size; a larger one is asked for again in halves.
MAX_PAGE_BYTES = 32 << 20
# A string decoded from JSON may hold lone surrogates: they are encoded as they are.
_UTF8, _RAW = "utf-8", "surrogatepass"
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
    # Reads and patches of the own node are retried this often on average (flannel's fixed
    # interval, jittered) ...
    retry_interval: float = 3.0
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
    """The few Kubernetes calls flannel makes, each answer decoded into what the agent reads
    of it (decode.py). Blocking."""

    def __init__(self, client: KubeClient, keys: Annotations) -> None:
        self.client = client
        self.decoder = NodeDecoder(keys)

    def close(self) -> None:
        self.client.close()

    def read_decoded(self, name: str) -> DecodedNode:
        """Raises DecodeError for an answer that is not a Node."""
        data = self.client.fetch("GET", f"/api/v1/nodes/{quote(name, safe='')}")
        return self.decoder.node(data)

    def read_node(self, name: str) -> kube_nodes.Node:
        """The node as nodes.py reads one."""
        node = self.read_decoded(name)
        return self.decoder.slim(node, node.cidrs or ("",))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        pod: dict[str, Any] = self.client.get_json(path)
        return pod

    def node_pages(self, limit: int = LIST_PAGE) -> Iterator[NodePage]:
        """The nodes in pages of one consistent list. A page larger than MAX_PAGE_BYTES is
        asked for again in halves (the continue token takes any limit), down to one node."""
        token = ""
        while True:
            query = {"limit": str(limit), **({"continue": token} if token else {})}
            try:
                data = self.client.fetch("GET", "/api/v1/nodes", MAX_PAGE_BYTES, query=query)
            except ResponseTooLarge:
                if limit == 1:
                    raise
                limit //= 2
                log.warning("A page of nodes was over %d bytes: pages of %d", MAX_PAGE_BYTES, limit)
                continue
            page = self.decoder.page(data)
            del data  # not held while the page is handed on
            yield page
            token = page.continue_token
            if not token:
                return

    def list_nodes(self) -> tuple[list[kube_nodes.Node | UnreadableNode], str]:
        """Every node as nodes.py reads one, and the list's resourceVersion."""
        nodes: list[kube_nodes.Node | UnreadableNode] = []
        version = ""
        for page in self.node_pages():
            nodes += [
                node
                if isinstance(node, UnreadableNode)
                else self.decoder.slim(node, node.cidrs or ("",))
                for node in page.nodes
            ]
            version = page.resource_version
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
        )

    def patch_node_status(self, name: str, body: Mapping[str, Any]) -> None:
        # Strategic merge, as client-go's PatchStatus.
        self.client.patch(f"/api/v1/nodes/{quote(name, safe='')}/status", body, STRATEGIC_MERGE)


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
        self.stats = StoreStats.with_reasons(WATCH_RESTART_REASONS)
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
        env = os.environ if environ is None else environ
        keys = Annotations.for_prefix(settings.annotation_prefix)
        api = NodeApi(
            build_api_client(
                settings.api_url, settings.kubeconfig_file, settings.request_timeout, env
            ),
            keys,
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
        for node in sorted(nodes, key=_name):
            if isinstance(node, UnreadableNode):
                unreadable.append(UnreadableLease(node.name, node.reason))
                continue
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
        """flannel's PollUntilContextTimeout: try now, then again until the timeout; each wait
        drawn from [0, 2 * interval] (full jitter, the interval on average), so that nodes
        started together do not ask together."""
        deadline = time.monotonic() + self._settings.retry_timeout
        ceiling = 2 * self._settings.retry_interval
        backoff = Backoff(ceiling, ceiling)
        while True:
            try:
                return await call()
            except API_ERRORS as err:
                delay = backoff.next_delay()
                log.warning(
                    "Failed to %s node %s: %s", what, go_quote(self.node_name), api_error_text(err)
                )
                if time.monotonic() + delay > deadline:
                    raise KubeSubnetError(
                        f"timeout contacting kube-api, failed to patch node "
                        f"{go_quote(self.node_name)}. Error: {api_error_text(err)}"
                    ) from None
            await asyncio.sleep(delay)

    async def _read_own_node(self) -> kube_nodes.Node:
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
        self.start_listing()
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

    async def move_lease(self, lease: Lease, attrs: LeaseAttrs) -> Lease:
        """The node's annotations patched with `attrs`; its subnet is its podCIDR, which stays."""
        node = await self._retry(self._read_own_node, "get")
        changes = kube_nodes.annotation_changes(kube_nodes.node_annotations(node), attrs, self.keys)
        if changes:
            body = kube_nodes.annotations_patch(changes)
            await self._retry(lambda: self._patch_own_status(body), "patch")
        return replace(lease, attrs=attrs)

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

    def start_listing(self) -> None:
        """Start listing the other nodes (then watching them), unless started already. The
        agent starts it as soon as the manager is built, and at the latest the lease's
        acquisition does: at 5 000 nodes the listing is the longest step of a start, and it
        runs while the agent sets its datapath up, its snapshot waiting in the queue."""
        if self._watch is None:
            families = (self._config.enable_ipv4, self._config.enable_ipv6)
            self._watch = _NodeWatch(
                self._api, self._queue, self._watch_timeout, self.keys, families, self.stats
            )
            self._watch.start(asyncio.get_running_loop())

    async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        """A snapshot of the flannel nodes' leases after every (re)list, events in between."""
        if self._watching:
            raise RuntimeError("watch_leases already has a consumer")
        self._watching = True
        self.start_listing()
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


def _name(node: NodeState) -> str:
    if isinstance(node, UnreadableNode | ReadLease):
        return node.name
    return kube_nodes.node_name(node)


class _ConsumerGone(Exception):
    pass


class _WatchEnded(Exception):
    """The server ended the watch with an ERROR event: 410 Gone, or "Too large resource
    version" from an API server whose history is now another (restored from a backup, a new
    etcd): either way the resourceVersion is no use any more, so the nodes are listed again
    (client-go's reflector lists again after any watch error)."""


def _material(cidrs: tuple[str, ...], annotations: tuple[str | None, ...]) -> bytes:
    """What a node's lease is made of, in few bytes: the count of its podCIDR(s), each one
    prefixed with its length, then a 128-bit BLAKE2b digest of flannel's annotations (each
    prefixed with its length the same way, "-" for one not set), so that two different sets
    give the same bytes only by a 2^-128 chance. 5 000 nodes take ~0.3 MB, where the
    annotations held whole took ~0.8 MB (as a tuple of strings ~3.6 MB)."""
    head = b"".join(b"%d:%s" % (len(v), v) for v in (cidr.encode(_UTF8, _RAW) for cidr in cidrs))
    values = "".join("-" if v is None else f"{len(v)}:{v}" for v in annotations)
    digest = hashlib.blake2b(values.encode(_UTF8, _RAW), digest_size=16).digest()
    return b"%d;%s%s" % (len(cidrs), head, digest)


def _material_cidrs(material: bytes) -> tuple[str, ...]:
    """The podCIDR(s) in `_material`'s bytes."""
    count, _, values = material.partition(b";")
    cidrs = []
    at = 0
    for _ in range(int(count)):
        colon = values.index(b":", at)
        end = colon + 1 + int(values[at:colon])
        cidrs.append(values[colon + 1 : end].decode(_UTF8, _RAW))
        at = end
    return tuple(cidrs)


class _NodeWatch:
    """List, then watch from the list's resourceVersion; re-list when the server says 410 Gone
    or ends the watch with any other ERROR event.

    Runs in its own thread. Transport failures (a stream broken off, even mid-event) resume the
    watch from the last resourceVersion seen, after a jittered backoff (up to 100 ms doubling to
    5 s, as the etcd watch): nothing is lost, the server replays what came after it.

    The list is read in pages, each node decoded into what a lease is made of (decode.py): its
    name, flannel's annotations and its podCIDRs. The watch asks for metadata only, since a
    node's podCIDRs never change once set while its status changes with every kubelet
    heartbeat: the podCIDRs come from the list, by node UID, or (a node not listed, or listed
    before it had one) from reading that node once. A server that cannot answer with metadata
    only (406) is watched for whole nodes. An event that changes nothing a lease is made of (a
    heartbeat) goes no further than this thread.
    """

    def __init__(
        self,
        api: NodeApi,
        queue: NodeQueue,
        timeout_seconds: int,
        keys: Annotations,
        families: tuple[bool, bool],
        stats: StoreStats,
    ) -> None:
        self._api = api
        self._keys = keys
        self._families = families
        self._stats = stats
        self._decoder = api.decoder
        self._queue = queue
        self._timeout_seconds = timeout_seconds
        self._managed = astuple(keys).index(keys.subnet_kube_managed)
        self._seen: dict[str, bytes] = {}  # node UID -> what the agent last handed on, _material
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
        backoff = Backoff()
        resource_version: str | None = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                started = time.monotonic()
                resource_version, delivered = self._stream(resource_version)
                if delivered or time.monotonic() - started >= 1.0:
                    backoff.reset()
                    if not self._stopping.is_set():
                        self._stats.watch_restarted("closed")
                    continue
                # As client-go: a watch closed at once with nothing in it is a failure, or a
                # misbehaving server or proxy would have us reconnect in a tight loop.
                failure: BaseException = ConnectionError("watch closed immediately")
            except _WatchEnded as err:
                log.info("Node watch ended (%s); listing the nodes again", err)
                self._stats.watch_restarted("expired")
                resource_version = None
                continue
            except KubeApiError as err:
                if err.status == 410:
                    log.info("Node watch expired (%s); listing the nodes again", err.message())
                    self._stats.watch_restarted("expired")
                    resource_version = None
                    continue
                if err.status == 406 and self._metadata_only:
                    log.info("The API server cannot watch node metadata alone; watching nodes")
                    self._metadata_only = False
                    continue
                failure = err
            except _ConsumerGone:
                return
            except Exception as err:  # transport errors, unreadable pages: resume after a pause
                failure = err
            if self._stopping.is_set():
                return
            delay = backoff.next_delay()
            log.warning("Node watch failed (retrying in %.1fs): %s", delay, api_error_text(failure))
            self._stats.watch_restarted("error")
            self._stopping.wait(delay)

    def _relist(self) -> str:
        """Hand every node on as a snapshot; returns the list's resourceVersion. The nodes are
        not kept in this thread's frame, which lives as long as the watch."""
        nodes, version = self._list()
        self._post(self._queue.put_snapshot, nodes)
        return version

    def _list(self) -> tuple[dict[str, NodeState], str]:
        """Every node, as lease material, by name; and the list's resourceVersion."""
        nodes: dict[str, NodeState] = {}
        self._seen = {}
        version = ""
        for page in self._api.node_pages():
            version = page.resource_version
            for node in page.nodes:
                if isinstance(node, UnreadableNode):
                    if node.name:
                        nodes[node.name] = node
                    else:
                        log.warning("Skipped a node that cannot be read: %s", node.reason)
                    continue
                cidrs = node.cidrs or ("",)
                self._seen[node.uid] = _material(cidrs, node.annotations)
                nodes[node.name] = self._lease(node, cidrs)
        return nodes, version

    def _change(self, kind: str, node: DecodedNode) -> tuple[str, NodeState | None] | None:
        """A watch event as (node name, lease material, or None when the node is gone); None
        when nothing a lease is made of changed."""
        if kind == "DELETED":
            self._seen.pop(node.uid, None)
            return node.name, None
        seen = self._seen.get(node.uid)
        cidrs = node.cidrs  # None unless the server sent the whole node
        if cidrs is None:
            cidrs = _material_cidrs(seen) if seen is not None else None
            if cidrs is None or (not cidrs[0] and node.annotations[self._managed] == "true"):
                # New since the list (or renamed by a re-creation), or a flannel node whose
                # podCIDR was not set when listed: read it once.
                try:
                    current = self._api.read_decoded(node.name)
                except KubeApiError as err:
                    if err.status != 404:
                        raise
                    # Gone already: its DELETED event follows.
                    return node.name, self._lease(node, cidrs or ("",))
                except DecodeError as err:
                    return node.name, UnreadableNode(node.name, str(err))
                if current.uid == node.uid:
                    cidrs = current.cidrs
                cidrs = cidrs or ("",)
        material = _material(cidrs, node.annotations)
        if material == seen:
            return None
        self._seen[node.uid] = material
        return node.name, self._lease(node, cidrs)

    def _lease(self, node: DecodedNode, cidrs: tuple[str, ...]) -> ReadLease:
        return read_lease(self._decoder.slim(node, cidrs), self._keys, *self._families)

    def _stream(self, resource_version: str) -> tuple[str, int]:
        """Deliver watch events until the server ends the stream: the last resourceVersion seen,
        and how many events came."""
        response = self._api.watch_nodes(
            resource_version, self._timeout_seconds, self._metadata_only
        )
        with self._lock:
            if self._stopping.is_set():
                release(response)
                return resource_version, 0
            self._response = response
        delivered = 0
        try:
            for batch in lines(response):
                changes: list[tuple[str, NodeState | None]] = []
                try:
                    for line in batch:
                        try:
                            event = self._decoder.event(line)
                        except DecodeError as err:
                            log.warning("Skipped a node watch event that cannot be read: %s", err)
                            continue
                        if event.type == "ERROR":
                            raise _WatchEnded(event.error)
                        if event.node is not None:
                            change = self._change(event.type, event.node)
                            if change is not None:
                                changes.append(change)
                        resource_version = event.resource_version
                        delivered += 1
                finally:
                    # What came before a failure is delivered, and resumed after.
                    if changes:
                        self._post(self._queue.put_all, changes)
        finally:
            with self._lock:
                self._response = None
            # A stream left early still has unread bytes: never return it to the pool.
            release(response)
        return resource_version, delivered
