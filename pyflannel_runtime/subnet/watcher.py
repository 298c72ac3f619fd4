"""The LeaseWatcher (§3.5): the cache of the other nodes' leases that turns watch batches into
the events a backend acts on.

Differences from flannel, all deliberate:

* A peer is identified by its IPv4 subnet, or by its IPv6 subnet when it has no IPv4 one.
  Peer subnets never overlap, so this is what flannel's ``sameSubnet`` means, without its
  dependence on the flags of whichever lease happens to be compared.
* ``reset`` also reports peers whose attributes changed (flannel stays silent, so a new VTEP MAC
  learnt through a re-list was never programmed).
* Removals are reported before additions, so a backend never deletes state it just installed
  for a peer that moved to another subnet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Network

from pyflannel_runtime.model.lease import EventType, Lease, LeaseEvent, same_lease
from pyflannel_runtime.subnet.manager import LeaseWatchBatch

log = logging.getLogger(__name__)

PeerId = IPv4Network | IPv6Network | None


def peer_id(lease: Lease) -> PeerId:
    return lease.subnet if lease.subnet is not None else lease.ipv6_subnet


def _same_subnets(a: Lease, b: Lease) -> bool:
    return a.subnet == b.subnet and a.ipv6_subnet == b.ipv6_subnet


class LeaseWatcher:
    def __init__(self, own_lease: Lease) -> None:
        self._own = own_lease
        self._leases: dict[PeerId, Lease] = {}

    @property
    def leases(self) -> tuple[Lease, ...]:
        return tuple(self._leases.values())

    def is_own(self, lease: Lease) -> bool:
        """True when the lease shares a subnet with ours: never a peer, whichever family."""
        own = self._own
        return (lease.subnet is not None and lease.subnet == own.subnet) or (
            lease.ipv6_subnet is not None and lease.ipv6_subnet == own.ipv6_subnet
        )

    def apply(self, batch: LeaseWatchBatch) -> list[LeaseEvent]:
        if batch.snapshot is not None:
            return self.reset(batch.snapshot) + self.update(batch.events)
        return self.update(batch.events)

    def update(self, events: Iterable[LeaseEvent]) -> list[LeaseEvent]:
        out: list[LeaseEvent] = []
        for event in events:
            if self.is_own(event.lease):
                continue
            key = peer_id(event.lease)
            if event.type is EventType.ADDED:
                old = self._leases.get(key)
                if old is not None and not _same_subnets(old, event.lease):
                    # The peer's other family moved: undo the routes of the old one.
                    out.append(LeaseEvent(EventType.REMOVED, old))
                self._leases[key] = event.lease
                out.append(event)
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
        for lease in snapshot:
            if not self.is_own(lease):
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
