"""Planning kernel writes: applying the plan to a model of the kernel yields the desired state."""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, ip_address, ip_network

from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.netlink.diff import creation_ops, desired_state, diff_ops, removal_ops
from pyflannel_runtime.netlink.entries import (
    Action,
    DatapathState,
    Entry,
    Fdb,
    IPAddress,
    Neigh,
    Op,
    Route,
)


@dataclass
class FakeKernel:
    """Kernel semantics for what we send: replace overwrites by key, create fails (False)
    where anything holds the key; a vxlan MAC may hold several remotes, a replace rewrites its
    first one, a delete removes the named one. `foreign` routes are the kernel's or an
    operator's: a dump of what flannel owns does not show them, but they hold their keys."""

    routes: dict[object, Route] = field(default_factory=dict)
    neighs: dict[object, Neigh] = field(default_factory=dict)
    fdb: dict[tuple[int, str], list[IPAddress]] = field(default_factory=dict)
    foreign: dict[object, Route] = field(default_factory=dict)

    def apply(self, op: Op) -> bool:
        e = op.entry
        write = op.action is not Action.DELETE
        if isinstance(e, Route):
            if op.action is Action.CREATE and (e.key in self.routes or e.key in self.foreign):
                return False
            if write:
                self.foreign.pop(e.key, None)
                self.routes[e.key] = e
            else:
                self.routes.pop(e.key, None)
        elif isinstance(e, Neigh):
            if write:
                self.neighs[e.key] = e
            else:
                self.neighs.pop(e.key, None)
        else:
            remotes = self.fdb.get(e.key)
            if write:
                if remotes is None:
                    self.fdb[e.key] = [e.dst]
                elif e.dst not in remotes:
                    remotes[0] = e.dst
            elif remotes is not None and e.dst in remotes:
                remotes.remove(e.dst)
                if not remotes:
                    del self.fdb[e.key]
        return True

    def state(self) -> DatapathState:
        fdbs = {Fdb(i, mac, dst) for (i, mac), dsts in self.fdb.items() for dst in dsts}
        return DatapathState(
            frozenset(self.routes.values()), frozenset(self.neighs.values()), frozenset(fdbs)
        )


SUBNETS = [IPv4Network(f"10.244.{i}.0/24") for i in range(1, 6)]
IPS = [IPv4Address(f"192.0.2.{i}") for i in range(1, 6)]
MACS = [f"0a:58:0a:f4:0{i}:00" for i in range(1, 5)]
IFINDEX = st.sampled_from([3, 4])

routes = st.builds(
    Route,
    st.sampled_from(SUBNETS),
    st.one_of(st.none(), st.sampled_from(IPS)),
    IFINDEX,
    st.booleans(),
    st.sampled_from([0, 100]),
)
neighs = st.builds(Neigh, IFINDEX, st.sampled_from(IPS), st.sampled_from(MACS))
fdbs = st.builds(Fdb, IFINDEX, st.sampled_from(MACS), st.sampled_from(IPS))
entries = st.lists(st.one_of(routes, neighs, fdbs), max_size=20)


@st.composite
def kernels(draw: st.DrawFn) -> FakeKernel:
    kernel = FakeKernel()
    for e in draw(entries):
        if isinstance(e, Fdb):
            remotes = kernel.fdb.setdefault(e.key, [])
            if e.dst not in remotes:
                remotes.append(e.dst)
        else:
            kernel.apply(Op(Action.REPLACE, e))
    return kernel


@given(entries, kernels())
def test_applying_the_plan_yields_the_desired_state(
    wanted: list[Entry], kernel: FakeKernel
) -> None:
    desired = desired_state(wanted)
    for op in diff_ops(desired, kernel.state()):
        assert kernel.apply(op), op
    assert kernel.state() == desired


@given(entries, kernels(), st.lists(routes, max_size=5))
def test_the_plan_never_takes_over_a_route_that_is_not_owned(
    wanted: list[Entry], kernel: FakeKernel, foreign: list[Route]
) -> None:
    owned = kernel.state()
    for route in foreign:
        if route.key not in kernel.routes:
            kernel.foreign[route.key] = route
    held = dict(kernel.foreign)
    for op in diff_ops(desired_state(wanted), owned):
        kernel.apply(op)
    assert kernel.foreign == held


@given(entries)
def test_no_writes_when_in_sync(wanted: list[Entry]) -> None:
    desired = desired_state(wanted)
    assert diff_ops(desired, desired) == []


@given(entries, kernels())
def test_order_is_replaces_then_deletes_each_neigh_fdb_route(
    wanted: list[Entry], kernel: FakeKernel
) -> None:
    ops = diff_ops(desired_state(wanted), kernel.state())
    # neighbours and FDB entries are only ever replaced; routes replaced or created
    assert all(
        op.action in (Action.REPLACE, Action.DELETE)
        for op in ops
        if not isinstance(op.entry, Route)
    )
    assert all(op.action in Action for op in ops)
    rank = {Neigh: 0, Fdb: 1, Route: 2}
    keys = [(op.action is Action.DELETE, rank[type(op.entry)]) for op in ops]
    assert keys == sorted(keys)


@given(entries)
def test_a_cold_start_writes_what_the_diff_against_an_empty_kernel_writes(
    wanted: list[Entry],
) -> None:
    desired = desired_state(wanted)
    planned = diff_ops(desired, DatapathState())
    created = creation_ops(desired.routes, desired.neighs, desired.fdbs)
    assert sorted(created, key=repr) == sorted(planned, key=repr)
    # In the diff's order of kinds: neighbours, FDB entries, routes.
    order: tuple[type, ...] = (Neigh, Fdb, Route)
    kinds = [order.index(type(op.entry)) for op in created]
    assert kinds == sorted(kinds)


@given(entries)
def test_desired_state_keeps_the_last_entry_per_key(wanted: list[Entry]) -> None:
    """As replaces sent in this order would leave the kernel, for routes, neighbours and FDB."""
    last = {(type(e), e.key): e for e in wanted}
    assert desired_state(wanted) == DatapathState.of(list(last.values()))


def test_desired_state_keeps_the_later_of_two_entries_of_each_kind() -> None:
    gateway = ip_address("10.244.2.0")
    pairs = [
        (Route(SUBNETS[0], IPS[0], 3), Route(SUBNETS[0], IPS[1], 3)),
        (Neigh(3, gateway, MACS[0]), Neigh(3, gateway, MACS[1])),
        (Fdb(3, MACS[0], IPS[0]), Fdb(3, MACS[0], IPS[1])),
    ]
    for first, later in pairs:
        assert desired_state([first, later]).entries() == {later}


def test_a_route_is_created_unless_an_owned_one_holds_its_key() -> None:
    new = Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.3"), 3)
    other = Route(ip_network("10.244.3.0/24"), ip_address("192.0.2.3"), 3)
    neigh = Neigh(3, ip_address("10.244.2.0"), MACS[0])
    desired = DatapathState(routes=frozenset({new, other}), neighs=frozenset({neigh}))
    owned = DatapathState(routes=frozenset({Route(other.dst, ip_address("192.0.2.9"), 3)}))
    ops = diff_ops(desired, owned)
    assert ops[0] == Op(Action.REPLACE, neigh)  # on flannel's own devices: always flannel's
    assert set(ops[1:]) == {Op(Action.CREATE, new), Op(Action.REPLACE, other)}


def test_changed_peer_is_replaced_not_deleted() -> None:
    old = Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.2"), 3)
    new = Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.3"), 3)
    assert diff_ops(
        DatapathState(routes=frozenset({new})), DatapathState(routes=frozenset({old}))
    ) == [Op(Action.REPLACE, new)]


def test_removal_order_is_neighbour_fdb_route() -> None:
    route = Route(ip_network("10.244.2.0/24"), ip_address("10.244.2.0"), 3, onlink=True)
    neigh = Neigh(3, ip_address("10.244.2.0"), MACS[0])
    fdb = Fdb(3, MACS[0], ip_address("192.0.2.2"))
    assert [op.entry for op in removal_ops([route, fdb, neigh])] == [neigh, fdb, route]
