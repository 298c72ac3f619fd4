"""Peer programming logic against a model kernel: events, reconcile, rollback of failed peers."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable, Sequence
from ipaddress import IPv4Address, IPv4Network
from typing import TypeVar

import pytest

from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend.programmer import (
    INLINE_WRITES,
    QUIET_WRITES,
    PeerProgrammer,
    writes_quietly,
)
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.netlink.batch import BatchSender, OpFailure
from pyflannel_runtime.netlink.dump import Ownership
from pyflannel_runtime.netlink.entries import Action, DatapathState, Entry, Fdb, Neigh, Op, Route
from pyflannel_runtime.netlink.monitor import (
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_ROUTE,
    RTMGRP_LINK,
    RTMGRP_NEIGH,
)
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data as data
from tests.unit.test_netlink_diff import FakeKernel
from tests.unit.test_netlink_monitor import joined, monitor

T = TypeVar("T")
DEV = 4


class ModelNetwork(PeerProgrammer):
    def __init__(self) -> None:
        super().__init__(None)
        self.model = FakeKernel()
        self.refuse: set[Entry] = set()
        self.sent: list[Op] = []

    def peer_entries(self, lease: Lease) -> tuple[Entry, ...]:
        return vxlan_peer_entries(lease, VxlanDevices(DEV, None))

    def ownership(self) -> Ownership:
        return Ownership(frozenset({DEV}), (IPv4Network("10.244.0.0/16"),))

    async def prepare(self, leases: Sequence[Lease]) -> None:
        pass

    async def owned_kernel_state(self) -> DatapathState:
        return self.model.state()

    async def surveyed_kernel_state(self, ownership: Ownership) -> DatapathState:
        return self.model.state()

    async def owned_kernel_routes(self) -> frozenset[Route]:
        return self.model.state().routes

    async def _send(self, ops: Sequence[Op]) -> list[OpFailure]:
        self.sent += ops
        failures = []
        for op in ops:
            if op.entry in self.refuse:
                failures.append(OpFailure(op, errno.EINVAL, ""))
            elif not self.model.apply(op):
                failures.append(OpFailure(op, errno.EEXIST, ""))
        return failures


def peer(n: int, mac_suffix: int | None = None) -> Lease:
    mac = f"0a:58:0a:f4:{mac_suffix or n:02x}:00"
    attrs = LeaseAttrs(IPv4Address(f"192.0.2.{10 + n}"), None, "vxlan", data(1, mac))
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, attrs)


def entries_of(lease: Lease) -> set[Entry]:
    return set(vxlan_peer_entries(lease, VxlanDevices(DEV, None)))


def test_events_add_change_and_remove_peers() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in (2, 3)])
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(3))
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2, mac_suffix=99))])
        assert net.model.state().entries() == entries_of(peer(2, 99)) | entries_of(peer(3))
        await net.handle_events([LeaseEvent(EventType.REMOVED, peer(3))])
        assert net.model.state().entries() == entries_of(peer(2, 99))
        assert await net.reconcile([peer(2, 99)]) == 0

    asyncio.run(scenario())


def test_a_peer_with_a_failed_step_is_rolled_back_and_retried_by_reconcile() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        bad_fdb = Fdb(DEV, "0a:58:0a:f4:03:00", IPv4Address("192.0.2.13"))
        net.refuse.add(bad_fdb)
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in (2, 3)])
        assert net.model.state().entries() == entries_of(peer(2))  # peer 3: nothing left
        net.refuse.clear()
        assert await net.reconcile([peer(2), peer(3)]) == 3
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(3))

    asyncio.run(scenario())


def test_reconcile_removes_what_no_lease_explains() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        for e in entries_of(peer(5)):
            net.model.apply(Op(Action.REPLACE, e))
        assert await net.reconcile([peer(2)]) == 6
        assert net.model.state().entries() == entries_of(peer(2))
        net.sent.clear()
        assert await net.reconcile([peer(2)]) == 0 and net.sent == []

    asyncio.run(scenario())


def test_an_event_writes_only_its_own_peer_entries() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in range(2, 60)])
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(7, mac_suffix=200))])
        assert {op.entry for op in net.sent if op.action is Action.REPLACE} == entries_of(
            peer(7, 200)
        )
        # The old MAC's FDB entry is the only thing the change makes stale.
        assert [op.entry for op in net.sent if op.action is Action.DELETE] == [
            e for e in entries_of(peer(7)) if isinstance(e, Fdb)
        ]
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.REMOVED, peer(9))])
        assert [op.action for op in net.sent] == [Action.DELETE] * 3
        assert {op.entry for op in net.sent} == entries_of(peer(9))

    asyncio.run(scenario())


def test_repairs_are_counted_by_kind_and_peers_programmed_are_those_held_whole() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        peers = [peer(2), peer(3), peer(4)]
        net.refuse.add(route_of(peer(4)))
        await net.reconcile(peers)  # a start: what it writes repairs nothing
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(5))])
        assert net.repaired == {"route": 0, "neighbour": 0, "fdb": 0}
        assert net.programmed_peers() == 3  # peer 4's route failed: it was rolled back
        # Someone else deletes a route and a neighbour of peer 2, and adds a stale neighbour.
        (neigh,) = (e for e in entries_of(peer(2)) if isinstance(e, Neigh))
        stale = Neigh(DEV, IPv4Address("10.244.77.0"), "0a:58:0a:f4:4d:00")
        for op in (Op(Action.DELETE, route_of(peer(2))), Op(Action.DELETE, neigh)):
            net.model.apply(op)
        net.model.apply(Op(Action.REPLACE, stale))
        net.refuse.clear()
        # The periodic check puts them back, deletes the stale one and retries peer 4, whose
        # entries were rolled back whole: each write counts.
        assert await net.recheck([*peers, peer(5)]) == 6
        assert net.repaired == {"route": 2, "neighbour": 3, "fdb": 1}
        assert net.programmed_peers() == 4

    asyncio.run(scenario())


def test_reconcile_recomputes_only_changed_leases() -> None:
    calls: list[Lease] = []

    class Counting(ModelNetwork):
        def peer_entries(self, lease: Lease) -> tuple[Entry, ...]:
            calls.append(lease)
            return super().peer_entries(lease)

    async def scenario() -> None:
        net = Counting()
        leases = [peer(n) for n in range(2, 30)]
        await net.reconcile(leases)
        calls.clear()
        leases[3] = peer(5, mac_suffix=77)
        assert await net.reconcile(leases) > 0
        assert calls == [peer(5, 77)]
        net.forget_entries()
        calls.clear()
        assert await net.reconcile(leases) == 0
        assert len(calls) == len(leases)

    asyncio.run(scenario())


def route_of(lease: Lease) -> Route:
    (route,) = (e for e in entries_of(lease) if isinstance(e, Route))
    return route


def test_a_route_that_is_not_flannels_is_never_taken_over() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        # The kernel routes peer 3's subnet some other way (a connected or static route).
        foreign = Route(route_of(peer(3)).dst, IPv4Address("192.0.2.1"), 2)
        net.model.foreign[foreign.key] = foreign
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in (2, 3)])
        assert net.model.foreign == {foreign.key: foreign}
        assert net.model.state().entries() == entries_of(peer(2))  # peer 3 rolled back whole
        assert Op(Action.REPLACE, route_of(peer(3))) not in net.sent
        # Reconciles try again, and leave it alone again.
        await net.reconcile([peer(2), peer(3)])
        assert net.model.foreign == {foreign.key: foreign}
        assert net.model.state().entries() == entries_of(peer(2))
        # Once the other route is gone, the peer is programmed.
        del net.model.foreign[foreign.key]
        await net.reconcile([peer(2), peer(3)])
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(3))

    asyncio.run(scenario())


def test_a_route_of_flannels_own_is_replaced_when_an_event_finds_it() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        # Left by an earlier run through flannel's device, before any reconcile.
        left = Route(route_of(peer(2)).dst, IPv4Address("10.244.2.9"), DEV, onlink=True)
        net.model.apply(Op(Action.REPLACE, left))
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2))])
        assert net.model.state().entries() == entries_of(peer(2))
        assert [op.action for op in net.sent if op.entry.key == left.key] == [
            Action.CREATE,
            Action.REPLACE,
        ]

    asyncio.run(scenario())


def test_an_event_for_a_known_peer_never_takes_over_a_route_replaced_since() -> None:
    async def scenario() -> None:
        net = ModelNetwork()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in (2, 3)])
        # An operator replaces the route this agent wrote for peer 3 with a static one.
        ours = route_of(peer(3))
        static = Route(ours.dst, IPv4Address("192.0.2.1"), 2)
        net.model.apply(Op(Action.DELETE, ours))
        net.model.foreign[static.key] = static
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(3, mac_suffix=77))])
        assert net.model.foreign == {static.key: static}
        assert Op(Action.REPLACE, ours) not in net.sent
        assert net.model.state().entries() == entries_of(peer(2))  # peer 3 rolled back whole
        # Its own route, still in place, is replaced as before: the kernel says it is flannel's.
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2, mac_suffix=88))])
        assert [op.action for op in net.sent if op.entry.key == route_of(peer(2)).key] == [
            Action.CREATE,
            Action.REPLACE,
        ]
        assert net.model.state().entries() == entries_of(peer(2, 88))

    asyncio.run(scenario())


class ThreadRecordingSender:
    """A BatchSender that notes which thread sent each batch, and accepts every write."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.port_id = 0

    def send(self, ops: Sequence[Op]) -> list[OpFailure]:
        self.threads.append(threading.get_ident())
        return []


def test_an_events_few_writes_go_out_from_the_loop_and_a_large_batch_from_a_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sender = ThreadRecordingSender()
    monkeypatch.setattr(BatchSender, "open", lambda netns: sender)

    class KernelNetwork(ModelNetwork):
        _send = PeerProgrammer._send  # the real one, over the recording sender

    async def scenario() -> int:
        net = KernelNetwork()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2))])  # 3 writes
        many = (INLINE_WRITES + 3) // 3
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(n)) for n in range(3, 3 + many)])
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert sender.threads[0] == loop_thread
    assert sender.threads[1] != loop_thread


MONITORED = RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE | RTMGRP_IPV4_IFADDR


class MonitoredNetwork(ModelNetwork):
    """With a monitor socket (never read: the model kernel sends it nothing), whose groups each
    batch records; `meddle` runs right after a batch is sent, as someone else would."""

    def __init__(self) -> None:
        super().__init__()
        self._monitor = monitor(MONITORED)
        self.groups_while_sending: list[int] = []
        self.meddle: Callable[[], object] = lambda: None

    async def _send(self, ops: Sequence[Op]) -> list[OpFailure]:
        assert self._monitor is not None
        if ops:
            self.groups_while_sending.append(joined(self._monitor))
        failures = await super()._send(ops)
        self.meddle()
        self.meddle = lambda: None
        return failures

    async def checked(self) -> None:
        """The full check that follows a quiet batch, once it is done."""
        while self._checker is not None and not self._checker.done():
            await asyncio.sleep(0)

    def close(self) -> None:
        assert self._monitor is not None
        self._monitor.close()


def test_a_batch_is_quiet_when_large_and_at_least_half_the_datapath() -> None:
    assert writes_quietly(15_000, 15_000)
    assert writes_quietly(QUIET_WRITES, 2 * QUIET_WRITES)
    assert not writes_quietly(QUIET_WRITES - 1, QUIET_WRITES - 1)  # a small cluster's sync
    assert not writes_quietly(QUIET_WRITES, 2 * QUIET_WRITES + 1)  # a burst among many peers


def test_a_large_batch_goes_out_deaf_to_routes_and_neighbours_and_a_check_puts_back_what_changed() -> (
    None
):
    many = [peer(n) for n in range(2, 3 + QUIET_WRITES // 3)]

    async def scenario() -> None:
        net = MonitoredNetwork()
        try:
            route = next(e for e in entries_of(many[5]) if isinstance(e, Route))
            net.meddle = lambda: net.model.apply(Op(Action.DELETE, route))
            await net.reconcile(many)
            # Out of the route and neighbour groups while the batch went out, in them after.
            assert net.groups_while_sending == [RTMGRP_LINK | RTMGRP_IPV4_IFADDR]
            assert joined(net._monitor) == MONITORED  # type: ignore[arg-type]
            await net.checked()
            want = set().union(*(entries_of(p) for p in many))
            assert net.model.state().entries() == want  # the route deleted meanwhile is back
            assert net.repairs()["route"] == 1
            assert net.groups_while_sending[1:] == [MONITORED]  # the repair: one write
            # Nothing doubts the notifications now: the periodic check costs nothing.
            assert await net.survey() is None
            # An event's few writes keep the notifications.
            await net.handle_events([LeaseEvent(EventType.ADDED, peer(200))])
            assert net.groups_while_sending[-1] == MONITORED
            assert net._checker is not None and net._checker.done()
        finally:
            net.close()

    asyncio.run(scenario())


def test_a_check_whose_own_batch_fails_whole_leaves_the_doubt_to_the_periodic_check() -> None:
    many = [peer(n) for n in range(2, 3 + QUIET_WRITES // 3)]

    async def scenario() -> None:
        net = MonitoredNetwork()
        try:
            net.refuse = set().union(*(entries_of(p) for p in many))
            await net.reconcile(many)
            await net.checked()
            # The check retried every peer once, in one quiet batch that failed again, and
            # stopped there; the next periodic check reconciles in full.
            assert net.groups_while_sending == [RTMGRP_LINK | RTMGRP_IPV4_IFADDR] * 2
            assert net.programmed_peers() == 0
            assert await net.survey() is not None
        finally:
            net.close()

    asyncio.run(scenario())
