"""Drift from the kernel's notifications: which writes put wanted entries back, and when a
periodic check may skip its dump."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from ipaddress import IPv4Address, IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend import programmer
from pyflannel_runtime.backend.drift import Wanted, repairs
from pyflannel_runtime.netlink.decoder import NeighRecord, RouteRecord
from pyflannel_runtime.netlink.diff import desired_state
from pyflannel_runtime.netlink.dump import Ownership
from pyflannel_runtime.netlink.encoder import (
    AF_BRIDGE,
    NTF_SELF,
    NUD_PERMANENT,
    RTN_UNICAST,
    RTNH_F_ONLINK,
    RTPROT_BOOT,
    encode_op,
)
from pyflannel_runtime.netlink.entries import Action, Fdb, Neigh, Op, Route
from pyflannel_runtime.netlink.monitor import NeighEvent, RouteEvent, parse_events
from pyflannel_runtime.wire.lease import EventType, LeaseEvent
from tests.unit.test_backend_programmer import DEV, ModelNetwork, entries_of, peer

NET = IPv4Network("10.244.0.0/16")
OWNERSHIP = Ownership(frozenset({DEV}), (NET,))
ROUTE = Route(IPv4Network("10.244.2.0/24"), IPv4Address("10.244.2.0"), DEV, onlink=True)
NEIGH = Neigh(DEV, IPv4Address("10.244.2.0"), "0a:58:0a:f4:02:00")
FDB = Fdb(DEV, "0a:58:0a:f4:02:00", IPv4Address("192.0.2.12"))
WANTED = Wanted.of([NEIGH, FDB, ROUTE])
RTPROT_STATIC = 4
RTN_BLACKHOLE = 6  # linux/rtnetlink.h


def route_event(route: Route, deleted: bool = False, protocol: int = RTPROT_BOOT) -> RouteEvent:
    flags = RTNH_F_ONLINK if route.onlink else 0
    record = RouteRecord(
        2, route.dst.prefixlen, 254, protocol, 0, RTN_UNICAST, flags,
        route.dst.network_address, route.gateway, route.oif, None, False,
    )  # fmt: skip
    return RouteEvent(deleted, record)


def neigh_event(neigh: Neigh, deleted: bool = False, state: int = NUD_PERMANENT) -> NeighEvent:
    return NeighEvent(deleted, NeighRecord(2, neigh.ifindex, state, 0, 0, neigh.ip, neigh.lladdr))


def fdb_event(fdb: Fdb, deleted: bool = False) -> NeighEvent:
    record = NeighRecord(AF_BRIDGE, fdb.ifindex, NUD_PERMANENT, NTF_SELF, 0, fdb.dst, fdb.lladdr)
    return NeighEvent(deleted, record)


def test_deleted_entries_are_written_again_in_flannels_order() -> None:
    events = [route_event(ROUTE, True), fdb_event(FDB, True), neigh_event(NEIGH, True)]
    assert repairs(WANTED, events, OWNERSHIP) == [
        Op(Action.REPLACE, NEIGH),
        Op(Action.REPLACE, FDB),
        Op(Action.CREATE, ROUTE),  # never over a route someone put there meanwhile
    ]


def test_changed_entries_are_put_back_where_they_are_flannels() -> None:
    other_mac = Neigh(DEV, NEIGH.ip, "0a:58:00:00:00:01")
    wrong_gateway = Route(ROUTE.dst, IPv4Address("10.244.2.9"), DEV, onlink=True)
    assert repairs(WANTED, [neigh_event(other_mac), route_event(wrong_gateway)], OWNERSHIP) == [
        Op(Action.REPLACE, NEIGH),
        Op(Action.REPLACE, ROUTE),
    ]
    # a neighbour no longer permanent is no longer ours as it was
    assert repairs(WANTED, [neigh_event(NEIGH, state=0x02)], OWNERSHIP) == [
        Op(Action.REPLACE, NEIGH)
    ]


def test_a_route_now_someone_elses_is_left_alone() -> None:
    static = Route(ROUTE.dst, IPv4Address("192.0.2.99"), 2)
    assert repairs(WANTED, [route_event(static, protocol=RTPROT_STATIC)], OWNERSHIP) == []


def test_a_blackhole_over_a_wanted_route_is_left_alone_and_its_deletion_repaired() -> None:
    """`ip route replace blackhole <peer subnet>` then `ip route del`: the route that took the
    key has no device, yet its going gives the key back to flannel."""
    blackhole = RouteRecord(
        2, ROUTE.dst.prefixlen, 254, RTPROT_BOOT, 0, RTN_BLACKHOLE, 0,
        ROUTE.dst.network_address, None, None, None, False,
    )  # fmt: skip
    assert repairs(WANTED, [RouteEvent(False, blackhole)], OWNERSHIP) == []
    events = [RouteEvent(False, blackhole), RouteEvent(True, blackhole)]
    assert repairs(WANTED, events, OWNERSHIP) == [Op(Action.CREATE, ROUTE)]
    # the same in another table is not the main table's key
    elsewhere = blackhole._replace(table=100)
    assert repairs(WANTED, [RouteEvent(True, elsewhere)], OWNERSHIP) == []


def test_a_second_remote_beside_a_wanted_one_is_deleted() -> None:
    extra = Fdb(DEV, FDB.lladdr, IPv4Address("192.0.2.99"))
    assert repairs(WANTED, [fdb_event(extra)], OWNERSHIP) == [Op(Action.DELETE, extra)]
    assert repairs(WANTED, [fdb_event(extra, deleted=True)], OWNERSHIP) == []


def test_what_ends_as_wanted_or_is_not_flannels_needs_nothing() -> None:
    other = Route(IPv4Network("10.244.3.0/24"), IPv4Address("10.244.3.0"), DEV, onlink=True)
    elsewhere = Neigh(DEV + 1, NEIGH.ip, NEIGH.lladdr)  # another device: cni0's ARP churn
    outside = Route(IPv4Network("198.51.100.0/24"), IPv4Address("192.0.2.99"), 2)
    events = [
        route_event(other, True),  # the datapath's own delete of a peer's route
        neigh_event(elsewhere),
        route_event(outside),  # a gateway route outside the cluster network
        route_event(ROUTE, True),
        route_event(ROUTE),  # deleted, then back as it was: the last word counts
        neigh_event(NEIGH),  # the datapath's own write
        neigh_event(Neigh(DEV, IPv4Address("10.244.3.0"), "0a:58:00:00:00:03"), state=0x02),
    ]
    assert repairs(WANTED, events, OWNERSHIP) == []


def test_entries_no_lease_explains_are_deleted() -> None:
    stale_route = Route(IPv4Network("10.244.9.0/24"), IPv4Address("10.244.9.0"), DEV, True)
    stale_neigh = Neigh(DEV, IPv4Address("10.244.9.0"), "0a:58:0a:f4:09:00")
    stale_fdb = Fdb(DEV, "0a:58:0a:f4:09:00", IPv4Address("192.0.2.19"))
    events = [route_event(stale_route), fdb_event(stale_fdb), neigh_event(stale_neigh)]
    assert repairs(WANTED, events, OWNERSHIP) == [
        Op(Action.DELETE, stale_neigh),
        Op(Action.DELETE, stale_fdb),
        Op(Action.DELETE, stale_route),
    ]


def notification(op: Op) -> bytes:
    """What the kernel sends its listeners about `op`: a deletion's message names the whole
    entry, as a write's does, under RTM_DEL* (a delete request names only the key)."""
    data = bytearray(encode_op(Op(Action.REPLACE, op.entry), 0))
    if op.action is Action.DELETE:
        data[4] += 1  # RTM_NEWROUTE 24 -> RTM_DELROUTE 25, RTM_NEWNEIGH 28 -> RTM_DELNEIGH 29
    return bytes(data)


def test_monitor_parses_route_and_neighbour_notifications() -> None:
    data = b"".join(
        notification(op)
        for op in [Op(Action.DELETE, ROUTE), Op(Action.REPLACE, NEIGH), Op(Action.DELETE, FDB)]
    )
    events = list(parse_events(data))
    assert [type(e) for e in events] == [RouteEvent, NeighEvent, NeighEvent]
    assert repairs(WANTED, [events[0], events[2]], OWNERSHIP) == [
        Op(Action.REPLACE, FDB),
        Op(Action.CREATE, ROUTE),
    ]
    assert repairs(WANTED, [events[1]], OWNERSHIP) == []


def test_wanted_state_is_the_desired_state_of_its_entries_the_later_one_winning() -> None:
    moved = replace(ROUTE, gateway=IPv4Address("10.244.2.9"))
    other_mac = replace(NEIGH, lladdr="0a:58:0a:f4:02:99")
    entries = [NEIGH, FDB, ROUTE, moved, other_mac]
    assert Wanted.of(entries).state() == desired_state(entries)
    assert Wanted.of(entries).state().routes == {moved}


def test_wanted_forgets_only_the_entry_it_was_given() -> None:
    wanted = Wanted.of([ROUTE])
    wanted.discard(Route(ROUTE.dst, IPv4Address("10.244.2.9"), DEV))  # same key, not it
    assert list(wanted.routes.values()) == [ROUTE]
    wanted.discard(ROUTE)
    assert len(wanted) == 0


class WatchedNetwork(ModelNetwork):
    """A model network whose 'kernel notifications' are written into a socketpair."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel_end, self.monitor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dumps = 0

    def open_monitor(self) -> socket.socket:
        self.monitor_end.setblocking(False)
        return self.monitor_end

    async def owned_kernel_state(self):  # type: ignore[no-untyped-def]
        self.dumps += 1
        return await super().owned_kernel_state()

    def notify(self, op: Op) -> None:
        """Someone else changes the kernel, which tells every listener."""
        self.model.apply(op)
        self.kernel_end.send(notification(op))

    async def settled(self) -> None:
        await asyncio.sleep(3 * programmer.REPAIR_DELAY)
        while self._repairer is not None and not self._repairer.done():
            await asyncio.sleep(programmer.REPAIR_DELAY)


def test_checks_skip_the_dump_while_notifications_vouch_for_the_kernel() -> None:
    async def scenario() -> None:
        net = WatchedNetwork()
        peers = [peer(2), peer(3)]
        assert await net.recheck(peers) > 0  # not watching yet: a full reconcile
        net.start_watching()
        await net.reconcile(peers)
        dumps = net.dumps
        assert await net.recheck(peers) == 0 and net.dumps == dumps
        # someone deletes a route: put back from the notification, no dump
        route = next(e for e in entries_of(peer(2)) if isinstance(e, Route))
        net.notify(Op(Action.DELETE, route))
        await net.settled()
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(3))
        assert await net.recheck(peers) == 0 and net.dumps == dumps
        # a write fails: the next check reconciles in full, and retries the peer
        net.refuse = entries_of(peer(4))
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(4))])
        net.refuse = set()
        assert await net.recheck([*peers, peer(4)]) > 0 and net.dumps == dumps + 1
        assert await net.recheck([*peers, peer(4)]) == 0 and net.dumps == dumps + 1
        net.stop_watching()
        net.kernel_end.close()

    asyncio.run(scenario())


def test_a_full_reconcile_still_runs_every_period(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        net = WatchedNetwork()
        net.start_watching()
        await net.reconcile([peer(2)])
        monkeypatch.setattr(programmer, "FULL_RECONCILE_PERIOD", 0.0)
        dumps = net.dumps
        await net.recheck([peer(2)])
        assert net.dumps == dumps + 1
        net.stop_watching()
        net.kernel_end.close()

    asyncio.run(scenario())


def test_only_a_check_that_dumped_the_kernel_trims_the_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(programmer, "release_free_memory", lambda: trims.append(1))

    async def scenario() -> None:
        net = WatchedNetwork()
        net.start_watching()
        await net.reconcile([peer(2)])
        await net.recheck([peer(2)])  # the notifications vouch: no dump, nothing freed
        assert trims == []
        monkeypatch.setattr(programmer, "FULL_RECONCILE_PERIOD", 0.0)
        await net.recheck([peer(2)])
        assert trims == [1]
        net.stop_watching()
        net.kernel_end.close()

    asyncio.run(scenario())


def test_a_route_in_place_as_written_is_not_created_again() -> None:
    """A peer's new VTEP MAC rewrites its neighbour and FDB entry; its route, unchanged and
    (say the notifications) still in the kernel, is not sent again: creating it would find
    its key taken and need a dump of every route to learn whose it is."""

    async def scenario() -> None:
        net = WatchedNetwork()
        net.start_watching()
        await net.reconcile([peer(2), peer(3)])
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2, mac_suffix=99))])
        assert not [op for op in net.sent if isinstance(op.entry, Route)]
        assert net.model.state().entries() == entries_of(peer(2, 99)) | entries_of(peer(3))
        # without notifications to vouch for it, the route is written (and sorted out)
        net.stop_watching()
        net.sent.clear()
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(2, mac_suffix=98))])
        assert [op.action for op in net.sent if isinstance(op.entry, Route)] == [
            Action.CREATE,
            Action.REPLACE,
        ]
        net.kernel_end.close()

    asyncio.run(scenario())


def test_notifications_of_the_datapaths_own_writes_are_left_out() -> None:
    """The kernel names the requester's netlink port in a route or neighbour notification."""
    mine = bytearray(notification(Op(Action.DELETE, ROUTE)))
    mine[12:16] = (4242).to_bytes(4, "little")  # nlmsg_pid
    theirs = notification(Op(Action.DELETE, NEIGH))
    events = list(parse_events(bytes(mine) + theirs, skip_port=4242))
    assert [type(e) for e in events] == [NeighEvent]
    assert len(list(parse_events(bytes(mine) + theirs))) == 2


@pytest.mark.parametrize("entry", [ROUTE, NEIGH, FDB], ids=["route", "neigh", "fdb"])
def test_held_gives_the_wanted_object_for_an_equal_entry_and_the_entry_otherwise(
    entry: Route | Neigh | Fdb,
) -> None:
    assert WANTED.held(replace(entry)) is entry
    other_value = (
        replace(entry, gateway=IPv4Address("10.244.2.1"))
        if isinstance(entry, Route)
        else replace(entry, lladdr="0a:58:0a:f4:02:01")
        if isinstance(entry, Neigh)
        else replace(entry, dst=IPv4Address("192.0.2.13"))
    )
    assert WANTED.held(other_value) is other_value  # the same key, another value
    stranger = (
        replace(entry, ifindex=DEV + 1)
        if not isinstance(entry, Route)
        else replace(entry, dst=IPv4Network("10.244.3.0/24"))
    )
    assert WANTED.held(stranger) is stranger


def test_a_recheck_on_a_survey_leaves_alone_what_events_wrote_after_its_dump() -> None:
    """Events programmed between the survey's dump and the recheck are newer than the dump:
    diffing them against it would write peer 4 again and delete peer 3 a second time."""

    async def scenario() -> None:
        net = WatchedNetwork()
        await net.reconcile([peer(2), peer(3)])
        survey = await net.survey()
        assert survey is not None  # not watching: nothing vouches for the kernel
        await net.handle_events(
            [LeaseEvent(EventType.ADDED, peer(4)), LeaseEvent(EventType.REMOVED, peer(3))]
        )
        net.sent.clear()
        assert await net.recheck([peer(2), peer(4)], survey) == 0
        assert net.sent == []
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(4))
        net.kernel_end.close()

    asyncio.run(scenario())


def test_a_recheck_on_a_survey_repairs_the_drift_its_dump_saw() -> None:
    async def scenario() -> None:
        net = WatchedNetwork()
        await net.reconcile([peer(2), peer(3)])
        route = next(e for e in entries_of(peer(3)) if isinstance(e, Route))
        net.model.apply(Op(Action.DELETE, route))  # unnoticed: not watching
        dumps = net.dumps
        assert await net.recheck([peer(2), peer(3)], await net.survey()) == 1
        assert net.dumps == dumps, "the survey's dump is used"
        assert net.model.state().entries() == entries_of(peer(2)) | entries_of(peer(3))
        net.kernel_end.close()

    asyncio.run(scenario())


def test_doubt_cast_during_a_survey_keeps_the_next_check_a_full_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        net = WatchedNetwork()
        net.start_watching()
        peers = [peer(2), peer(3)]
        await net.reconcile(peers)
        monkeypatch.setattr(programmer, "FULL_RECONCILE_PERIOD", 0.0)
        survey = await net.survey()
        monkeypatch.setattr(programmer, "FULL_RECONCILE_PERIOD", 300.0)
        net.refuse = entries_of(peer(4))  # a write fails after the dump began
        await net.handle_events([LeaseEvent(EventType.ADDED, peer(4))])
        net.refuse = set()
        await net.recheck([*peers, peer(4)], survey)
        dumps = net.dumps
        assert await net.recheck([*peers, peer(4)]) > 0 and net.dumps == dumps + 1
        assert net.model.state().entries() == set().union(*map(entries_of, [*peers, peer(4)]))
        net.stop_watching()
        net.kernel_end.close()

    asyncio.run(scenario())


def test_a_survey_of_devices_recreated_since_is_not_used() -> None:
    async def scenario() -> None:
        net = WatchedNetwork()
        await net.reconcile([peer(2)])
        survey = await net.survey()
        assert survey is not None
        stale = replace(survey, ownership=Ownership(frozenset({DEV + 1}), ()))
        dumps = net.dumps
        await net.recheck([peer(2)], stale)
        assert net.dumps == dumps + 1
        net.kernel_end.close()

    asyncio.run(scenario())


key_parts = st.tuples(st.integers(0, 3), st.integers(0, 7), st.sampled_from(["a", "b"]))


@given(st.lists(st.tuples(st.booleans(), key_parts)))
def test_a_key_table_holds_what_a_dict_by_kernel_key_would(
    steps: list[tuple[bool, tuple[int, int, str]]],
) -> None:
    """Neighbours put and discarded in any order: the table answers as one dict keyed by each
    neighbour's `key` does."""
    wanted = Wanted()
    model: dict[object, Neigh] = {}
    for put, (index, host, mac) in steps:
        neigh = Neigh(index, IPv4Address(f"10.244.0.{host}"), mac)
        if put:
            wanted.add(neigh)
            model[neigh.key] = neigh
        else:
            wanted.discard(neigh)
            if model.get(neigh.key) == neigh:
                del model[neigh.key]
        assert sorted(wanted.neighs.values(), key=repr) == sorted(model.values(), key=repr)
        assert len(wanted) == len(model)
        assert wanted.neighs.get_for(neigh) == model.get(neigh.key)
        assert wanted.neighs.get(*neigh.key) == model.get(neigh.key)
        copy, kept = replace(neigh), model.get(neigh.key)
        assert wanted.held(copy) is (kept if kept == copy else copy)
