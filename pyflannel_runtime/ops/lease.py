"""One node's lease, as an operator pins or releases it (the ``pyflannel.network.lease`` module,
``remove-node.yml``): read, compare, write, with check mode and a diff.

flannel answers a dead node's lease with "wait for the TTL" (24 h; flannel #954, and #875's
"out of subnets" comes from such leases). Releasing it at once is what an operator removing a
node wants: every peer's watch sees the deletion and drops the node's routes, neighbours and
FDB entries, and the subnet is free for the next node.

etcd: a node's lease is a key under ``<prefix>/subnets/``, found as the agent finds its own
(``subnet.allocation.find_own_lease``: by the IPv4 public IP, or the IPv6 one for a node
without IPv4) or by its subnet. Releasing deletes the key. A reservation (a key without an
etcd lease: flannel's Documentation/reservations.md) is the operator's own pin and is kept
unless ``release_reservation`` asks for it too; a kept reservation keeps the subnet taken and
the peers' routes to it. Pinning makes the node's subnet a reservation (``publish``).

Kubernetes: the lease is the node's podCIDR, advertised by flannel's annotations on the Node
object (``subnet/kube/kube.py``). The Node belongs to the cluster, so releasing removes only the
annotations flannel writes (``subnet.kube.annotations``); the operator's ``*-overwrite`` ones stay,
and so does the podCIDR, which is the cluster's to free (deleting the Node does).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.ops.publish import Reservation, publish, with_client
from pyflannel_runtime.subnet.etcd.client import EtcdClient, KeyValue, prefix_range_end
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.client import KubeApiError
from pyflannel_runtime.subnet.kube.kube import (
    API_ERRORS,
    KubeSettings,
    NodeApi,
    api_error_text,
    build_api_client,
)
from pyflannel_runtime.subnet.kube.nodes import node_annotations
from pyflannel_runtime.wire.lease import LeaseAttrs, LeaseError, parse_subnet_key

_NO_IPV4 = IPv4Network("0.0.0.0/0")
_UNSET_IP = IPv4Address(0)


class LeaseOpError(PyflannelError):
    """The change cannot be made: nothing names the node, or its subnet is another node's."""


@dataclass(frozen=True)
class NodeLease:
    """What a node's lease is known by: its public IPs and (when pinned) its subnets."""

    public_ip: IPv4Address | None = None
    public_ipv6: IPv6Address | None = None
    subnet: IPv4Network | None = None
    ipv6_subnet: IPv6Network | None = None

    def describe(self) -> str:
        known = [self.public_ip, self.public_ipv6, self.subnet, self.ipv6_subnet]
        return ", ".join(str(value) for value in known if value is not None)


@dataclass(frozen=True)
class LeaseChange:
    """One key (an etcd key, or a Node's flannel annotations): its value before and after
    (None: absent, or deleted), and whether it was (or, in check mode, would be) written."""

    key: str
    before: str | None
    after: str | None
    changed: bool


@dataclass(frozen=True)
class Release:
    """What a release or a pin did (or would do), and the reservations it kept."""

    changes: tuple[LeaseChange, ...]
    kept: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return any(change.changed for change in self.changes)


# --- etcd ----------------------------------------------------------------------------------


def _subnets_dir(prefix: str) -> bytes:
    return (prefix.rstrip("/") + "/subnets/").encode()


def _owned(kv: KeyValue, node: NodeLease) -> bool:
    """Whether the key is the node's lease, by subnet or public IP; raises LeaseOpError when
    the node's subnet is leased by another public IP."""
    key = kv.key.decode(errors="replace")
    try:
        v4, v6 = parse_subnet_key(key)
    except LeaseError:
        return False
    try:
        attrs: LeaseAttrs | None = LeaseAttrs.from_json(kv.value)
    except LeaseError:
        attrs = None  # found by its subnet only
    by_subnet = (node.subnet is not None and v4 == node.subnet) or (
        node.ipv6_subnet is not None and v6 == node.ipv6_subnet
    )
    by_ip = attrs is not None and _same_node(attrs, node)
    named = node.public_ip is not None or node.public_ipv6 is not None
    if by_subnet and named and attrs is not None and not by_ip:
        shown = attrs.public_ip if attrs.public_ip != _UNSET_IP else attrs.public_ipv6
        raise LeaseOpError(
            f"{key}: the subnet is leased by the node with public IP {shown}, not by "
            f"{node.describe()}; release that node's lease instead"
        )
    return by_subnet or by_ip


def _same_node(attrs: LeaseAttrs, node: NodeLease) -> bool:
    """The agent's own match (find_own_lease): the IPv4 public IP, else the IPv6 one."""
    if node.public_ip is not None and node.public_ip != _UNSET_IP:
        return attrs.public_ip == node.public_ip
    return node.public_ipv6 is not None and attrs.public_ipv6 == node.public_ipv6


async def _release(
    client: EtcdClient, prefix: str, node: NodeLease, *, release_reservation: bool, check: bool
) -> Release:
    directory = _subnets_dir(prefix)
    kvs, _ = await client.range(directory, prefix_range_end(directory))
    changes: list[LeaseChange] = []
    kept: list[str] = []
    for kv in (kv for kv in kvs if _owned(kv, node)):
        key = kv.key.decode(errors="replace")
        value = kv.value.decode(errors="replace")
        if kv.lease == 0 and not release_reservation:
            kept.append(key)
            changes.append(LeaseChange(key, value, value, changed=False))
            continue
        if not check:
            await client.delete(kv.key)
        changes.append(LeaseChange(key, value, None, changed=True))
    return Release(tuple(changes), tuple(kept))


def release_etcd(
    settings: EtcdSettings, node: NodeLease, *, release_reservation: bool = False, check: bool
) -> Release:
    """Delete the node's subnet key(s); a reservation only with ``release_reservation``."""
    if not node.describe():
        raise LeaseOpError("nothing names the node's lease: give its public IP or its subnet")

    async def run(client: EtcdClient) -> Release:
        return await _release(
            client, settings.prefix, node, release_reservation=release_reservation, check=check
        )

    return asyncio.run(with_client(settings, run))


def pin_etcd(settings: EtcdSettings, node: NodeLease, *, check: bool) -> Release:
    """Make the node's subnet a reservation naming its public IPs (``publish``'s pin)."""
    if node.subnet is None and node.ipv6_subnet is None:
        raise LeaseOpError("a reservation needs the node's subnet (subnet or ipv6_subnet)")
    if node.public_ip is None and node.public_ipv6 is None:
        raise LeaseOpError("a reservation needs the node's public IP (public_ip or public_ipv6)")
    if node.subnet is not None and node.subnet == _NO_IPV4:
        raise LeaseOpError(f"subnet: {node.subnet} is no node's subnet")
    reservation = Reservation(node.subnet, node.ipv6_subnet, node.public_ip, node.public_ipv6)
    changes = publish(settings, None, [reservation], check=check)
    return Release(tuple(LeaseChange(c.key, c.before, c.after, c.changed) for c in changes))


# --- Kubernetes ----------------------------------------------------------------------------


def flannel_annotations(keys: Annotations) -> tuple[str, ...]:
    """The annotations flannel writes on its own Node (not the operator's overwrite ones)."""
    return (
        keys.backend_data,
        keys.backend_type,
        keys.backend_v6_data,
        keys.public_ip,
        keys.public_ipv6,
        keys.subnet_kube_managed,
    )


def _annotations_text(annotations: Sequence[tuple[str, str]]) -> str:
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in annotations)


def release_kube(settings: KubeSettings, node_name: str, *, check: bool) -> Release:
    """Remove flannel's annotations from the Node (a strategic-merge patch of its status, as
    flannel writes them); a Node that is gone has nothing left to release."""
    if not node_name:
        raise LeaseOpError("node_name: required with the kubernetes datastore")
    keys = Annotations.for_prefix(settings.annotation_prefix)
    api = NodeApi(
        build_api_client(settings.api_url, settings.kubeconfig_file, settings.request_timeout),
        keys,
    )
    where = f"nodes/{node_name}"
    try:
        try:
            current = node_annotations(api.read_node(node_name))
        except KubeApiError as err:
            if err.status == 404:  # the Node is gone, and its lease with it
                return Release((LeaseChange(where, None, None, changed=False),))
            raise
        ours = sorted((key, current[key]) for key in flannel_annotations(keys) if key in current)
        if ours and not check:
            removed = dict.fromkeys(key for key, _ in ours)
            api.patch_node_status(node_name, {"metadata": {"annotations": removed}})
        before = _annotations_text(ours) if ours else None
        return Release((LeaseChange(where, before, None, changed=bool(ours)),))
    except API_ERRORS as err:
        raise LeaseOpError(f"{where}: {api_error_text(err)}") from None
    finally:
        api.close()
