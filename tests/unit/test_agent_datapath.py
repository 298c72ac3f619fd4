"""The datapath loop: queued lease batches are applied together, and the watch's end or error
reaches the agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from ipaddress import IPv4Address, IPv4Network

import pytest

from pyflannel_runtime.agent.datapath import DatapathLoop
from pyflannel_runtime.subnet.manager import LeaseWatchBatch
from pyflannel_runtime.subnet.watcher import LeaseScope
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent

SCOPE = LeaseScope(IPv4Network("10.244.0.0/16"))


def lease(n: int) -> Lease:
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, LeaseAttrs(IPv4Address(f"192.0.2.{n}")))


class RecordingNetwork:
    def __init__(self) -> None:
        self.lease = lease(1)
        self.mtu = 1450
        self.calls: list[tuple[str, int]] = []

    async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
        self.calls.append(("events", len(events)))
        await asyncio.sleep(0.05)  # while the kernel is busy, more batches queue up

    async def reconcile(self, peers: Sequence[Lease]) -> int:
        self.calls.append(("reconcile", len(peers)))
        return 0

    async def survey(self) -> None:
        return None

    async def recheck(self, peers: Sequence[Lease], survey: object = None) -> int:
        self.calls.append(("recheck", len(peers)))
        return 0

    async def close(self) -> None:
        pass


class ScriptedManager:
    def __init__(self, batches: list[LeaseWatchBatch], error: Exception | None = None) -> None:
        self.batches = batches
        self.error = error

    async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        for batch in self.batches:
            yield batch
            await asyncio.sleep(0)
        if self.error is not None:
            raise self.error


def added(*ns: int) -> LeaseWatchBatch:
    return LeaseWatchBatch(events=tuple(LeaseEvent(EventType.ADDED, lease(n)) for n in ns))


def test_snapshot_reconciles_then_queued_events_are_applied_together() -> None:
    network = RecordingNetwork()
    batches = [LeaseWatchBatch(snapshot=(lease(1), lease(2)))] + [added(n) for n in range(3, 13)]
    loop = DatapathLoop(ScriptedManager(batches), network, SCOPE, reconcile_interval=0)  # type: ignore[arg-type]
    asyncio.run(loop.run())
    assert network.calls[0] == ("reconcile", 1)  # the own lease is not a peer
    applied = [n for kind, n in network.calls[1:] if kind == "events"]
    assert sum(applied) == 10
    assert len(applied) < 10, "batches that queued while the kernel was busy go together"


def test_a_watch_error_ends_the_loop_with_that_error() -> None:
    network = RecordingNetwork()
    manager = ScriptedManager([added(2), added(3)], error=RuntimeError("watch broke"))
    loop = DatapathLoop(manager, network, SCOPE, reconcile_interval=0)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="watch broke"):
        asyncio.run(loop.run())
    assert sum(n for _, n in network.calls) == 2


def test_events_are_programmed_while_the_periodic_checks_dump_is_read() -> None:
    class SurveyingNetwork(RecordingNetwork):
        def __init__(self) -> None:
            super().__init__()
            self.surveying = asyncio.Event()
            self.surveyed = asyncio.Event()

        async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
            self.calls.append(("events while surveying", len(events)))
            self.surveyed.set()

        async def survey(self) -> None:
            self.surveying.set()
            await asyncio.wait_for(self.surveyed.wait(), 5)

    network = SurveyingNetwork()

    class Manager:
        async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
            yield LeaseWatchBatch(snapshot=(lease(1), lease(2)))
            await network.surveying.wait()
            yield added(3)
            while ("recheck", 2) not in network.calls:
                await asyncio.sleep(0.001)

    loop = DatapathLoop(Manager(), network, SCOPE, reconcile_interval=0.001)  # type: ignore[arg-type]
    asyncio.run(asyncio.wait_for(loop.run(), 10))
    assert network.calls[:3] == [("reconcile", 1), ("events while surveying", 1), ("recheck", 2)]


def test_each_lease_event_reports_its_time_to_the_kernel_and_a_listing_none() -> None:
    network = RecordingNetwork()
    seen: list[float] = []
    batches = [LeaseWatchBatch(snapshot=(lease(1), lease(2))), added(3, 4), added(5)]
    loop = DatapathLoop(ScriptedManager(batches), network, SCOPE, 0, seen.append)  # type: ignore[arg-type]
    asyncio.run(loop.run())
    assert len(seen) == 3  # the listing's peer 2 is no event
    # Each waited at least for the backend's 50 ms (RecordingNetwork.handle_events).
    assert all(seconds >= 0.05 for seconds in seen), seen
    assert loop.watcher.peer_count == 4
