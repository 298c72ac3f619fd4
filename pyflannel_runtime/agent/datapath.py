"""Feeds lease changes to the backend and keeps the kernel in line with the lease cache."""

from __future__ import annotations

import asyncio
import logging

from pyflannel_runtime.backend.base import Network
from pyflannel_runtime.subnet.manager import SubnetManager
from pyflannel_runtime.subnet.watcher import LeaseWatcher

log = logging.getLogger("pyflannel.datapath")


class DatapathLoop:
    """One writer to the kernel at a time: watch events and periodic reconciles share a lock."""

    def __init__(self, sm: SubnetManager, network: Network, reconcile_interval: float) -> None:
        self._sm = sm
        self._network = network
        self._interval = reconcile_interval
        self._watcher = LeaseWatcher(network.lease)
        self._lock = asyncio.Lock()
        self._synced = asyncio.Event()

    async def run(self) -> None:
        reconciler = asyncio.create_task(self._reconcile_forever(), name="reconcile")
        try:
            await self._follow_leases()
        finally:
            reconciler.cancel()

    async def _follow_leases(self) -> None:
        async for batch in self._sm.watch_leases():
            events = self._watcher.apply(batch)
            async with self._lock:
                if batch.snapshot is not None:
                    # A full view: reconcile also removes what no lease explains any more,
                    # including peers that left while the agent was down (flannel #2554).
                    writes = await self._network.reconcile(self._watcher.leases)
                    log.info(
                        "Synced %d peers (%d kernel changes)", len(self._watcher.leases), writes
                    )
                    self._synced.set()
                elif events:
                    await self._network.handle_events(events)

    async def _reconcile_forever(self) -> None:
        if self._interval <= 0:
            return
        await self._synced.wait()
        while True:
            await asyncio.sleep(self._interval)
            async with self._lock:
                try:
                    writes = await self._network.reconcile(self._watcher.leases)
                except OSError as err:
                    log.error("Reconcile failed: %s", err)
                    continue
            if writes:
                log.warning("Reconcile repaired %d kernel entries", writes)
