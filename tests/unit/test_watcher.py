"""The LeaseWatcher (flannel-io/flannel pkg/lease/lease.go), with flannel's quirks fixed
(docs/compatibility.md, "Snapshots that change a peer", "Leases outside the Network")."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network, IPv6Network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.subnet.manager import LeaseWatchBatch
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher, PeerId, peer_id
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config

SCOPE = LeaseScope(IPv4Network("10.244.0.0/16"), IPv6Network("fd00::/48"))
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
            old = replica.get(key)
            # A backend installs an Added peer's routes over what it has; a route for another
            # subnet of the same peer stays behind unless a Removed came first.
            assert old is None or (old.subnet, old.ipv6_subnet) == (
                event.lease.subnet,
                event.lease.ipv6_subnet,
            )
            replica[key] = event.lease
        elif key in replica:
            # A removal carries the full lease known for the peer: its attrs undo its state.
            assert replica.pop(key) == event.lease


def state(watcher: LeaseWatcher) -> dict[PeerId, Lease]:
    return {peer_id(lease): lease for lease in watcher.leases}


# This node as dual-stack, v4-only and v6-only, each with the scope it programs.
NODES = [
    (OWN, SCOPE),
    (lease(0), LeaseScope(SCOPE.network)),
    (lease(None, 0), LeaseScope(None, SCOPE.ipv6_network)),
]
nodes = st.sampled_from(NODES)


def drive(
    ops: list[tuple[str, Any]], node: tuple[Lease, LeaseScope] = (OWN, SCOPE)
) -> Iterator[tuple[LeaseWatcher, list[LeaseEvent]]]:
    """Run the operations, checking after each that replaying the events gives the cache."""
    watcher = LeaseWatcher(*node)
    replica: dict[PeerId, Lease] = {}
    for kind, payload in ops:
        emitted = watcher.update(payload) if kind == "update" else watcher.reset(payload)
        yield watcher, emitted
        replay(replica, emitted)
        assert replica == state(watcher)


@given(operations, nodes)
def test_the_events_reproduce_the_cache_and_never_mention_our_own_lease(ops, node) -> None:
    own = node[0]
    for _, emitted in drive(ops, node):
        for event in emitted:
            shares = [(event.lease.subnet, own.subnet), (event.lease.ipv6_subnet, own.ipv6_subnet)]
            assert not any(mine is not None and theirs == mine for theirs, mine in shares)


@given(st.lists(leases, max_size=8), st.lists(leases, max_size=8), nodes)
def test_reset_makes_the_cache_the_snapshot_and_is_idempotent(first, second, node) -> None:
    watcher = LeaseWatcher(*node)
    watcher.reset(first)
    watcher.reset(second)
    expected = {peer_id(lease): lease for lease in second if not watcher.is_own(lease)}
    assert state(watcher) == expected
    assert watcher.reset(second) == []


def test_events_for_our_own_subnet_are_ignored() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    assert watcher.update([added(lease(0)), added(lease(None, 0)), added(lease(7, 0))]) == []
    assert watcher.leases == ()


def test_removed_event_is_answered_with_the_stored_attrs() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    full = lease(1, ip=2, mac=9)
    watcher.update([added(full)])
    bare = Lease(full.subnet, None, LeaseAttrs())  # an etcd DELETE knows only the key
    assert watcher.update([removed(bare)]) == [removed(full)]
    assert watcher.leases == ()


def test_removal_of_an_unknown_subnet_is_passed_on() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    assert watcher.update([removed(lease(3))]) == [removed(lease(3))]


def test_reset_reports_changed_attributes() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    watcher.reset([lease(1, mac=1), lease(2)])
    # flannel's Reset stays silent about the new MAC of 10.244.1.0/24; here it is an Added.
    assert watcher.reset([lease(1, mac=2), lease(2)]) == [added(lease(1, mac=2))]


def test_reset_removes_vanished_peers_before_adding_new_ones() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    watcher.reset([lease(1), lease(2)])
    assert watcher.reset([lease(2), lease(3)]) == [removed(lease(1)), added(lease(3))]


def test_a_peer_whose_ipv6_subnet_moved_is_removed_then_added() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    watcher.update([added(lease(1, 1))])
    assert watcher.update([added(lease(1, 2))]) == [removed(lease(1, 1)), added(lease(1, 2))]


def test_a_renewal_withdraws_nothing() -> None:
    """A peer renewing its lease (same subnets, a new expiry and revision) is an Added event
    again: passed on as it is, never preceded by a Removed, which would have the backend
    withdraw the peer's routes and program them again."""
    watcher = LeaseWatcher(OWN, SCOPE)
    first = dataclasses.replace(lease(1, 1), expiration=1000.0, asof=5)
    watcher.update([added(first)])
    renewed = dataclasses.replace(first, expiration=87400.0, asof=9)
    assert watcher.update([added(renewed)]) == [added(renewed)]
    assert watcher.leases == (renewed,)


@given(leases, st.floats(0, 1e10), st.integers(0, 2**40), st.integers(1, 3), st.integers(1, 3))
def test_an_added_event_with_the_same_subnets_never_emits_a_removal(
    peer: Lease, expiry: float, revision: int, ip: int, mac: int
) -> None:
    """Same subnets, whatever else changed (expiry, revision, public IP, VTEP MAC): the new
    lease is programmed over the old one, with nothing withdrawn in between."""
    watcher = LeaseWatcher(OWN, SCOPE)
    if watcher.is_own(peer):
        return
    watcher.update([added(peer)])
    attrs = lease(0, ip=ip, mac=mac).attrs
    again = dataclasses.replace(peer, attrs=attrs, expiration=expiry, asof=revision)
    assert watcher.update([added(again)]) == [added(again)]


def test_reset_removes_a_peer_whose_ipv6_subnet_moved_before_adding_it() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    watcher.reset([lease(1, 1), lease(2, 2)])
    assert watcher.reset([lease(1, 3), lease(2, 2)]) == [removed(lease(1, 1)), added(lease(1, 3))]


@pytest.mark.parametrize("node", NODES, ids=["dual-stack", "v4-only", "v6-only"])
def test_peers_of_every_kind_are_not_taken_for_this_node(node: tuple[Lease, LeaseScope]) -> None:
    """A v6-only node has no IPv4 subnet: a v6-only peer has none either, and is still a peer
    (likewise without IPv6)."""
    watcher = LeaseWatcher(*node)
    peers = [lease(1), lease(None, 1), lease(None, 3), lease(2, 2), lease(4)]
    assert not any(watcher.is_own(peer) for peer in peers)
    assert [peer_id(peer) for peer in peers] == [
        peer.subnet if peer.subnet is not None else peer.ipv6_subnet for peer in peers
    ]
    assert watcher.update([added(peer) for peer in peers]) == [added(peer) for peer in peers]
    assert watcher.leases == tuple(peers)


def test_every_event_of_a_batch_counts_past_own_and_rejected_leases() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    batch = [added(lease(0)), added(lease(1)), added(odd_lease("192.0.2.0/24")), added(lease(2))]
    assert watcher.update(batch) == [added(lease(1)), added(lease(2))]
    assert watcher.leases == (lease(1), lease(2))
    gone = [removed(lease(0)), removed(odd_lease("192.0.2.0/24")), removed(lease(1))]
    assert watcher.update(gone) == [removed(lease(1))]
    assert watcher.leases == (lease(2),)


def test_removing_an_unknown_peer_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        LeaseWatcher(OWN, SCOPE).update([removed(lease(3, 3))])
    assert caplog.messages == ["Removed subnet (10.244.3.0-24&fd00:0:0:3::-64) was not found"]


def test_scope_of_a_config_takes_only_the_enabled_families_and_etcd_lengths() -> None:
    both = NetworkConfig(
        network=IPv4Network("10.244.0.0/16"),
        enable_ipv6=True,
        ipv6_network=IPv6Network("fd00::/48"),
    )
    v6_only = check_network_config(dataclasses.replace(both, enable_ipv4=False))
    assert LeaseScope.of(v6_only, check_lengths=True) == LeaseScope(
        None, IPv6Network("fd00::/48"), 0, 64
    )
    assert LeaseScope.of(v6_only, check_lengths=False) == LeaseScope(
        None, IPv6Network("fd00::/48"), 0, 0
    )
    v4_only = check_network_config(dataclasses.replace(both, enable_ipv6=False))
    assert LeaseScope.of(v4_only, check_lengths=True) == LeaseScope(
        IPv4Network("10.244.0.0/16"), None, 24, 0
    )


def test_a_scope_checks_without_an_own_lease() -> None:
    assert SCOPE.rejection(odd_lease("10.244.5.0/24", "fd00:0:0:5::/64")) is None
    assert SCOPE.rejection(odd_lease(None, "fd01::/64")) == (
        "IPv6 subnet fd01::/64 is outside the network fd00::/48"
    )


def test_a_snapshot_batch_also_delivers_its_events() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    batch = LeaseWatchBatch(snapshot=(lease(1), lease(2)), events=(removed(lease(2)),))
    assert watcher.apply(batch) == [added(lease(1)), added(lease(2)), removed(lease(2))]
    assert watcher.leases == (lease(1),)


def test_apply_handles_snapshots_and_events() -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    batch = LeaseWatchBatch(snapshot=(lease(1), lease(2)))
    assert watcher.apply(batch) == [added(lease(1)), added(lease(2))]
    assert watcher.apply(LeaseWatchBatch(events=(removed(lease(1)),))) == [removed(lease(1))]
    assert watcher.leases == (lease(2),)


# --- containment: only leases inside the network are peers -------------------------------------


def odd_lease(v4: str | None, v6: str | None = None) -> Lease:
    return Lease(
        IPv4Network(v4) if v4 else None,
        IPv6Network(v6) if v6 else None,
        LeaseAttrs(IPv4Address("192.0.2.20"), backend_type="vxlan"),
        enable_ipv4=v4 is not None,
        enable_ipv6=v6 is not None,
    )


@pytest.mark.parametrize(
    ("v4", "v6", "why"),
    [
        ("192.0.2.0/24", None, "subnet 192.0.2.0/24 is outside the network 10.244.0.0/16"),
        ("10.99.0.0/24", None, "subnet 10.99.0.0/24 is outside the network 10.244.0.0/16"),
        ("10.0.0.0/8", None, "subnet 10.0.0.0/8 is outside the network 10.244.0.0/16"),
        ("10.244.0.0/16", None, "subnet 10.244.0.0/16 overlaps this node's subnet 10.244.0.0/24"),
        ("10.244.0.128/25", None, "subnet 10.244.0.128/25 overlaps this node's subnet "
                                  "10.244.0.0/24"),
        ("10.244.5.0/24", "fd01::/64", "IPv6 subnet fd01::/64 is outside the network fd00::/48"),
        (None, "fd00::/40", "IPv6 subnet fd00::/40 is outside the network fd00::/48"),
        (None, "fd00::/56", "IPv6 subnet fd00::/56 overlaps this node's subnet fd00::/64"),
        ("10.244.5.0/24", "fd00:0:0:5::/64", None),
        ("10.244.5.0/25", None, None),  # no length is configured (Kubernetes mode)
    ],
)  # fmt: skip
def test_scope_rejections(v4: str | None, v6: str | None, why: str | None) -> None:
    assert SCOPE.rejection(odd_lease(v4, v6), OWN) == why


def test_in_etcd_mode_a_lease_must_have_the_configured_length() -> None:
    config = NetworkConfig(
        network=IPv4Network("10.244.0.0/16"),
        enable_ipv6=True,
        ipv6_network=IPv6Network("fd00::/48"),
    )
    checked = check_network_config(config)
    etcd = LeaseScope.of(checked, check_lengths=True)
    kube = LeaseScope.of(checked, check_lengths=False)
    narrow = odd_lease("10.244.2.128/25")  # inside a peer's /24: would take half its traffic
    assert etcd.rejection(narrow, OWN) == (
        "subnet 10.244.2.128/25 is not a /24 (the configured subnet length)"
    )
    assert kube.rejection(narrow, OWN) is None
    assert etcd.rejection(odd_lease("10.244.2.0/24", "fd00:0:0:2::/80"), OWN) == (
        "IPv6 subnet fd00:0:0:2::/80 is not a /64 (the configured subnet length)"
    )
    assert etcd.rejection(odd_lease("10.244.2.0/24", "fd00:0:0:2::/64"), OWN) is None


def test_a_lease_with_no_subnet_in_either_family_is_rejected_by_every_node() -> None:
    empty = odd_lease(None)
    assert empty.key() == "0.0.0.0-0"
    for _, scope in NODES:
        assert scope.rejection(empty) == (
            "no subnet in either family (IPv4 part 0.0.0.0/0, no IPv6 part)"
        )
    watcher = LeaseWatcher(OWN, SCOPE)
    assert watcher.reset([empty, lease(1)]) == [added(lease(1))]
    assert watcher.update([added(empty), removed(empty)]) == []


def test_a_family_this_node_does_not_program_is_not_checked() -> None:
    v4_only = LeaseScope(IPv4Network("10.244.0.0/16"))
    assert v4_only.rejection(odd_lease("10.244.5.0/24", "fd99::/64"), OWN) is None
    assert v4_only.rejection(odd_lease(None, "fd99::/64")) is None


OUTSIDE = [
    odd_lease("192.0.2.0/24"),
    odd_lease("10.99.0.0/24"),
    odd_lease("10.244.0.0/25"),
    odd_lease(None),  # the key "0.0.0.0-0": no subnet in either family
]
mixed = st.one_of(leases, st.sampled_from(OUTSIDE))
mixed_operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("update"), st.lists(st.builds(LeaseEvent, st.sampled_from(EventType), mixed))
        ),
        st.tuples(st.just("reset"), st.lists(mixed, max_size=6)),
    ),
    max_size=12,
)


@given(mixed_operations)
def test_no_event_ever_carries_a_lease_outside_the_scope(ops) -> None:
    for watcher, emitted in drive(ops):
        assert all(SCOPE.rejection(e.lease, OWN) is None for e in emitted)
        assert all(SCOPE.rejection(lease, OWN) is None for lease in watcher.leases)


def test_a_rejected_lease_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    watcher = LeaseWatcher(OWN, SCOPE)
    hostile = odd_lease("192.0.2.0/24")
    warning = (
        "Ignoring lease 192.0.2.0-24: subnet 192.0.2.0/24 is outside the network 10.244.0.0/16"
    )
    steps = [
        (lambda: watcher.reset([hostile, lease(1)]), [added(lease(1))], 1),
        (lambda: watcher.update([added(hostile)]), [], 1),
        (lambda: watcher.reset([hostile, lease(1)]), [], 1),
        (lambda: watcher.update([removed(Lease(hostile.subnet, None, LeaseAttrs()))]), [], 1),
        (lambda: watcher.update([added(hostile)]), [], 2),  # again after its removal
    ]
    with caplog.at_level(logging.WARNING):
        for step, events, warned in steps:
            assert step() == events
            assert caplog.messages == [warning] * warned
    assert watcher.leases == (lease(1),)
