"""Keeping a peer-per-lease datapath in the kernel: events, reconcile and failure rollback.

Shared by vxlan and host-gw. A backend says which entries a lease calls for and which kernel
entries it owns; this class keeps the lease cache, plans writes with `netlink.diff` and sends
them in batches. Kernel I/O runs in a worker thread, one job at a time.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from pyroute2 import IPRoute

from pyflannel_runtime.backend.peers import PeerSkipped
from pyflannel_runtime.model.lease import EventType, Lease, LeaseEvent
from pyflannel_runtime.netlink.batch import BatchSender, OpFailure
from pyflannel_runtime.netlink.diff import desired_state, plan, removal_ops
from pyflannel_runtime.netlink.dump import Ownership, owned_state
from pyflannel_runtime.netlink.entries import Action, DatapathState, Entry, Op
from pyflannel_runtime.netlink.netns import iproute

log = logging.getLogger("pyflannel.backend")

T = TypeVar("T")


class PeerProgrammer(abc.ABC):
    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self._ipr: IPRoute | None = None
        self._sender: BatchSender | None = None
        self._peers: dict[str, Lease] = {}
        self._entries: dict[str, tuple[Entry, ...]] = {}
        self._believed = DatapathState()
        self._lock = asyncio.Lock()

    # --- what a backend supplies -----------------------------------------------------------

    @abc.abstractmethod
    def peer_entries(self, lease: Lease) -> tuple[Entry, ...]:
        """Entries for one peer in programming order; raises PeerSkipped to ignore it."""

    @abc.abstractmethod
    def ownership(self) -> Ownership:
        """The kernel entries this datapath may delete."""

    @abc.abstractmethod
    async def prepare(self, leases: Sequence[Lease]) -> None:
        """Kernel lookups `peer_entries` needs for these leases, before it is called."""

    # --- kernel access ---------------------------------------------------------------------

    async def kernel(self, job: Callable[[IPRoute], T]) -> T:
        """Run a pyroute2 job in the worker thread (pyroute2's sync API runs its own loop)."""

        def run() -> T:
            if self._ipr is None:
                self._ipr = iproute(self.netns)
            return job(self._ipr)

        return await asyncio.to_thread(run)

    async def _send(self, ops: Sequence[Op]) -> list[OpFailure]:
        def run() -> list[OpFailure]:
            if self._sender is None:
                self._sender = BatchSender.open(self.netns)
            return self._sender.send(ops)

        return await asyncio.to_thread(run) if ops else []

    async def close_kernel(self) -> None:
        def run() -> None:
            if self._sender is not None:
                self._sender.close()
            if self._ipr is not None:
                self._ipr.close()

        await asyncio.to_thread(run)
        self._sender = None
        self._ipr = None

    # --- Network API -----------------------------------------------------------------------

    async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
        async with self._lock:
            added: list[Lease] = []
            for event in events:
                key = event.lease.key()
                if event.type is EventType.ADDED:
                    self._peers[key] = event.lease
                    added.append(event.lease)
                else:
                    self._peers.pop(key, None)
                    self._entries.pop(key, None)
            await self.prepare(added)
            resent: set[Entry] = set()
            for lease in added:
                resent.update(self._compute(lease))
            # Added peers are always written (replace semantics, as flannel does); the rest of
            # the cache is compared with what was programmed, so removals and superseded
            # entries of changed peers are deleted.
            view = DatapathState.of(self._believed.entries() - resent)
            await self._apply(view)

    async def reconcile(self, peers: Sequence[Lease]) -> int:
        async with self._lock:
            return await self._reconcile(peers)

    async def _reconcile(self, peers: Sequence[Lease]) -> int:
        self._peers = {lease.key(): lease for lease in peers}
        self._entries = {}
        await self.prepare(list(self._peers.values()))
        for lease in self._peers.values():
            self._compute(lease)
        ownership = self.ownership()
        actual = await self.kernel(lambda ipr: owned_state(ipr, ownership))
        return await self._apply(actual)

    # --- internals -------------------------------------------------------------------------

    def _compute(self, lease: Lease) -> tuple[Entry, ...]:
        key = lease.key()
        try:
            entries = self.peer_entries(lease)
        except PeerSkipped as why:
            log.info("%s", why)
            entries = ()
        self._entries[key] = entries
        return entries

    async def _apply(self, actual: DatapathState) -> int:
        desired = desired_state(e for entries in self._entries.values() for e in entries)
        ops = plan(desired, actual)
        failures = await self._send(ops)
        for failure in failures:
            log.error("Netlink write failed: %s", failure)
        believed = set(desired.entries())
        failed = {f.op.entry for f in failures if f.op.action is Action.REPLACE}
        believed.update(f.op.entry for f in failures if f.op.action is Action.DELETE)
        rollback = self._rollback_failed_peers(failed, desired)
        if rollback:
            believed.difference_update(op.entry for op in rollback)
            believed.difference_update(failed)
            for failure in await self._send(rollback):
                log.warning("Rollback: %s", failure)
        self._believed = DatapathState.of(believed)
        return len(ops) + len(rollback)

    def _rollback_failed_peers(self, failed: set[Entry], desired: DatapathState) -> list[Op]:
        """A peer is programmed whole or not at all (flannel removes the neighbour when the FDB
        fails, both when the route fails); the next reconcile retries it."""
        if not failed:
            return []
        keep: set[Entry] = set()
        undo: list[Entry] = []
        for key, entries in self._entries.items():
            if failed.intersection(entries):
                log.error("Failed to program peer %s; retrying at the next reconcile", key)
                undo.extend(e for e in entries if e not in failed)
            else:
                keep.update(entries)
        wanted = desired.entries()
        return removal_ops(_unique(e for e in undo if e not in keep and e in wanted))


def _unique(entries: Iterable[Entry]) -> list[Entry]:
    return list(dict.fromkeys(entries))
