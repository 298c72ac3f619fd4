"""The LeaseWatcher (spec §3.5), with flannel's quirks fixed."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Network

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.model.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.subnet.manager import LeaseWatchBatch
from pyflannel_runtime.subnet.watcher import LeaseWatcher, PeerId, peer_id

OWN = Lease(
    IPv4Network("10.244.0.0/24"),
    IPv6Network("fd00::/64"),
    LeaseAttrs(IPv4Address("192.0.2.100"), backend_type="vxlan"),
    enable_ipv6=True,
)


def lease(v4: int | None, v6: int | None = None, ip: int = 1, mac: int = 1) -> Lease:
    return Lease(
        IPv4Network(f"10.244.{v4}.0/24") if v4 is not None else None,
        IPv6Network(f"fd00:0:0:{v6:x}::/64") if v6 is not None else None,
        LeaseAttrs(
            IPv4Address(f"192.0.2.{ip}"),
            backend_type="vxlan",
            backend_data=f'{{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:{mac:02x}"}}',
        ),
        enable_ipv4=v4 is not None,
        enable_ipv6=v6 is not None,
    )


def added(lease: Lease) -> LeaseEvent:
    return LeaseEvent(EventType.ADDED, lease)


def removed(lease: Lease) -> LeaseEvent:
    return LeaseEvent(EventType.REMOVED, lease)


# Small pools so that subnets repeat, collide with our own, and change attributes.
leases = st.builds(
    lease,
    v4=st.one_of(st.none(), st.integers(0, 4)),
    v6=st.one_of(st.none(), st.integers(0, 4)),
    ip=st.integers(1, 3),
    mac=st.integers(1, 3),
).filter(lambda lease: lease.subnet is not None or lease.ipv6_subnet is not None)
events = st.builds(LeaseEvent, st.sampled_from(EventType), leases)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("update"), st.lists(events, max_size=6)),
        st.tuples(st.just("reset"), st.lists(leases, max_size=6)),
    ),
    max_size=12,
)


def replay(replica: dict[PeerId, Lease], emitted: list[LeaseEvent]) -> None:
    """What a backend does with the events: program Added, undo Removed."""
    for event in emitted:
        key = peer_id(event.lease)
        if event.type is EventType.ADDED:
            replica[key] = event.lease
        elif key in replica:
            # A removal carries the full lease known for the peer: its attrs undo its state.
            assert replica.pop(key) == event.lease


def state(watcher: LeaseWatcher) -> dict[PeerId, Lease]:
    return {peer_id(lease): lease for lease in watcher.leases}


@given(operations)
def test_the_events_reproduce_the_cache_and_never_mention_our_own_lease(ops) -> None:
    watcher = LeaseWatcher(OWN)
    replica: dict[PeerId, Lease] = {}
    for kind, payload in ops:
        emitted = watcher.update(payload) if kind == "update" else watcher.reset(payload)
        assert not any(watcher.is_own(e.lease) for e in emitted)
        replay(replica, emitted)
        assert replica == state(watcher)


@given(st.lists(leases, max_size=8), st.lists(leases, max_size=8))
def test_reset_makes_the_cache_the_snapshot_and_is_idempotent(first, second) -> None:
    watcher = LeaseWatcher(OWN)
    watcher.reset(first)
    watcher.reset(second)
    expected = {peer_id(lease): lease for lease in second if not watcher.is_own(lease)}
    assert state(watcher) == expected
    assert watcher.reset(second) == []


def test_events_for_our_own_subnet_are_ignored() -> None:
    watcher = LeaseWatcher(OWN)
    assert watcher.update([added(lease(0)), added(lease(None, 0)), added(lease(7, 0))]) == []
    assert watcher.leases == ()


def test_removed_event_is_answered_with_the_stored_attrs() -> None:
    watcher = LeaseWatcher(OWN)
    full = lease(1, ip=2, mac=9)
    watcher.update([added(full)])
    bare = Lease(full.subnet, None, LeaseAttrs())  # an etcd DELETE knows only the key
    assert watcher.update([removed(bare)]) == [removed(full)]
    assert watcher.leases == ()


def test_removal_of_an_unknown_subnet_is_passed_on() -> None:
    watcher = LeaseWatcher(OWN)
    assert watcher.update([removed(lease(3))]) == [removed(lease(3))]


def test_reset_reports_changed_attributes() -> None:
    watcher = LeaseWatcher(OWN)
    watcher.reset([lease(1, mac=1), lease(2)])
    # flannel's Reset stays silent about the new MAC of 10.244.1.0/24; here it is an Added.
    assert watcher.reset([lease(1, mac=2), lease(2)]) == [added(lease(1, mac=2))]


def test_reset_removes_vanished_peers_before_adding_new_ones() -> None:
    watcher = LeaseWatcher(OWN)
    watcher.reset([lease(1), lease(2)])
    assert watcher.reset([lease(2), lease(3)]) == [removed(lease(1)), added(lease(3))]


def test_a_peer_whose_ipv6_subnet_moved_is_removed_then_added() -> None:
    watcher = LeaseWatcher(OWN)
    watcher.update([added(lease(1, 1))])
    assert watcher.update([added(lease(1, 2))]) == [removed(lease(1, 1)), added(lease(1, 2))]


def test_apply_handles_snapshots_and_events() -> None:
    watcher = LeaseWatcher(OWN)
    batch = LeaseWatchBatch(snapshot=(lease(1), lease(2)))
    assert watcher.apply(batch) == [added(lease(1)), added(lease(2))]
    assert watcher.apply(LeaseWatchBatch(events=(removed(lease(1)),))) == [removed(lease(1))]
    assert watcher.leases == (lease(2),)
