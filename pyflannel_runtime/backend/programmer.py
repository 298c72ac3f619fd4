"""Keeping a peer-per-lease datapath in the kernel: events, reconcile and failure rollback.

Shared by vxlan and host-gw. A backend says which entries a lease calls for and which kernel
entries it owns; this class keeps the lease cache, plans writes with `netlink.diff` and sends
them in batches. Dumps and large batches run in a worker thread, one job at a time; an
event's few writes go out from the event loop (`INLINE_WRITES`); a batch as large as a full
sync goes out without the kernel's route and neighbour notifications, and a full check
follows it (`QUIET_WRITES`). The periodic check's dump runs beside that worker without the
lock (`survey`), so events wait only for its diff.

A route is only ever replaced where the datapath owns the kernel's route (by the rules of
`netlink.dump.Ownership`, the same for events and reconciles): elsewhere it is created, and
when the kernel already routes that destination some other way (the host's connected route,
an operator's static one) the route is left alone, logged, and its peer rolled back. Events
never replace on the strength of what this agent wrote before: the route it wrote may have
been replaced by someone else since, so the kernel is asked (only when a create finds the
key taken).
"""

from __future__ import annotations

import abc
import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from pyroute2 import IPRoute

from pyflannel_runtime.backend.drift import (
    REPAIR_KINDS,
    KernelSurvey,
    Wanted,
    kernel_key,
    repair_kind,
    repairs,
)
from pyflannel_runtime.backend.peers import PeerSkipped
from pyflannel_runtime.memory import release_free_memory
from pyflannel_runtime.netlink.batch import BatchSender, OpFailure
from pyflannel_runtime.netlink.diff import diff_ops, removal_ops
from pyflannel_runtime.netlink.dump import (
    Ownership,
    owned_kernel_routes,
    owned_state,
    owned_state_in,
)
from pyflannel_runtime.netlink.entries import Action, DatapathState, Entry, Fdb, Neigh, Op, Route
from pyflannel_runtime.netlink.monitor import (
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_IFADDR,
    RTMGRP_IPV6_ROUTE,
    RTMGRP_LINK,
    RTMGRP_NEIGH,
    RTNLGRP_IPV4_ROUTE,
    RTNLGRP_IPV6_ROUTE,
    RTNLGRP_NEIGH,
    LinkEvent,
    NeighEvent,
    RouteEvent,
    address_changes,
    deafened,
    open_monitor,
    parse_events,
)
from pyflannel_runtime.netlink.netns import iproute
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseEvent

log = logging.getLogger("pyflannel.backend")

T = TypeVar("T")

# While the kernel's notifications say nothing changed, a periodic check needs no dump; one is
# still made this often (flannel's informer resyncs every 5 minutes), in case one was missed.
FULL_RECONCILE_PERIOD = 300.0
# Notifications are gathered this long before a repair (a device being deleted sends its
# entries' deletions first; its own comes a moment later and makes the repairs moot).
REPAIR_DELAY = 0.02
# Up to this many writes are sent from the event loop itself: rtnetlink carries out a request
# inside the sendmsg that brings it, so their answers are there when it returns (microseconds
# for a peer's few entries). A worker thread would add two wake-ups per lease event, each a
# scheduling delay on a busy machine; reconciles of thousands of entries still go to one.
INLINE_WRITES = 64
# Addresses too: the kernel flushes the routes through an address's subnet when the address
# goes, without a notification for each (a host renumbered loses its host-gw routes).
_MONITOR_GROUPS = (
    RTMGRP_LINK
    | RTMGRP_NEIGH
    | RTMGRP_IPV4_ROUTE
    | RTMGRP_IPV6_ROUTE
    | RTMGRP_IPV4_IFADDR
    | RTMGRP_IPV6_IFADDR
)
_MONITOR_RECV = 1 << 16
# A batch of at least this many writes, and at least half the entries held, is written with the
# monitor out of the route and neighbour groups (`writes_quietly`). With the monitor in them,
# each write makes the kernel queue a notification for it and wake the loop, which reads them
# all to skip them as its own: at 5 000 peers a full sync's 15 000 writes took a fifth longer.
# What someone else changed meanwhile goes unseen, so the window casts a doubt and a full
# check follows it at once (`_check_after_quiet`); that check dumps every entry held, which is
# why a batch of a few hundred writes among thousands of entries (a burst of lease events)
# keeps the notifications: they cost less than the dump.
QUIET_WRITES = 256
# The link group stays: a vxlan device deleted meanwhile is recreated as ever. Addresses too
# (no write here makes them notify).
_QUIET_GROUPS = (RTNLGRP_NEIGH, RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE)


def writes_quietly(batch: int, held: int) -> bool:
    """Whether a batch of `batch` writes, with `held` entries held once it is written, goes out
    with the monitor out of the route and neighbour groups."""
    return batch >= QUIET_WRITES and 2 * batch >= held


class PeerProgrammer(abc.ABC):
    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self._ipr: IPRoute | None = None
        self._sender: BatchSender | None = None
        self._peers: dict[str, Lease] = {}
        self._entries: dict[str, tuple[Entry, ...]] = {}
        self._lock = asyncio.Lock()
        # What the kernel holds for us, by key, and whether nothing has changed it since the
        # last full reconcile (as far as the notifications tell).
        self._wanted = Wanted()
        self._in_sync = False
        self._doubts = 0  # how often the notifications were found wanting
        self._last_full = float("-inf")
        # For each pending survey, the kernel keys written since its dump began (the periodic
        # check's and the one after a quiet batch may overlap).
        self._surveys: list[set[tuple[type, object]]] = []
        # The full check after a batch written quietly, and whether another is wanted.
        self._checker: asyncio.Task[None] | None = None
        self._check_again = False
        self._checking = False  # the checker's own reconcile is writing
        self._monitor: socket.socket | None = None
        self._changes: list[RouteEvent | NeighEvent] = []
        self._repairer: asyncio.Task[None] | None = None
        # Writes that put back what someone else changed, by kind (`drift.repair_kind`).
        self.repaired = dict.fromkeys(REPAIR_KINDS, 0)
        # The peers rolled back after a failed write, until they are written again.
        self._unprogrammed: set[str] = set()

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

        if not ops:
            return []
        if len(ops) <= INLINE_WRITES:
            return run()
        return await asyncio.to_thread(run)

    async def owned_kernel_state(self) -> DatapathState:
        ownership, held = self.ownership(), self._wanted.held
        return await self.kernel(lambda ipr: owned_state(ipr, ownership, held))

    async def surveyed_kernel_state(self, ownership: Ownership) -> DatapathState:
        """`owned_kernel_state` without the `kernel` worker, which may run jobs meanwhile."""
        held = self._wanted.held
        return await asyncio.to_thread(owned_state_in, self.netns, ownership, held)

    async def owned_kernel_routes(self) -> frozenset[Route]:
        ownership = self.ownership()
        return await self.kernel(lambda ipr: owned_kernel_routes(ipr, ownership))

    async def close_kernel(self) -> None:
        self.stop_watching()

        def run() -> None:
            if self._sender is not None:
                self._sender.close()
            if self._ipr is not None:
                self._ipr.close()

        await asyncio.to_thread(run)
        self._sender = None
        self._ipr = None

    # --- Network API -----------------------------------------------------------------------

    def programmed_peers(self) -> int:
        """The peers whose entries were written, less those rolled back after a failed write
        (a skipped peer has none): a count, not a look at each entry, as a scrape of 5 000
        peers' metrics would make one."""
        failed = self._unprogrammed
        return sum(1 for key, entries in self._entries.items() if entries and key not in failed)

    def repairs(self) -> Mapping[str, int]:
        return self.repaired

    async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
        """Write only what these events change: a handful of messages per peer, whatever the
        cluster size."""
        async with self._lock:
            await self.prepare([e.lease for e in events if e.type is EventType.ADDED])
            notified = self._monitor is not None and self._in_sync
            written: list[Entry] = []
            stale: list[Entry] = []
            in_place: set[Entry] = set()
            for event in events:
                key = event.lease.key()
                self._unprogrammed.discard(key)  # written again, or gone
                self._peers.pop(key, None)
                old = self._entries.pop(key, ())
                new: tuple[Entry, ...] = ()
                if event.type is EventType.ADDED:
                    self._peers[key] = event.lease
                    new = self._compute(event.lease)
                # Added peers are written, as flannel does; but a route the notifications say
                # is in place as written is not: creating it again would find its key taken
                # and have to dump the routing table to learn whose the route is.
                if notified:
                    in_place.update(
                        e
                        for e in new
                        if isinstance(e, Route) and self._wanted.routes.get_for(e) == e
                    )
                written.extend(new)
                stale.extend(e for e in old if e not in new)
                for entry in old:
                    self._wanted.discard(entry)
                for entry in new:
                    self._wanted.add(entry)
            rewritten = {e.key for e in written}
            ops = [
                Op(Action.REPLACE, e)
                for kind in (Neigh, Fdb)
                for e in written
                if isinstance(e, kind)
            ]
            ops += [
                Op(Action.CREATE, e) for e in written if isinstance(e, Route) and e not in in_place
            ]
            ops += removal_ops(e for e in stale if e.key not in rewritten)
            await self._send_with_rollback(ops)

    async def reconcile(self, peers: Sequence[Lease]) -> int:
        async with self._lock:
            return await self._reconcile(peers)

    async def survey(self) -> KernelSurvey | None:
        """The periodic check's dump, made without the lock so that lease events are
        programmed meanwhile (at 5 000 peers the dump takes a fifth of a second on an idle
        machine, far more on a busy one); None when the kernel's notifications vouch that
        nothing changed since the last full reconcile."""
        if self._kernel_unchanged():
            return None
        ownership = self.ownership()
        written: set[tuple[type, object]] = set()
        doubts = self._doubts
        self._surveys.append(written)
        try:
            state = await self.surveyed_kernel_state(ownership)
        except BaseException:
            self._forget_survey(written)
            raise
        return KernelSurvey(state, ownership, written, doubts)

    async def recheck(self, peers: Sequence[Lease], survey: KernelSurvey | None = None) -> int:
        """The periodic check: a full reconcile (on `survey`'s dump, when given) unless the
        kernel's notifications vouch that nothing changed since the last one (then it costs
        nothing)."""
        async with self._lock:
            if survey is None and self._kernel_unchanged():
                return 0
            writes = await self._reconcile(peers, survey, repairing=True)
        # Its dump of the whole datapath is garbage now, but glibc keeps such heap in the
        # process: without this each period's full reconcile left ~8 MiB more RSS at 5 000
        # peers (bench/bench_churn.py), as the start-up sync would without its own trim.
        release_free_memory()
        return writes

    def _kernel_unchanged(self) -> bool:
        return (
            self._monitor is not None
            and self._in_sync
            # DirectRouting's entries follow route lookups, which no notification here covers.
            and self.entries_are_stable()
            and time.monotonic() - self._last_full < FULL_RECONCILE_PERIOD
        )

    async def _reconcile(
        self, peers: Sequence[Lease], survey: KernelSurvey | None = None, *, repairing: bool = False
    ) -> int:
        """Make the kernel hold these peers' entries; `repairing`: what it writes puts back
        what someone else changed (counted in `repaired`), not what the leases changed."""
        if survey is not None:
            self._forget_survey(survey.written)
        fresh = {lease.key(): lease for lease in peers}
        await self.prepare(list(fresh.values()))
        reusable = self.entries_are_stable()
        entries: dict[str, tuple[Entry, ...]] = {}
        for key, lease in fresh.items():
            cached = self._entries.get(key)
            if reusable and cached is not None and self._peers.get(key) == lease:
                entries[key] = cached
            else:
                entries[key] = self.peer_entries_or_none(lease)
        self._peers, self._entries = fresh, entries
        self._unprogrammed = set()  # every peer is written again
        self._wanted = Wanted.of(e for group in self._entries.values() for e in group)
        self._last_full = time.monotonic()
        if survey is not None and survey.ownership == self.ownership():
            # In sync unless something cast doubt since the dump began (or a write below
            # fails).
            self._in_sync = survey.doubts == self._doubts
            ops = survey.ops(self._wanted.state())
            return await self._send_with_rollback(ops, repairing=repairing)
        # No survey, or the devices it read were recreated since.
        self._in_sync = True  # unless a write below fails, or a notification is lost
        actual = await self.owned_kernel_state()
        if actual == DatapathState():  # a cold start: nothing to compare with
            ops = self._wanted.creation_ops()
        else:
            ops = diff_ops(self._wanted.state(), actual)
        return await self._send_with_rollback(ops, repairing=repairing)

    def forget_entries(self) -> None:
        """Drop the computed entries, e.g. when a device they point at was recreated."""
        self._entries = {}

    def entries_are_stable(self) -> bool:
        """True when a lease's entries depend on the lease alone, not on kernel lookups made
        in `prepare`, so unchanged leases can keep their computed entries."""
        return True

    # --- the kernel's notifications ----------------------------------------------------------

    def start_watching(self) -> None:
        """Follow the kernel's link, route, neighbour and FDB notifications: what someone else
        deletes or changes among the wanted entries is put back within REPAIR_DELAY."""
        self._monitor = self.open_monitor()
        asyncio.get_running_loop().add_reader(self._monitor.fileno(), self._on_kernel_message)

    def open_monitor(self) -> socket.socket:
        return open_monitor(self.netns, _MONITOR_GROUPS)

    def stop_watching(self) -> None:
        if self._monitor is not None:
            asyncio.get_running_loop().remove_reader(self._monitor.fileno())
            self._monitor.close()
            self._monitor = None
        if self._repairer is not None:
            self._repairer.cancel()
        if self._checker is not None:
            self._checker.cancel()

    def on_link_events(self, events: list[LinkEvent]) -> None:  # noqa: B027 - a hook
        """Links came or went (vxlan recreates its devices)."""

    def devices_lost(self) -> bool:
        """True while the datapath's devices are being recreated (their entries went with
        them, and are replayed whole)."""
        return False

    def on_notifications_lost(self) -> None:  # noqa: B027 - a hook
        """The monitor overflowed: whatever its lost notifications said is unknown."""

    def _on_kernel_message(self) -> None:
        assert self._monitor is not None
        links: list[LinkEvent] = []
        # The datapath's own route and neighbour writes are known; FDB notifications name no
        # writer and are sorted out by what they say.
        own = self._sender.port_id if self._sender is not None else 0
        devices = self.ownership().devices
        while True:
            try:
                data = self._monitor.recv(_MONITOR_RECV)
            except BlockingIOError:
                break
            except OSError as err:  # ENOBUFS: notifications were lost; trust them no more
                log.warning("Kernel monitor: %s; the next check reconciles in full", err)
                self._distrust()
                self.on_notifications_lost()
                continue
            if any(c.deleted and c.routable for c in address_changes(data)):
                self._distrust()  # the next check reconciles in full
            for event in parse_events(data, own):
                if isinstance(event, LinkEvent):
                    links.append(event)
                elif isinstance(event, RouteEvent) or event.neigh.ifindex in devices:
                    self._changes.append(event)
        if links:
            self.on_link_events(links)
        if self._changes and (self._repairer is None or self._repairer.done()):
            self._repairer = asyncio.create_task(self._repair(), name="datapath-repair")

    async def _repair(self) -> None:
        while self._changes:
            await asyncio.sleep(REPAIR_DELAY)
            async with self._lock:
                changes, self._changes = self._changes, []
                if self.devices_lost():
                    continue
                ops = repairs(self._wanted, changes, self.ownership())
                if ops:
                    writes = await self._send_with_rollback(ops, repairing=True)
                    log.warning(
                        "Put back %d kernel entries someone else deleted or changed (%d writes)",
                        len(ops),
                        writes,
                    )

    def _check_soon(self) -> None:
        self._check_again = True
        if self._checker is None or self._checker.done():
            self._checker = asyncio.create_task(self._check_after_quiet(), name="datapath-check")

    async def _check_after_quiet(self) -> None:
        """The periodic check's full reconcile, run at once after a batch written quietly: a
        dump begun after the monitor rejoined its groups holds whatever someone else did while
        it was out of them, and the notifications cover what comes after. Unlike a dump made
        right after the batch, under the lock, it holds the lock for the diff alone (lease
        events wait only for that, as for the periodic check); and its dump is the one the next
        periodic check would have made anyway, the window having cast a doubt."""
        while self._check_again:
            self._check_again = False
            try:
                survey = await self.survey()
                if survey is None:  # a full reconcile since has vouched for the kernel
                    return
                async with self._lock:
                    # A quiet batch of its own (the repair of a flushed table, say) only
                    # leaves the doubt to the periodic check: a batch that fails whole each
                    # time must not make this loop.
                    self._checking = True
                    try:
                        peers = list(self._peers.values())
                        writes = await self._reconcile(peers, survey, repairing=True)
                    finally:
                        self._checking = False
            except OSError as err:  # the doubt stays: the periodic check reconciles in full
                log.error("Check after a quiet batch failed: %s", err)
                return
            release_free_memory()  # as `recheck` does, for the same dump
            if writes:
                log.warning("Put back %d kernel entries changed during a quiet batch", writes)

    # --- internals -------------------------------------------------------------------------

    def _forget_survey(self, written: set[tuple[type, object]]) -> None:
        self._surveys = [w for w in self._surveys if w is not written]

    def _distrust(self) -> None:
        self._in_sync = False
        self._doubts += 1

    def peer_entries_or_none(self, lease: Lease) -> tuple[Entry, ...]:
        try:
            return self.peer_entries(lease)
        except PeerSkipped as why:
            log.info("%s", why)
            return ()

    def _compute(self, lease: Lease) -> tuple[Entry, ...]:
        entries = self._entries[lease.key()] = self.peer_entries_or_none(lease)
        return entries

    async def _write(self, ops: Sequence[Op]) -> list[OpFailure]:
        for written in self._surveys:
            written.update(kernel_key(op.entry) for op in ops)
        if self._monitor is None or not writes_quietly(len(ops), len(self._wanted)):
            return await self._send(ops)
        self._in_sync = False  # for a survey begun meanwhile (it takes no lock)
        try:
            with deafened(self._monitor, _QUIET_GROUPS):
                return await self._send(ops)
        finally:
            # Counted once the groups are joined again: a survey whose dump began before
            # then may have missed something, and must not vouch for the kernel.
            self._distrust()
            if not self._checking:
                self._check_soon()

    async def _send_with_rollback(self, ops: list[Op], *, repairing: bool = False) -> int:
        if repairing:
            for op in ops:
                self.repaired[repair_kind(op.entry)] += 1
        failures = await self._write(ops)
        if failures:
            self._distrust()  # the next periodic check retries in full
        writes = len(ops)
        taken = [f for f in failures if f.op.action is Action.CREATE and f.errno == errno.EEXIST]
        foreign: list[OpFailure] = []
        if taken:
            retries, foreign = await self._sort_out(taken)
            failures = [f for f in failures if f not in taken] + foreign
            failures += await self._write(retries)
            writes += len(retries)
        for failure in failures:
            if failure not in foreign:  # those are logged as such
                log.error("Netlink write failed: %s", failure)
        failed = {f.op.entry for f in failures if f.op.action is not Action.DELETE}
        rollback = self._rollback_failed_peers(failed)
        for failure in await self._write(rollback):
            log.warning("Rollback: %s", failure)
        return writes + len(rollback)

    async def _sort_out(self, taken: Sequence[OpFailure]) -> tuple[list[Op], list[OpFailure]]:
        """Routes whose creation found the key taken: replaces where the route there is ours
        (left by an earlier run, say), the failures where it is not."""
        owned = {r.key for r in await self.owned_kernel_routes()}
        retries: list[Op] = []
        foreign: list[OpFailure] = []
        for failure in taken:
            route = failure.op.entry
            if route.key in owned:
                retries.append(Op(Action.REPLACE, route))
                continue
            assert isinstance(route, Route)
            log.warning(
                "Not adding the route to %s via %s: the kernel has a route to %s that is not "
                "flannel's; leaving it alone",
                route.dst,
                route.gateway,
                route.dst,
            )
            foreign.append(failure)
        return retries, foreign

    def _rollback_failed_peers(self, failed: set[Entry]) -> list[Op]:
        """A peer is programmed whole or not at all (flannel removes the neighbour when the FDB
        fails, both when the route fails); the next reconcile retries it."""
        if not failed:
            return []
        keep: set[Entry] = set()
        undo: list[Entry] = []
        for key, entries in self._entries.items():
            if failed.intersection(entries):
                log.error("Failed to program peer %s; retrying at the next reconcile", key)
                self._unprogrammed.add(key)
                undo.extend(e for e in entries if e not in failed)
                for entry in entries:  # not in the kernel now, on purpose
                    self._wanted.discard(entry)
            else:
                keep.update(entries)
        return removal_ops(_unique(e for e in undo if e not in keep))


def _unique(entries: Iterable[Entry]) -> list[Entry]:
    return list(dict.fromkeys(entries))
