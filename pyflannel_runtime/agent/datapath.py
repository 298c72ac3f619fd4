"""Feeds lease changes to the backend and keeps the kernel in line with the lease cache."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from pyflannel_runtime.backend.base import Network
from pyflannel_runtime.memory import release_free_memory
from pyflannel_runtime.subnet.manager import LeaseWatchBatch, SubnetManager
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher
from pyflannel_runtime.wire.lease import LeaseEvent

log = logging.getLogger("pyflannel.datapath")


class DatapathLoop:
    """The watch never waits for the kernel: batches queue up (unbounded) while the backend
    works, and whatever has queued meanwhile is applied in one go. One writer to the kernel at
    a time: watch events and periodic reconciles share a lock, which a periodic check takes
    once its dump is read. Only leases inside `scope` reach the backend.

    `observe`, when given, is told for each lease event the seconds from its batch's arrival
    from the store to the kernel's acknowledgement of its writes (the backend's return)."""

    def __init__(
        self,
        sm: SubnetManager,
        network: Network,
        scope: LeaseScope,
        reconcile_interval: float,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        self._sm = sm
        self._network = network
        self._interval = reconcile_interval
        self._observe = observe
        self._watcher = LeaseWatcher(network.lease, scope)
        self._lock = asyncio.Lock()
        self._synced = asyncio.Event()
        # Each batch with the time it arrived, for `observe`.
        self._queue: asyncio.Queue[tuple[LeaseWatchBatch, float] | None] = asyncio.Queue()

    @property
    def watcher(self) -> LeaseWatcher:
        """The peers' leases as this node sees them."""
        return self._watcher

    async def run(self) -> None:
        receiver = asyncio.create_task(self._receive(), name="lease-watch")
        reconciler = asyncio.create_task(self._reconcile_forever(), name="reconcile")
        try:
            while batches := await self._next_batches():
                await self._apply(batches)
            await receiver  # the watch ended: raise its error, if any
        finally:
            receiver.cancel()
            reconciler.cancel()

    async def _receive(self) -> None:
        try:
            async for batch in self._sm.watch_leases():
                self._queue.put_nowait((batch, time.monotonic()))
        finally:
            self._queue.put_nowait(None)

    async def _next_batches(self) -> list[tuple[LeaseWatchBatch, float]]:
        """What queued since the last call; empty once the watch has ended."""
        batches: list[tuple[LeaseWatchBatch, float]] = []
        item = await self._queue.get()
        while item is not None:
            batches.append(item)
            if self._queue.empty():
                return batches
            item = self._queue.get_nowait()
        if batches:
            self._queue.put_nowait(None)  # the end came after these: report it next time
        return batches

    async def _apply(self, batches: list[tuple[LeaseWatchBatch, float]]) -> None:
        events: list[LeaseEvent] = []
        full_view = False
        arrivals: list[float] = []  # one per lease event (a listing is not one)
        for batch, arrived in batches:
            found = self._watcher.apply(batch)
            events += found
            if batch.snapshot is None:
                arrivals += [arrived] * len(found)
            full_view |= batch.snapshot is not None
        async with self._lock:
            if full_view:
                # A full view: reconcile also removes what no lease explains any more,
                # including peers that left while the agent was down (flannel #2554).
                writes = await self._network.reconcile(self._watcher.leases)
                log.info("Synced %d peers (%d kernel changes)", len(self._watcher.leases), writes)
                self._synced.set()
                release_free_memory()
            elif events:
                await self._network.handle_events(events)
        if self._observe is not None and arrivals:
            done = time.monotonic()
            for arrived in arrivals:
                self._observe(done - arrived)

    async def _reconcile_forever(self) -> None:
        if self._interval <= 0:
            return
        await self._synced.wait()
        while True:
            await asyncio.sleep(self._interval)
            try:
                # Its dump is read before the lock is taken: lease events wait only for the
                # diff and its writes.
                survey = await self._network.survey()
                async with self._lock:
                    writes = await self._network.recheck(self._watcher.leases, survey)
            except OSError as err:
                log.error("Reconcile failed: %s", err)
                continue
            if writes:
                log.warning("Reconcile repaired %d kernel entries", writes)
