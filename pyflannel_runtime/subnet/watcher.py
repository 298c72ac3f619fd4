"""The LeaseWatcher: the cache of the other nodes' leases that turns watch batches into the
events a backend acts on (flannel-io/flannel pkg/lease/lease.go: LeaseWatcher).

Differences from flannel, all deliberate:

* A peer is identified by its IPv4 subnet, or by its IPv6 subnet when it has no IPv4 one.
  Peer subnets never overlap, so this is what flannel's ``sameSubnet`` means, without its
  dependence on the flags of whichever lease happens to be compared.
* ``reset`` also reports peers whose attributes changed (flannel stays silent, so a new VTEP MAC
  learnt through a re-list was never programmed).
* Removals are reported before additions, so a backend never deletes state it just installed
  for a peer that moved to another subnet.
* A lease is a peer only inside the configured network (see ``LeaseScope``): anything else
  is skipped with a warning and never reaches a backend, in snapshots and events alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

from pyflannel_runtime.subnet.manager import LeaseWatchBatch
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseEvent, same_lease
from pyflannel_runtime.wire.netconf import NetworkConfig

log = logging.getLogger(__name__)

PeerId = IPv4Network | IPv6Network | None
Network = IPv4Network | IPv6Network


def _inside(subnet: Network, network: Network) -> bool:
    shift = subnet.max_prefixlen - network.prefixlen
    return (
        subnet.prefixlen >= network.prefixlen
        and int(subnet.network_address) >> shift == int(network.network_address) >> shift
    )


def _family_rejection(
    subnet: Network, network: Network, length: int, own: Network | None, label: str
) -> str | None:
    if not _inside(subnet, network):
        return f"{label} {subnet} is outside the network {network}"
    prefixlen = subnet.prefixlen
    if length and prefixlen != length:
        return f"{label} {subnet} is not a /{length} (the configured subnet length)"
    # Aligned subnets of one length are equal or apart: only other lengths can overlap.
    if (
        own is not None
        and prefixlen != own.prefixlen
        and (_inside(subnet, own) or _inside(own, subnet))
    ):
        return f"{label} {subnet} overlaps this node's subnet {own}"
    return None


@dataclass(frozen=True)
class LeaseScope:
    """Where a peer's subnets may lie: inside the configured network of each family this node
    programs, of the configured length where the store allocates them (etcd), and clear of
    this node's own subnet. flannel programs whatever a lease names, so a lease for the host's
    underlay subnet replaced its connected route.

    Lengths: in etcd mode a node keeps its lease only while the lease has exactly SubnetLen
    (flannel's isSubnetConfigCompat), so a lease of another length is no current node's, and a
    longer one inside a peer's subnet would take part of that peer's traffic (the kernel
    prefers the longer prefix). In Kubernetes mode the length is the controller's node CIDR
    size (flannel ignores SubnetLen there) and podCIDRs cannot overlap, so it is not checked.
    """

    network: IPv4Network | None = None  # None: this node does not program IPv4
    ipv6_network: IPv6Network | None = None
    subnet_len: int = 0  # 0: any length
    ipv6_subnet_len: int = 0

    @classmethod
    def of(cls, config: NetworkConfig, *, check_lengths: bool) -> LeaseScope:
        """`check_lengths`: the store allocates SubnetLen-sized leases (etcd mode)."""
        return cls(
            network=config.enabled_network,
            ipv6_network=config.enabled_ipv6_network,
            subnet_len=config.subnet_len if check_lengths else 0,
            ipv6_subnet_len=config.ipv6_subnet_len if check_lengths else 0,
        )

    def rejection(self, lease: Lease, own: Lease | None = None) -> str | None:
        """Why this node must not program the lease, or None when it may. A family this
        node does not program never reaches its kernel, and is not looked at."""
        # Spelled out per family: thousands of leases are checked at start-up.
        subnet, network = lease.subnet, self.network
        if subnet is None and lease.ipv6_subnet is None:
            # The key "0.0.0.0-0" (flannel's IPv4 part of a v6-only lease) with no IPv6 part:
            # no peer holds it, and it has no subnet to identify a peer by.
            return "no subnet in either family (IPv4 part 0.0.0.0/0, no IPv6 part)"
        if subnet is not None and network is not None:
            own_subnet = own.subnet if own is not None else None
            why = _family_rejection(subnet, network, self.subnet_len, own_subnet, "subnet")
            if why is not None:
                return why
        subnet6, network6 = lease.ipv6_subnet, self.ipv6_network
        if subnet6 is not None and network6 is not None:
            own6 = own.ipv6_subnet if own is not None else None
            return _family_rejection(subnet6, network6, self.ipv6_subnet_len, own6, "IPv6 subnet")
        return None


def peer_id(lease: Lease) -> PeerId:
    return lease.subnet if lease.subnet is not None else lease.ipv6_subnet


def _same_subnets(a: Lease, b: Lease) -> bool:
    return a.subnet == b.subnet and a.ipv6_subnet == b.ipv6_subnet


class LeaseWatcher:
    def __init__(self, own_lease: Lease, scope: LeaseScope) -> None:
        self._own = own_lease
        self._scope = scope
        self._leases: dict[PeerId, Lease] = {}
        self._rejected: dict[str, str] = {}  # lease key -> why, warned about once
        self.batches = 0  # applied so far: what is computed from the leases holds until it moves

    @property
    def leases(self) -> tuple[Lease, ...]:
        return tuple(self._leases.values())

    @property
    def own_lease(self) -> Lease:
        return self._own

    @property
    def peer_count(self) -> int:
        return len(self._leases)

    @property
    def rejected_count(self) -> int:
        """The leases seen that this node must not program (`LeaseScope.rejection`)."""
        return len(self._rejected)

    def is_own(self, lease: Lease) -> bool:
        """True when the lease shares a subnet with ours: never a peer, whichever family."""
        own = self._own
        return (lease.subnet is not None and lease.subnet == own.subnet) or (
            lease.ipv6_subnet is not None and lease.ipv6_subnet == own.ipv6_subnet
        )

    def apply(self, batch: LeaseWatchBatch) -> list[LeaseEvent]:
        self.batches += 1
        if batch.snapshot is not None:
            return self.reset(batch.snapshot) + self.update(batch.events)
        return self.update(batch.events)

    def _rejected_now(self, lease: Lease, warned: Mapping[str, str]) -> bool:
        """True when the lease is out of scope; warns unless `warned` has that reason."""
        why = self._scope.rejection(lease, self._own)
        if why is None:
            return False
        key = lease.key()
        if warned.get(key) != why:
            log.warning("Ignoring lease %s: %s", key, why)
        self._rejected[key] = why
        return True

    def update(self, events: Iterable[LeaseEvent]) -> list[LeaseEvent]:
        out: list[LeaseEvent] = []
        for event in events:
            if self.is_own(event.lease):
                continue
            key = peer_id(event.lease)
            if event.type is EventType.ADDED:
                if self._rejected_now(event.lease, self._rejected):
                    continue
                old = self._leases.get(key)
                if old is not None and not _same_subnets(old, event.lease):
                    # The peer's other family moved: undo the routes of the old one.
                    out.append(LeaseEvent(EventType.REMOVED, old))
                self._leases[key] = event.lease
                out.append(event)
                continue
            if self._scope.rejection(event.lease, self._own) is not None:
                self._rejected.pop(event.lease.key(), None)
                continue
            stored = self._leases.pop(key, None)
            if stored is None:
                log.error("Removed subnet (%s) was not found", event.lease.key())
                out.append(event)
            else:
                # The stored lease has the attrs (VTEP MAC, public IP) the removal must undo.
                out.append(LeaseEvent(EventType.REMOVED, stored))
        return out

    def reset(self, snapshot: Iterable[Lease]) -> list[LeaseEvent]:
        fresh: dict[PeerId, Lease] = {}
        warned, self._rejected = self._rejected, {}
        for lease in snapshot:
            if not self.is_own(lease) and not self._rejected_now(lease, warned):
                fresh[peer_id(lease)] = lease
        removed = [
            LeaseEvent(EventType.REMOVED, old)
            for key, old in self._leases.items()
            if key not in fresh or not _same_subnets(old, fresh[key])
        ]
        added = [
            LeaseEvent(EventType.ADDED, new)
            for key, new in fresh.items()
            if key not in self._leases or not same_lease(self._leases[key], new)
        ]
        self._leases = fresh
        return removed + added
