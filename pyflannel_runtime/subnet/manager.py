"""The subnet manager interface both lease stores implement (flannel's ``subnet.Manager``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig


@dataclass(frozen=True)
class LeaseWatchBatch:
    """Either incremental events or a full snapshot of the peers' leases (then ``events`` is
    empty); a snapshot replaces everything known before, see ``LeaseWatcher.reset``."""

    events: tuple[LeaseEvent, ...] = ()
    snapshot: tuple[Lease, ...] | None = None


@dataclass(frozen=True)
class UnreadableLease:
    """A lease in the store that could not be read: skipped, and reported."""

    name: str  # the etcd key below the subnets prefix, or the node's name
    reason: str


@dataclass(frozen=True)
class ListedLease:
    lease: Lease
    node: str = ""  # the node's name (Kubernetes); etcd leases have none


@dataclass(frozen=True)
class LeaseListing:
    """Every lease in the store at one moment, and what could not be read."""

    leases: tuple[ListedLease, ...]
    unreadable: tuple[UnreadableLease, ...] = ()


@dataclass
class StoreStats:
    """What a lease store counts, for the agent's metrics (read when they are scraped, so
    counting costs the store an integer addition): the renewals of the own lease and the
    attempts that failed, the own lease's expiry as last renewed (None: it never expires, a
    reservation or a Kubernetes lease), and the restarts of the store's watches by reason."""

    watch_restarts: dict[str, int]
    renewals: int = 0
    renewal_failures: int = 0
    own_lease_expiry: float | None = None

    @classmethod
    def with_reasons(cls, reasons: Iterable[str]) -> StoreStats:
        """Every reason the store counts, at 0 from the start: a counter that appears only
        at its first increment hides that increment from Prometheus's rate()."""
        return cls(dict.fromkeys(reasons, 0))

    def watch_restarted(self, reason: str) -> None:
        self.watch_restarts[reason] = self.watch_restarts.get(reason, 0) + 1


class LeaseRevoked(PyflannelError):
    """The own lease was deleted or expired: flanneld shuts down (and exits 0) to re-acquire."""


class LeaseTaken(LeaseRevoked):
    """The own lease ran out (its node could not reach the store to renew it) and another node
    holds the subnet now: taking another one would renumber the node's pods under them, so the
    agent shuts down as flanneld does, saying why (``str()``)."""


class Unimplemented(PyflannelError, NotImplementedError):
    """An operation the lease store does not support; ``str()`` is flannel's ``unimplemented``."""

    def __init__(self) -> None:
        super().__init__("unimplemented")


class SubnetManager(Protocol):
    stats: StoreStats

    async def get_network_config(self) -> NetworkConfig: ...

    async def acquire_lease(self, attrs: LeaseAttrs) -> Lease: ...

    async def renew_lease(self, lease: Lease) -> Lease: ...

    def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        """Peers' leases: usually a snapshot first, then events; runs until cancelled."""
        ...

    async def list_leases(self) -> LeaseListing:
        """All leases, with expiry where the store has one (for operators, not the agent)."""
        ...

    async def complete_lease(self, lease: Lease) -> None:
        """etcd: renews and watches the own lease, raising LeaseRevoked when it goes away.
        kube: marks the node's network available and returns."""
        ...

    async def get_stored_public_ip(self) -> tuple[str, str]:
        """(v4, v6) public IPs stored for this node; empty strings when none."""
        ...

    async def get_stored_mac_addresses(self) -> tuple[str, str]:
        """(v4, v6) VTEP MACs this node advertised before; empty strings when none."""
        ...

    async def close(self) -> None: ...
