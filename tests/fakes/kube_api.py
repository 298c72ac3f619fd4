"""TEST DOUBLE of the Kubernetes API server's Node API. Used only by tests.

No kube-apiserver can run on the test machines, so this stands in for the slice of it flannel
uses, faithfully enough to be driven by the real ``kubernetes`` Python client:

* ``GET /api/v1/nodes``: a NodeList with ``metadata.resourceVersion``; with ``limit=N`` in
  pages of N from one consistent snapshot (``metadata.continue`` names the next page,
  ``remainingItemCount`` counts what is left; a continue token older than the retained history
  is ``410 Expired``).
* Metadata-only answers as the real server negotiates them from the Accept header (clauses in
  order, the first one servable wins; none servable is ``406 NotAcceptable``):
  ``application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`` for a list,
  ``...;as=PartialObjectMetadata;...`` for a watch (each event's object) and for one node.
* ``GET /api/v1/nodes?watch=true&resourceVersion=N[&timeoutSeconds=S]``: a chunked stream of
  ``{"type":"ADDED|MODIFIED|DELETED","object":{...}}`` lines for every change after N. Without
  N (or with ``0``) it first sends ADDED for every node, as the real server does. When N is
  older than the retained history (see ``compact``) the stream carries one ERROR event with a
  ``410 Expired`` Status (or, with ``gone_as_http_status``, the request fails with HTTP 410).
* ``GET /api/v1/nodes/<name>`` (``?resourceVersion=0`` too) and
  ``GET /api/v1/namespaces/<ns>/pods/<name>``; unknown objects get a 404 Status.
* ``PATCH /api/v1/nodes/<name>`` and ``/api/v1/nodes/<name>/status`` with
  ``application/strategic-merge-patch+json`` (maps merge, ``null`` deletes, lists with a patch
  merge key such as ``status.conditions``/``type`` merge by that key) or
  ``application/merge-patch+json`` (RFC 7386). As in the real server, the status subresource
  keeps the old spec and the main resource keeps the old status, metadata changes are kept by
  both, annotation keys are validated, and a patch that changes nothing writes nothing.
* Every write bumps one cluster-wide, monotonically increasing resourceVersion.

Test-side controls: add/update/delete nodes and pods (``add_node_object`` takes a whole Node,
as big as real ones), ``compact`` the history (now, or amid a paged list with
``compact_after_pages``), ``hold_watches`` (an outage of the watch endpoint),
``cut_next_event`` (a watch stream broken in the middle of an event), ``restart`` (a new
resourceVersion history, as an API server on a restored or new etcd has), ``fail_next``
(inject error responses), a record of every request (method, path, query, content type,
Accept, body bytes, Authorization header) and the bytes sent per kind of answer
(``bytes_sent``).

Authorization, as RBAC enforces it: with ``tokens`` (bearer token -> a ``Subject``: a user name
and the rules its roles grant), a request without a known token is 401 Unauthorized and one its
rules do not allow is 403 Forbidden, with the API server's Status messages. Without ``tokens``
every request is allowed, as with an anonymous admin. ``FLANNEL_AGENT_RULES`` is the
least-privilege ClusterRole docs/operating.md gives the agents.

A watch from a resourceVersion newer than the server's (after a ``restart`` with a lower
history) waits briefly for it, then carries one ERROR event: 504 Timeout, "Too large resource
version", cause ResourceVersionTooLarge, as kube-apiserver's watch cache answers.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import json
import re
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"

# Lists of v1.Node that strategic merge combines instead of replacing: merge key, or None for
# lists of scalars (patchStrategy "merge" without a key).
_MERGE_LISTS: dict[tuple[str, ...], str | None] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,
    ("spec", "podCIDRs"): None,
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_PREFIX_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


@dataclass(frozen=True)
class Rule:
    """An RBAC PolicyRule of the core API group: these verbs on these resources (a subresource
    is ``nodes/status``)."""

    resources: frozenset[str]
    verbs: frozenset[str]

    def allows(self, verb: str, resource: str) -> bool:
        return resource in self.resources and verb in self.verbs


@dataclass(frozen=True)
class Subject:
    """Who a bearer token authenticates, and what its roles allow."""

    user: str
    rules: tuple[Rule, ...]

    def allows(self, verb: str, resource: str) -> bool:
        return any(rule.allows(verb, resource) for rule in self.rules)


# The agents' least-privilege ClusterRole (docs/operating.md, "Kubernetes RBAC"): read and watch the
# nodes, patch only their status subresource (flannel's annotations and NetworkUnavailable).
# flannel's own manifest adds pods: get, which only an agent without NODE_NAME needs.
FLANNEL_AGENT_RULES = (
    Rule(frozenset({"nodes"}), frozenset({"get", "list", "watch"})),
    Rule(frozenset({"nodes/status"}), frozenset({"patch"})),
)
FLANNEL_AGENT = Subject("system:serviceaccount:kube-flannel:flannel", FLANNEL_AGENT_RULES)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    content_type: str
    body: bytes
    authorization: str = ""
    accept: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


class ApiError(Exception):
    """An API failure answered with a Status object."""

    def __init__(self, code: int, reason: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})


def _expired(requested: int, oldest: int) -> ApiError:
    return ApiError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def _too_large(requested: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def _unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def _forbidden(user: str, verb: str, resource: str, name: str) -> ApiError:
    kind = resource.partition("/")[0]
    target = f'{kind} "{name}"' if name else kind
    details: dict[str, Any] = {"kind": kind}
    if name:
        details = {"name": name, **details}
    return ApiError(
        403,
        "Forbidden",
        f'{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        'in API group "" at the cluster scope',
        details,
    )


def _continue_expired() -> ApiError:
    return ApiError(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You "
        "can start a new list without the continue parameter.",
    )


PARTIAL = "PartialObjectMetadata"
PARTIAL_LIST = "PartialObjectMetadataList"
_ACCEPTED = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def negotiate(accept: str, list_call: bool) -> bool | None:
    """Whether the answer is metadata only (True), whole objects (False), or nothing servable
    (None): the first Accept clause that can be served wins, as the real server picks them.
    A list answers as PartialObjectMetadataList, a watch (per event) or a GET as
    PartialObjectMetadata, each of meta.k8s.io/v1."""
    for clause in (accept or "application/json").split(","):
        kind, *params = (part.strip() for part in clause.split(";"))
        options = dict(p.split("=", 1) for p in params if "=" in p)
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        target = options.get("as")
        if target is None:
            return False
        wanted = PARTIAL_LIST if list_call else PARTIAL
        if target == wanted and options.get("g") == "meta.k8s.io" and options.get("v") == "v1":
            return True
    return None


def partial(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": PARTIAL, "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubeApi:
    """TEST DOUBLE of kube-apiserver's Node API on ``host`` (127.0.0.1 by default), ephemeral port.

    Built inside a network namespace (e.g. via ``netlink.netns.run_in_netns``), its listening
    socket belongs to that namespace while it is served from this process."""

    def __init__(
        self,
        *,
        first_resource_version: int = 1000,
        gone_as_http_status: bool = False,
        host: str = "127.0.0.1",
        tokens: Mapping[str, Subject] | None = None,
        too_large_wait: float = 3.0,
        tls: ssl.SSLContext | None = None,
    ):
        """``tls``: serve HTTPS with this server-side context (it may require client
        certificates, as the real server does for its clients' credentials)."""
        self._cond = threading.Condition()
        self._rv = first_resource_version
        self._floor = first_resource_version  # watches may start at this RV or later
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._requests: list[RecordedRequest] = []
        self._failures: list[tuple[str, str, int]] = []
        self._snapshots: dict[int, dict[str, dict[str, Any]]] = {}  # list RV -> nodes
        self._compact_after_pages: int | None = None
        self._encoded: dict[tuple[str, str, bool], bytes] = {}  # (name, RV, partial) -> JSON
        self._sent: dict[str, int] = {}
        self._held = False
        self._stream_generation = 0
        # Per open watch stream, the resourceVersion of the last event it wrote.
        self._delivered: dict[int, int] = {}
        self._delivery = threading.Condition()
        self._stopping = False
        self._cuts = 0
        self.gone_as_http_status = gone_as_http_status
        self.tokens = dict(tokens) if tokens is not None else None
        self.too_large_wait = too_large_wait
        self._server = ThreadingHTTPServer((host, 0), _Handler)
        self._scheme = "https" if tls else "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def start(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test-side controls -------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def add_node(
        self,
        name: str,
        *,
        pod_cidr: str | None = None,
        pod_cidrs: list[str] | None = None,
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a node; ``annotations=None`` leaves the map out entirely."""
        metadata: dict[str, Any] = {"name": name, "uid": str(uuid.uuid4())}
        if labels is not None:
            metadata["labels"] = dict(labels)
        if annotations is not None:
            metadata["annotations"] = dict(annotations)
        spec: dict[str, Any] = {}
        if pod_cidr is not None:
            spec["podCIDR"] = pod_cidr
            spec["podCIDRs"] = list(pod_cidrs) if pod_cidrs is not None else [pod_cidr]
        node = {"metadata": metadata, "spec": spec, "status": {"conditions": []}}
        with self._cond:
            if name in self._nodes:
                raise ValueError(f"node {name} exists")
            metadata["creationTimestamp"] = _now()
            return copy.deepcopy(self._write(name, node, "ADDED"))

    def add_node_object(self, node: Mapping[str, Any]) -> None:
        """Create a node from a whole Node object (its metadata.name, uid and timestamps kept;
        the resourceVersion set here)."""
        obj = copy.deepcopy(dict(node))
        name = obj["metadata"]["name"]
        with self._cond:
            if name in self._nodes:
                raise ValueError(f"node {name} exists")
            self._write(name, obj, "ADDED")

    def update_node(self, name: str, mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Change a node as another client would (one MODIFIED event if anything changed)."""
        with self._cond:
            node = copy.deepcopy(self._require_node(name))
            mutate(node)
            return copy.deepcopy(self._store_if_changed(name, node))

    def annotate(self, name: str, changes: Mapping[str, str | None]) -> dict[str, Any]:
        """Set annotations; ``None`` removes one."""

        def apply(node: dict[str, Any]) -> None:
            annotations = node["metadata"].setdefault("annotations", {})
            for key, value in changes.items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value

        return self.update_node(name, apply)

    def delete_node(self, name: str) -> None:
        with self._cond:
            node = self._nodes.pop(name, None)
            if node is None:
                raise _not_found("nodes", name)
            self._rv += 1
            gone = copy.deepcopy(node)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._history.append((self._rv, "DELETED", gone))
            self._cond.notify_all()

    def node(self, name: str) -> dict[str, Any] | None:
        with self._cond:
            node = self._nodes.get(name)
            return copy.deepcopy(node) if node is not None else None

    def add_pod(self, namespace: str, name: str, node_name: str) -> None:
        with self._cond:
            self._rv += 1
            self._pods[(namespace, name)] = {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "resourceVersion": str(self._rv),
                },
                "spec": {
                    "containers": [{"name": "kube-flannel", "image": "flannel:test"}],
                    **({"nodeName": node_name} if node_name else {}),
                },
                "status": {},
            }

    def compact(self) -> None:
        """Forget the change history: watches from any earlier resourceVersion get 410, and
        so do continue tokens of lists made before."""
        with self._cond:
            self._history.clear()
            self._snapshots.clear()
            self._encoded.clear()
            self._floor = self._rv
            self._cond.notify_all()

    def compact_after_pages(self, pages: int) -> None:
        """``compact`` once the next ``pages`` pages of node lists are served, as etcd's
        compaction can come while a client reads a list in pages: its next continue is 410."""
        with self._cond:
            self._compact_after_pages = pages

    @contextlib.contextmanager
    def hold_watches(self) -> Iterator[None]:
        """A watch outage: open streams end now; new watch requests wait until the block exits."""
        with self._cond:
            self._held = True
            self._stream_generation += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()

    def cut_next_event(self, streams: int = 1) -> None:
        """The next event on each of the next ``streams`` watch streams is broken off half-way:
        half of its line, then the connection closes (no end of the chunked body)."""
        with self._cond:
            self._cuts += streams

    def _take_cut(self) -> bool:
        with self._cond:
            if self._cuts <= 0:
                return False
            self._cuts -= 1
            return True

    def restart(self, first_resource_version: int) -> None:
        """The server restarts on a store with another history: open watch streams end, the
        history starts again from ``first_resource_version`` (lower or higher than before),
        and every node gets a resourceVersion of it. Watches from the old history then get 410
        Gone (older than the new history) or, until it catches up, "Too large resource
        version" (newer than it)."""
        with self._cond:
            self._stream_generation += 1
            self._history.clear()
            self._snapshots.clear()
            self._encoded.clear()
            self._rv = self._floor = first_resource_version
            for name in sorted(self._nodes):
                self._rv += 1
                # A new object: stored ones are never changed (events and pages share them).
                node = self._nodes[name]
                metadata = {**node["metadata"], "resourceVersion": str(self._rv)}
                self._nodes[name] = {**node, "metadata": metadata}
            self._cond.notify_all()

    def end_watches(self) -> None:
        """End every open watch stream normally, as a server-side timeout would."""
        with self._cond:
            self._stream_generation += 1
            self._cond.notify_all()

    def wait_for_watches(self, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` watch streams are open (test synchronisation)."""
        with self._delivery:
            if not self._delivery.wait_for(lambda: len(self._delivered) >= count, timeout):
                raise TimeoutError(f"{len(self._delivered)} watch streams open, wanted {count}")

    def node_list_json(self) -> bytes:
        """The whole NodeList in one body, as a list call without a limit gets it."""
        return self._list_nodes({}, metadata_only=False)

    def wait_delivered(self, resource_version: int, timeout: float = 10.0) -> None:
        """Wait until every open watch stream has written its events up to
        ``resource_version`` to its client. A writer in this process that waits for it leaves
        the double's fan-out to run as it would in the real API server, outside the writer."""
        with self._delivery:
            if not self._delivery.wait_for(
                lambda: all(rv >= resource_version for rv in self._delivered.values()), timeout
            ):
                raise TimeoutError(f"watch events up to {resource_version} not written")

    def _watch_delivered(self, stream: int, resource_version: int | None) -> None:
        with self._delivery:
            if resource_version is None:
                self._delivered.pop(stream, None)
            else:
                self._delivered[stream] = resource_version
            self._delivery.notify_all()

    def fail_next(self, method: str, path: str, code: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` requests for exactly (method, path) with an error Status."""
        with self._cond:
            self._failures.extend([(method, path, code)] * times)

    def requests(self, method: str | None = None, path: str | None = None) -> list[RecordedRequest]:
        with self._cond:
            return [
                r
                for r in self._requests
                if (method is None or r.method == method) and (path is None or r.path == path)
            ]

    def clear_requests(self) -> None:
        with self._cond:
            self._requests.clear()

    def bytes_sent(self, kind: str) -> int:
        """Bytes of response bodies so far, by kind: "list", "watch", "get", "patch"."""
        with self._cond:
            return self._sent.get(kind, 0)

    def count_sent(self, kind: str, size: int) -> None:
        with self._cond:
            self._sent[kind] = self._sent.get(kind, 0) + size

    # --- the store (call with the lock held) --------------------------------------------------

    def _require_node(self, name: str) -> dict[str, Any]:
        node = self._nodes.get(name)
        if node is None:
            raise _not_found("nodes", name)
        return node

    def _write(self, name: str, node: dict[str, Any], kind: str) -> dict[str, Any]:
        self._rv += 1
        node["metadata"]["resourceVersion"] = str(self._rv)
        self._nodes[name] = node
        self._history.append((self._rv, kind, node))  # never changed once stored
        self._cond.notify_all()
        return node

    def _store_if_changed(self, name: str, node: dict[str, Any]) -> dict[str, Any]:
        old = self._nodes[name]
        node["metadata"]["name"] = name
        node["metadata"]["uid"] = old["metadata"]["uid"]
        node["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if node == old:
            return old
        return self._write(name, node, "MODIFIED")

    # --- request handling (called from handler threads) ---------------------------------------

    def _record(self, request: RecordedRequest) -> int | None:
        with self._cond:
            self._requests.append(request)
            for i, (method, path, code) in enumerate(self._failures):
                if method == request.method and path == request.path:
                    del self._failures[i]
                    return code
        return None

    def _list_nodes(self, query: Mapping[str, list[str]], metadata_only: bool) -> bytes:
        """The NodeList (or one page of it) as JSON; the item encodings are cached per
        resourceVersion, as 5 000 realistic nodes are ~50 MB of JSON."""
        limit = int(query.get("limit", ["0"])[0] or 0)
        token = query.get("continue", [""])[0]
        with self._cond:
            if token:
                try:
                    state = json.loads(base64.b64decode(token))
                    rv, after = int(state["rv"]), str(state["start"])
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "continue key is not valid") from None
                if rv < self._floor or rv not in self._snapshots:
                    raise _continue_expired()
                nodes = self._snapshots[rv]
            else:
                rv, after, nodes = self._rv, "", dict(self._nodes)
            names = [n for n in sorted(nodes) if n > after]
            page = names[:limit] if limit > 0 else names
            items = [self._encode(nodes[n], metadata_only) for n in page]
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if len(page) < len(names):
                self._snapshots[rv] = nodes
                next_token = json.dumps({"rv": rv, "start": page[-1]}).encode()
                metadata["continue"] = base64.b64encode(next_token).decode()
                metadata["remainingItemCount"] = len(names) - len(page)
            if self._compact_after_pages is not None:
                self._compact_after_pages -= 1
                if self._compact_after_pages == 0:
                    self._compact_after_pages = None
                    self.compact()
        kind = PARTIAL_LIST if metadata_only else "NodeList"
        api_version = "meta.k8s.io/v1" if metadata_only else "v1"
        head = json.dumps(
            {"kind": kind, "apiVersion": api_version, "metadata": metadata},
            separators=(",", ":"),
        ).encode()
        return head[:-1] + b',"items":[' + b",".join(items) + b"]}"

    def _encode(self, node: dict[str, Any], metadata_only: bool) -> bytes:
        """One item's JSON (call with the lock held)."""
        key = (node["metadata"]["name"], node["metadata"]["resourceVersion"], metadata_only)
        data = self._encoded.get(key)
        if data is None:
            obj = partial(node) if metadata_only else _typed("Node", node)
            data = self._encoded[key] = json.dumps(obj, separators=(",", ":")).encode()
        return data

    def _get_node(self, name: str) -> dict[str, Any]:
        with self._cond:
            return _typed("Node", copy.deepcopy(self._require_node(name)))

    def _get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self._cond:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise _not_found("pods", name)
            return _typed("Pod", copy.deepcopy(pod))

    def _patch_node(self, name: str, subresource: str, content_type: str, body: bytes) -> Any:
        if content_type not in (STRATEGIC_MERGE, MERGE_PATCH):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json",
            )
        try:
            patch = json.loads(body)
        except ValueError as err:
            raise ApiError(400, "BadRequest", f"error decoding patch: {err}") from None
        if not isinstance(patch, dict):
            raise ApiError(400, "BadRequest", "patch is not a JSON object")
        with self._cond:
            old = self._require_node(name)
            wanted = patch.get("metadata", {}).get("resourceVersion")
            if wanted is not None and wanted != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            if content_type == STRATEGIC_MERGE:
                new = strategic_merge(old, patch)
            else:
                new = json_merge(old, patch)
            # The status subresource writes status and metadata only; the main resource all
            # but status (the real server's node strategies).
            kept = "spec" if subresource == "status" else "status"
            if kept in old:
                new[kept] = copy.deepcopy(old[kept])
            else:
                new.pop(kept, None)
            _validate_node(name, new)
            return _typed("Node", copy.deepcopy(self._store_if_changed(name, new)))

    def _watch_start(self, since: str | None) -> tuple[int, list[tuple[str, dict[str, Any]]]]:
        """Where a new watch starts, and the synthetic ADDED events it begins with."""
        with self._cond:
            self._cond.wait_for(lambda: not self._held or self._stopping)
            if since in (None, "", "0"):
                initial = [("ADDED", self._nodes[n]) for n in sorted(self._nodes)]
                return self._rv, initial
            try:
                cursor = int(since)  # type: ignore[arg-type]
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resource version: {since}") from None
            if cursor < self._floor:
                raise _expired(cursor, self._floor)
            # The watch cache waits a moment for a resourceVersion it has not reached.
            self._cond.wait_for(lambda: self._rv >= cursor or self._stopping, self.too_large_wait)
            if cursor > self._rv:
                raise _too_large(cursor, self._rv)
            return cursor, []

    def _authorize(self, request: RecordedRequest) -> None:
        """RBAC, when tokens are set: 401 without a known bearer token, 403 when its rules do
        not allow the request's verb on its resource."""
        if self.tokens is None:
            return
        scheme, _, token = request.authorization.partition(" ")
        subject = self.tokens.get(token) if scheme.lower() == "bearer" else None
        if subject is None:
            raise _unauthorized()
        verb, resource, name = _access(request)
        if not subject.allows(verb, resource):
            raise _forbidden(subject.user, verb, resource, name)

    def _watch_next(
        self, cursor: int, generation: int, deadline: float, still_open: Callable[[], bool]
    ) -> list[tuple[int, str, dict[str, Any]]] | None:
        """The events after ``cursor`` (waiting for some), or None when the stream must end."""
        with self._cond:
            while True:
                if self._stopping or generation != self._stream_generation:
                    return None
                if cursor < self._floor:
                    raise _expired(cursor, self._floor)
                # Stored objects are never changed, so the events go out as they are.
                events = self._history[bisect.bisect_right(self._history, cursor, key=_rv) :]
                if events:
                    return events
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, 0.2))
                if not still_open():
                    return None


def _rv(event: tuple[int, str, dict[str, Any]]) -> int:
    return event[0]


_VERBS = {"GET": "get", "PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}


def _access(request: RecordedRequest) -> tuple[str, str, str]:
    """The RBAC verb, resource (``nodes/status`` for the subresource) and object name."""
    verb = _VERBS.get(request.method, request.method.lower())
    if request.path == "/api/v1/nodes":
        watching = request.query.get("watch", [""])[0] in ("true", "1")
        return ("watch" if watching else "list") if verb == "get" else verb, "nodes", ""
    node = _NODE_PATH.fullmatch(request.path)
    if node is not None:
        resource = "nodes/status" if node.group(2) else "nodes"
        return verb, resource, unquote(node.group(1))
    pod = _POD_PATH.fullmatch(request.path)
    if pod is not None:
        return verb, "pods", unquote(pod.group(2))
    return verb, request.path, ""


def _typed(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": "v1", **obj}


def _validate_node(name: str, node: dict[str, Any]) -> None:
    annotations = node.get("metadata", {}).get("annotations") or {}
    problems = []
    for key, value in annotations.items():
        prefix, slash, short = key.rpartition("/")
        if not isinstance(value, str):
            problems.append(f"metadata.annotations[{key}]: Invalid value: must be a string")
        if (slash and not _QUALIFIED_PREFIX_RE.fullmatch(prefix)) or not (
            len(short) <= 63 and _QUALIFIED_NAME_RE.fullmatch(short)
        ):
            problems.append(f"metadata.annotations: Invalid value: {json.dumps(key)}")
    if problems:
        raise ApiError(422, "Invalid", f'Node "{name}" is invalid: ' + ", ".join(problems))


# --- patch semantics ------------------------------------------------------------------------


def json_merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Kubernetes strategic merge patch over a v1.Node (the subset of directives a client
    like flannel or kubectl sends: null deletes, merge-keyed lists, ``$patch`` delete/replace,
    ``$deleteFromPrimitiveList``, ``$setElementOrder`` and ``$retainKeys`` ignored)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field, []) if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and (*path, key) in _MERGE_LISTS:
            result[key] = _merge_list(result.get(key) or [], value, _MERGE_LISTS[(*path, key)])
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value, (*path, key))
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list(current: list[Any], patch: list[Any], merge_key: str | None) -> list[Any]:
    result = copy.deepcopy(current)
    if merge_key is None:
        return result + [v for v in patch if v not in result]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(400, "BadRequest", f"map: {item} does not contain declared merge key")
        index = next((i for i, e in enumerate(result) if e.get(merge_key) == item[merge_key]), -1)
        if item.get("$patch") == "delete":
            if index >= 0:
                del result[index]
        elif index >= 0:
            result[index] = strategic_merge(result[index], item)
        else:
            result.append(strategic_merge({}, item))
    return result


# --- HTTP -----------------------------------------------------------------------------------

_NODE_PATH = re.compile(r"/api/v1/nodes/([^/]+)(/status)?")
_POD_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver"

    @property
    def fake(self) -> FakeKubeApi:
        fake: FakeKubeApi = self.server.fake  # type: ignore[attr-defined]
        return fake

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        authorization = self.headers.get("Authorization") or ""
        accept = self.headers.get("Accept") or ""
        request = RecordedRequest(
            self.command, url.path, query, content_type, body, authorization, accept
        )
        injected = self.fake._record(request)
        try:
            self.fake._authorize(request)
            if injected is not None:
                raise ApiError(injected, HTTPStatus(injected).phrase.replace(" ", ""), "injected")
            self._route(request)
        except ApiError as err:
            self._send_json(err.code, err.status())

    def _route(self, request: RecordedRequest) -> None:
        path, method, query = request.path, request.method, request.query
        node = _NODE_PATH.fullmatch(path)
        pod = _POD_PATH.fullmatch(path)
        if path == "/api/v1/nodes":
            self._only(method, "GET")
            watch = query.get("watch", [""])[0] in ("true", "1")
            metadata_only = self._negotiate(request.accept, list_call=not watch)
            if watch:
                self._watch(query, metadata_only)
            else:
                data = self.fake._list_nodes(query, metadata_only)
                self._send_bytes(200, data, "list", self._content_type(metadata_only, True))
        elif node is not None:
            name, status = unquote(node.group(1)), node.group(2)
            if method == "PATCH":
                obj = self.fake._patch_node(
                    name, "status" if status else "", request.content_type, request.body
                )
                self._send_json(200, obj, "patch")
            else:
                self._only(method, "GET")
                metadata_only = self._negotiate(request.accept, list_call=False)
                obj = self.fake._get_node(name)
                self._send_json(200, partial(obj) if metadata_only else obj, "get")
        elif pod is not None:
            self._only(method, "GET")
            self._send_json(200, self.fake._get_pod(unquote(pod.group(1)), unquote(pod.group(2))))
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _only(method: str, allowed: str) -> None:
        if method != allowed:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported by the double")

    @staticmethod
    def _negotiate(accept: str, list_call: bool) -> bool:
        metadata_only = negotiate(accept, list_call)
        if metadata_only is None:
            message = f"only the following media types are accepted: {_ACCEPTED}"
            raise ApiError(406, "NotAcceptable", message)
        return metadata_only

    @staticmethod
    def _content_type(metadata_only: bool, list_call: bool) -> str:
        if not metadata_only:
            return "application/json"
        return f"application/json;as={PARTIAL_LIST if list_call else PARTIAL};g=meta.k8s.io;v=v1"

    def _send_json(self, code: int, obj: Any, kind: str = "error") -> None:
        self._send_bytes(code, json.dumps(obj, separators=(",", ":")).encode(), kind)

    def _send_bytes(
        self, code: int, data: bytes, kind: str, content_type: str = "application/json"
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.fake.count_sent(kind, len(data))

    # --- watch --------------------------------------------------------------------------------

    def _client_open(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return True
        try:
            return self.connection.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        self.fake.count_sent("watch", len(data))

    def _event_line(self, kind: str, obj: dict[str, Any], metadata_only: bool) -> bytes:
        if kind == "ERROR":
            encoded = json.dumps(obj, separators=(",", ":")).encode()
        else:
            with self.fake._cond:
                encoded = self.fake._encode(obj, metadata_only)
        return b'{"type":"%s","object":%s}\n' % (kind.encode(), encoded)

    def _event(self, kind: str, obj: dict[str, Any], metadata_only: bool = False) -> None:
        self._chunk(self._event_line(kind, obj, metadata_only))

    def _cut(self, kind: str, obj: dict[str, Any], metadata_only: bool) -> None:
        """Half an event, then the connection goes: no rest, no end of the chunked body."""
        line = self._event_line(kind, obj, metadata_only)
        self._chunk(line[: len(line) // 2])
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _watch(self, query: Mapping[str, list[str]], metadata_only: bool) -> None:
        fake = self.fake
        timeout = float(query.get("timeoutSeconds", ["1800"])[0])
        deadline = time.monotonic() + timeout
        try:
            cursor, initial = fake._watch_start(query.get("resourceVersion", [None])[0])
        except ApiError as err:
            if err.code not in (410, 504) or (err.code == 410 and fake.gone_as_http_status):
                raise
            initial, cursor = [("ERROR", err.status())], -1
        with fake._cond:
            generation = fake._stream_generation
        self.send_response(200)
        self.send_header("Content-Type", self._content_type(metadata_only, False))
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for kind, obj in initial:
                self._event(kind, obj, metadata_only)
            if cursor >= 0:  # the stream is open from here
                fake._watch_delivered(id(self), cursor)
            while cursor >= 0:
                try:
                    events = fake._watch_next(cursor, generation, deadline, self._client_open)
                except ApiError as err:
                    self._event("ERROR", err.status())
                    break
                if events is None:
                    break
                for rv, kind, obj in events:
                    if fake._take_cut():
                        self._cut(kind, obj, metadata_only)
                        return
                    self._event(kind, obj, metadata_only)
                    cursor = rv
                fake._watch_delivered(id(self), cursor)
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            fake._watch_delivered(id(self), None)
