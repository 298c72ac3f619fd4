"""The Kubernetes API's JSON, decoded into only what the agent reads.

A real Node is about 10 KB of JSON (images, conditions, managed fields); the agent reads its
name, UID and resourceVersion, flannel's annotations and its podCIDR(s). msgspec structs name
those fields and its C decoder skips the rest without building it: 5 000 realistic Nodes
(52 MB) take about 0.1 s against 1.7 s for ``json.loads`` (bench/bench_kube_scale.py). The
annotation struct names the keys of the configured ``--kube-annotation-prefix`` alone, so
other annotations are skipped too.

Documents from outside stay bounded. Their size is the client's: every answer is read up to
a limit before it is decoded (client.py, ``read_limited``). Their depth is msgspec's: its
decoder counts each level of nesting, skipped ones too, against Python's recursion limit and
raises RecursionError past it (at about 1 000 levels; a Node nests about 10), which is turned
into a DecodeError here. A document that is not JSON, or holds the wrong type where a named
field is, is a DecodeError too.

In a list, a Node whose named fields have the wrong type costs only itself: the page is
decoded again item by item, and that Node comes out as an ``UnreadableNode``, which the lease
tracker keeps at its last good lease (nodes.py).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Any, Generic, TypeVar

import msgspec

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.nodes import Node, UnreadableNode

A = TypeVar("A")

# What msgspec raises for a document it cannot decode into the structs.
_FAILURES = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


class DecodeError(PyflannelError, ValueError):
    """An answer that is not the JSON the agent reads."""


class _Metadata(msgspec.Struct, Generic[A]):
    name: str = ""
    uid: str = ""
    resourceVersion: str = ""
    annotations: A | None = None


class _Spec(msgspec.Struct):
    podCIDR: str = ""
    podCIDRs: list[str] = []


class _Object(msgspec.Struct, Generic[A]):
    """A Node, its PartialObjectMetadata (no spec), or a watch's Status (code, reason, message:
    a Node has none of the three at its top)."""

    metadata: _Metadata[A] | None = None
    spec: _Spec | None = None
    code: int | None = None
    reason: str = ""
    message: str = ""


class _Event(msgspec.Struct, Generic[A]):
    type: str
    object: _Object[A]


class _ListMetadata(msgspec.Struct):
    resourceVersion: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class _Page(msgspec.Struct, Generic[A]):
    metadata: _ListMetadata = msgspec.field(default_factory=_ListMetadata)
    items: list[_Object[A]] = []


class _RawPage(msgspec.Struct):
    """A page whose Nodes are decoded one by one."""

    metadata: _ListMetadata = msgspec.field(default_factory=_ListMetadata)
    items: list[msgspec.Raw] = []


class _Name(msgspec.Struct):
    name: str = ""


class _Named(msgspec.Struct):
    """What is left to read of a Node whose fields cannot be decoded: its name, if that."""

    metadata: _Name | None = None


class DecodedNode(msgspec.Struct, frozen=True, gc=False):
    """A Node as the agent reads it. ``cidrs`` is (podCIDR, *podCIDRs), "" for a podCIDR not
    set; None when the answer had no spec (metadata only). ``annotations`` is the values of
    flannel's keys, in ``Annotations`` field order (None: absent)."""

    name: str
    uid: str
    resource_version: str
    annotations: tuple[str | None, ...]
    cidrs: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One event of a watch: ``node`` for ADDED, MODIFIED and DELETED; ``error`` (the Status's
    code, reason and message) for ERROR; neither for BOOKMARK."""

    type: str
    resource_version: str
    node: DecodedNode | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class NodePage:
    nodes: list[DecodedNode | UnreadableNode]
    resource_version: str
    continue_token: str


_astuple = msgspec.structs.astuple


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes | bytearray | memoryview) -> Any:
    try:
        return decoder.decode(data)
    except _FAILURES as err:
        raise DecodeError(_reason(err)) from None


def _reason(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "nested too deep"
    return str(err)


class NodeDecoder:
    """Decoders for one annotation prefix. Thread-safe (msgspec's decoders keep no state)."""

    def __init__(self, keys: Annotations) -> None:
        self.keys = keys
        self._keys = astuple(keys)
        self._unset = (None,) * len(self._keys)
        fields = [(field, str | None, None) for field in keys.__dataclass_fields__]
        rename = dict(zip(keys.__dataclass_fields__, self._keys, strict=True))
        # gc=False: its fields are strings only, so it can be in no reference cycle.
        flannel = msgspec.defstruct("FlannelAnnotations", fields, rename=rename, gc=False)
        self._object = msgspec.json.Decoder(_Object[flannel])  # type: ignore[valid-type]
        self._event = msgspec.json.Decoder(_Event[flannel])  # type: ignore[valid-type]
        self._page = msgspec.json.Decoder(_Page[flannel])  # type: ignore[valid-type]
        self._raw_page = msgspec.json.Decoder(_RawPage)
        self._named = msgspec.json.Decoder(_Named)

    def node(self, data: bytes | bytearray) -> DecodedNode:
        """One Node (or its PartialObjectMetadata). Raises DecodeError."""
        obj = _decode(self._object, data)
        if obj.metadata is None:
            raise DecodeError("a Node without metadata")
        return self._node(obj.metadata, obj.spec)

    def page(self, data: bytes | bytearray) -> NodePage:
        """One page of a NodeList. Raises DecodeError when the page itself cannot be read; a
        Node in it that cannot comes out as an UnreadableNode."""
        nodes: list[DecodedNode | UnreadableNode]
        try:
            page = self._page.decode(data)
            metadata: _ListMetadata = page.metadata
            nodes = [self._listed(item) for item in page.items]
        except msgspec.ValidationError:
            # A field of the wrong type: read the page again, one Node at a time.
            raw: _RawPage = _decode(self._raw_page, data)
            metadata = raw.metadata
            nodes = [self._item(item) for item in raw.items]
        except _FAILURES as err:
            raise DecodeError(_reason(err)) from None
        if not metadata.resourceVersion:
            raise DecodeError("a NodeList without a resourceVersion")
        return NodePage(nodes, metadata.resourceVersion, metadata.continue_)

    def event(self, line: bytes) -> WatchEvent:
        """One line of a watch. Raises DecodeError."""
        event = _decode(self._event, line)
        obj = event.object
        if event.type == "ERROR":
            return WatchEvent(event.type, "", error=f"{obj.code} {obj.reason}: {obj.message}")
        if obj.metadata is None or not obj.metadata.resourceVersion:
            raise DecodeError(f"a {event.type} event without a resourceVersion")
        node = None if event.type == "BOOKMARK" else self._node(obj.metadata, obj.spec)
        return WatchEvent(event.type, obj.metadata.resourceVersion, node)

    def slim(self, node: DecodedNode, cidrs: tuple[str, ...]) -> Node:
        """The node as nodes.py reads one: its name, flannel's annotations and podCIDR(s)."""
        annotations = {
            k: v for k, v in zip(self._keys, node.annotations, strict=True) if v is not None
        }
        spec: dict[str, Any] = {"podCIDR": cidrs[0]} if cidrs[0] else {}
        if cidrs[1:]:
            spec["podCIDRs"] = list(cidrs[1:])
        return {"metadata": {"name": node.name, "annotations": annotations}, "spec": spec}

    def _node(self, metadata: _Metadata[Any], spec: _Spec | None) -> DecodedNode:
        annotations = metadata.annotations
        values = self._unset if annotations is None else _astuple(annotations)
        cidrs = None if spec is None else (spec.podCIDR, *spec.podCIDRs)
        return DecodedNode(metadata.name, metadata.uid, metadata.resourceVersion, values, cidrs)

    def _listed(self, item: _Object[Any]) -> DecodedNode | UnreadableNode:
        if item.metadata is None:
            return UnreadableNode("", "a Node without metadata")
        return self._node(item.metadata, item.spec or _Spec())

    def _item(self, raw: msgspec.Raw) -> DecodedNode | UnreadableNode:
        try:
            return self._listed(self._object.decode(raw))
        except _FAILURES as err:
            try:
                named = self._named.decode(raw)
            except _FAILURES:
                named = _Named()
            name = named.metadata.name if named.metadata is not None else ""
            return UnreadableNode(name, _reason(err))
