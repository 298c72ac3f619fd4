"""Pure translations between Kubernetes Node objects (decoded JSON) and leases.

flannel-io/flannel pkg/subnet/kube/kube.go: AcquireLease, nodeToLease, handleUpdateLeaseEvent,
CompleteLease.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Any, TypeVar

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.gojson.core import GoJSONError
from pyflannel_runtime.gojson.strconv import go_quote
from pyflannel_runtime.gojson.structs import compact, loads_pairs
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.wire.lease import (
    ZERO_IPV4,
    EventType,
    Lease,
    LeaseAttrs,
    LeaseEvent,
    ipv4_int,
    ipv4_network,
    is_go_compact_object,
    parse_ipv4,
    same_lease,
)

log = logging.getLogger(__name__)

Node = Mapping[str, Any]
_Address = TypeVar("_Address", IPv4Address, IPv6Address)
_Network = TypeVar("_Network", IPv4Network, IPv6Network)

_PREFIX_LEN_RE = re.compile(r"[0-9]+")


class NodeLeaseError(PyflannelError, ValueError):
    """A node that cannot be turned into a lease; ``str()`` is flannel's message."""


@dataclass(frozen=True, slots=True)
class UnreadableNode:
    """A node whose answer could not be decoded (a field of the wrong type): its name, if that
    could be read, and why."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReadLease:
    """What a node makes as a lease, read where its answer was decoded (the node watch's
    thread: at 5 000 nodes, the leases of a listing take tens of milliseconds to make, which
    the event loop then need not spend). `lease` is None for a node that is not a flannel
    node; `error` says why a flannel node's annotations make no lease (flannel's message)."""

    name: str
    lease: Lease | None
    error: str = ""


def node_name(node: Node) -> str:
    return str(node.get("metadata", {}).get("name", ""))


def node_annotations(node: Node) -> Mapping[str, str]:
    return node.get("metadata", {}).get("annotations") or {}


def is_flannel_node(node: Node, keys: Annotations) -> bool:
    return node_annotations(node).get(keys.subnet_kube_managed) == "true"


def parse_cidr(text: str) -> IPv4Network | IPv6Network:
    """Go's net.ParseCIDR: ``addr/len`` with a decimal length; the host bits are masked off."""
    addr, _, length = text.partition("/")
    if not addr or _PREFIX_LEN_RE.fullmatch(length) is None:
        raise NodeLeaseError(f"invalid CIDR address: {text}")
    try:
        if ":" not in addr:  # no IPv6 address lacks one; thousands of nodes are listed at once
            return ipv4_network(ipv4_int(addr), int(length))
        return ip_network(f"{addr}/{int(length)}", strict=False)
    except ValueError:
        raise NodeLeaseError(f"invalid CIDR address: {text}") from None


def _spec_pod_cidrs(node: Node) -> list[str]:
    spec = node.get("spec") or {}
    cidrs = list(spec.get("podCIDRs") or [])
    return cidrs if cidrs else [spec.get("podCIDR") or ""]


def own_pod_cidrs(node: Node) -> tuple[IPv4Network | None, IPv6Network | None]:
    """AcquireLease's reading of the own node's podCIDR(s); the last of each family wins."""
    name = go_quote(node_name(node))
    spec = node.get("spec") or {}
    if not spec.get("podCIDR"):
        raise NodeLeaseError(f"node {name} pod cidr not assigned")
    cidrs = spec.get("podCIDRs") or []
    if len(cidrs) > 2:
        raise NodeLeaseError(f"node {name} pod cidrs should be IPv4/IPv6 only or dualstack")
    v4: IPv4Network | None = None
    v6: IPv6Network | None = None
    for text in cidrs or [spec["podCIDR"]]:
        cidr = parse_cidr(text)
        if isinstance(cidr, IPv4Network):
            v4 = cidr
        else:
            v6 = cidr
    return v4, v6


def node_to_lease(node: Node, keys: Annotations, enable_ipv4: bool, enable_ipv6: bool) -> Lease:
    """A peer's lease from its node object (flannel's nodeToLease)."""
    annotations = node_annotations(node)
    public_ip = ZERO_IPV4
    public_ipv6: IPv6Address | None = None
    backend_data: str | None = None
    backend_v6_data: str | None = None
    subnet: IPv4Network | None = None
    ipv6_subnet: IPv6Network | None = None
    if enable_ipv4:
        public_ip = _parse_ip(annotations.get(keys.public_ip, ""), parse_ipv4)
        backend_data = _raw_json(annotations.get(keys.backend_data, ""), keys.backend_data)
        subnet = _first_pod_cidr(node, IPv4Network, "missing IPv4 address on n.Spec.PodCIDRs")
    if enable_ipv6:
        public_ipv6 = _parse_ip(annotations.get(keys.public_ipv6, ""), IPv6Address)
        backend_v6_data = _raw_json(annotations.get(keys.backend_v6_data, ""), keys.backend_v6_data)
        ipv6_subnet = _first_pod_cidr(node, IPv6Network, "missing IPv6 address on n.Spec.PodCIDRs")
    attrs = LeaseAttrs(
        public_ip=public_ip,
        public_ipv6=public_ipv6,
        # One string for every peer's "vxlan", not one each.
        backend_type=sys.intern(annotations.get(keys.backend_type, "")),
        backend_data=backend_data,
        backend_v6_data=backend_v6_data,
    )
    return Lease(subnet, ipv6_subnet, attrs, enable_ipv4=enable_ipv4, enable_ipv6=enable_ipv6)


def _parse_ip(text: str, parse: Callable[[str], _Address]) -> _Address:
    try:
        return parse(text)
    except ValueError:
        raise NodeLeaseError(f"invalid IP address: {go_quote(text)}") from None


def _raw_json(text: str, key: str) -> str | None:
    """The annotation as compact JSON; absent and ``null`` (host-gw, udp) both mean no data."""
    if text in ("", "null"):
        return None
    if is_go_compact_object(text):
        # flannel's own encoding, as every flannel node writes it: kept as written, as flannel
        # keeps the annotation as a json.RawMessage. Thousands are read at start-up.
        return text
    try:
        return compact(loads_pairs(text))
    except GoJSONError:
        raise NodeLeaseError(f"annotation {key} is not valid JSON: {text}") from None


def _first_pod_cidr(node: Node, kind: type[_Network], missing: str) -> _Network:
    for text in _spec_pod_cidrs(node):
        if not text:
            continue
        cidr = parse_cidr(text)
        if isinstance(cidr, kind):
            return cidr
    raise NodeLeaseError(missing)


def read_lease(node: Node, keys: Annotations, enable_ipv4: bool, enable_ipv6: bool) -> ReadLease:
    """The node's lease as the tracker takes it (`NodeLeaseTracker.update`)."""
    name = node_name(node)
    if not is_flannel_node(node, keys):
        return ReadLease(name, None)
    try:
        return ReadLease(name, node_to_lease(node, keys, enable_ipv4, enable_ipv6))
    except NodeLeaseError as err:
        return ReadLease(name, None, str(err))


# --- AcquireLease: the annotations flannel wants on its own node ------------------------------


def annotation_changes(
    current: Mapping[str, str], attrs: LeaseAttrs, keys: Annotations
) -> dict[str, str]:
    """The annotations that must change on the own node, in sorted key order (the order Go's
    two-way merge patch marshals them in); empty when the node is already up to date."""
    data = attrs.backend_data or "null"  # Go marshals a nil json.RawMessage as null
    v6_data = attrs.backend_v6_data or "null"
    public_ip = str(attrs.public_ip)
    public_ipv6 = str(attrs.public_ipv6) if attrs.public_ipv6 is not None else ""

    def differs(key: str, want: str) -> bool:
        return current.get(key, "") != want

    def overwritten(key: str, local: str) -> bool:
        return current.get(key, "") not in ("", local)

    stale = (
        differs(keys.backend_data, data)
        or differs(keys.backend_type, attrs.backend_type)
        or differs(keys.public_ip, public_ip)
        or differs(keys.subnet_kube_managed, "true")
        or overwritten(keys.public_ip_overwrite, public_ip)
    )
    # flannel also checks the IPv6 keys when the node has a public IPv6. Every key the patch
    # can then carry is one of the keys checked, so the patch below, which keeps only what
    # differs, is empty exactly when those checks pass: they need not be repeated.
    if not stale and attrs.public_ipv6 is None:
        return {}

    backend = attrs.backend_type
    wanted = {keys.backend_type: backend}
    if not (backend == "vxlan" and data == "null"):
        wanted[keys.backend_data] = data
        wanted[keys.public_ip] = _advertised(
            current, keys.public_ip, keys.public_ip_overwrite, public_ip
        )
    has_v6 = attrs.public_ipv6 is not None
    if (
        (backend == "vxlan" and v6_data != "null")
        or (backend == "wireguard" and v6_data != "null" and has_v6)
        or (backend in ("host-gw", "extension") and has_v6)
    ):
        wanted[keys.backend_v6_data] = v6_data
        advertised = _advertised(current, keys.public_ipv6, keys.public_ipv6_overwrite, public_ipv6)
        if advertised:
            wanted[keys.public_ipv6] = advertised
    wanted[keys.subnet_kube_managed] = "true"
    return {key: wanted[key] for key in sorted(wanted) if current.get(key) != wanted[key]}


def _advertised(current: Mapping[str, str], key: str, overwrite_key: str, local: str) -> str:
    """The public IP peers should use: the user's overwrite annotation wins over the local IP."""
    overwrite = current.get(overwrite_key)
    if not overwrite:
        return local
    if current.get(key) != overwrite:
        log.info(
            "Overriding public ip with '%s' from node annotation '%s'", overwrite, overwrite_key
        )
    return overwrite


def annotations_patch(changes: Mapping[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": dict(changes)}}


def own_lease(
    v4: IPv4Network | None,
    v6: IPv6Network | None,
    attrs: LeaseAttrs,
    *,
    network: IPv4Network | None,
    ipv6_network: IPv6Network | None,
    enable_ipv4: bool,
    enable_ipv6: bool,
    backend_type: str,
    name: str,
    expiration: float,
) -> Lease:
    """The lease AcquireLease returns: the podCIDRs, checked against the configured networks.

    flannel leaves both family flags false for the dual-stack backends; here they say which
    families the lease really has.
    """
    subnet: IPv4Network | None = None
    ipv6_subnet: IPv6Network | None = None
    if v4 is not None and enable_ipv4:
        if network is None or not v4.subnet_of(network):
            raise NodeLeaseError(
                f"subnet {go_quote(str(network or '0.0.0.0/0'))} specified in the flannel net "
                f"config doesn't contain {go_quote(str(v4))} PodCIDR of the {go_quote(name)} node"
            )
        subnet = v4
    if v6 is not None and enable_ipv6:
        if ipv6_network is None or not v6.subnet_of(ipv6_network):
            raise NodeLeaseError(
                f"subnet {go_quote(str(ipv6_network or '::/0'))} specified in the flannel net "
                f"config doesn't contain {go_quote(str(v6))} IPv6 PodCIDR of the "
                f"{go_quote(name)} node"
            )
        ipv6_subnet = v6
    # A dual-stack backend's own lease keeps the config's families; the others are forced to v4.
    spec = specs.find(backend_type)
    if spec is not None and spec.dual_stack:
        flags = (subnet is not None, ipv6_subnet is not None)
    else:
        flags = (True, False)
    return Lease(
        subnet,
        ipv6_subnet,
        attrs,
        enable_ipv4=flags[0],
        enable_ipv6=flags[1],
        expiration=expiration,
    )


# --- CompleteLease ----------------------------------------------------------------------------


def network_available_patch(now: datetime) -> dict[str, Any]:
    """The NetworkUnavailable=False condition patch, fields in Go's NodeCondition order."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "NetworkUnavailable",
        "status": "False",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
        "reason": "FlannelIsUp",
        "message": "Flannel is running on this node",
    }
    return {"status": {"conditions": [condition]}}


# --- the peers' leases, one per node name -----------------------------------------------------


class NodeLeaseTracker:
    """The lease last reported for each flannel node, which makes the update filter (kube.go:
    handleUpdateLeaseEvent) exact: a node update is an event only when the lease it yields differs. Unlike flannel this
    notices changes to the v6 annotations and to the podCIDRs, and a node that stops being a
    flannel node (or is deleted) is a removal.

    A node whose annotations cannot be read keeps its last good lease (or none): one broken node
    never withdraws a peer.
    """

    def __init__(self, keys: Annotations, enable_ipv4: bool, enable_ipv6: bool) -> None:
        self._keys = keys
        self._families = (enable_ipv4, enable_ipv6)
        self._leases: dict[str, Lease] = {}

    def _lease_of(self, name: str, node: Node | UnreadableNode | ReadLease | None) -> Lease | None:
        """The node's lease; the previous one when the node cannot be read."""
        if isinstance(node, UnreadableNode):
            log.warning("Error reading node %s: %s", go_quote(name), node.reason)
            return self._leases.get(name)
        if node is None:
            return None
        read = (
            node if isinstance(node, ReadLease) else read_lease(node, self._keys, *self._families)
        )
        if read.error:
            log.warning("Error turning node %s to lease: %s", go_quote(name), read.error)
            return self._leases.get(name)
        return read.lease

    def update(self, name: str, node: Node | UnreadableNode | ReadLease | None) -> list[LeaseEvent]:
        old = self._leases.get(name)
        new = self._lease_of(name, node)
        if new is None:
            self._leases.pop(name, None)
            return [] if old is None else [LeaseEvent(EventType.REMOVED, old)]
        self._leases[name] = new
        if old is None:
            return [LeaseEvent(EventType.ADDED, new)]
        if same_lease(old, new):
            return []
        events = []
        if (old.subnet, old.ipv6_subnet) != (new.subnet, new.ipv6_subnet):
            events.append(LeaseEvent(EventType.REMOVED, old))
        events.append(LeaseEvent(EventType.ADDED, new))
        return events

    def reset(self, nodes: Iterable[Node | UnreadableNode | ReadLease]) -> tuple[Lease, ...]:
        """Start over from a full listing; returns the snapshot of the peers' leases."""
        leases: dict[str, Lease] = {}
        for node in nodes:
            name = node.name if isinstance(node, UnreadableNode | ReadLease) else node_name(node)
            lease = self._lease_of(name, node)
            if lease is not None:
                leases[name] = lease
        self._leases = leases
        return tuple(leases.values())
