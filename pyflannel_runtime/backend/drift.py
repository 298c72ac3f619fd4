"""Drift told by the kernel's own notifications: which of a datapath's entries someone else
deleted or changed, and the writes that put them back.

The rules are the full reconcile's (`netlink.diff`, with `netlink.dump`'s ownership), applied
to the entries the notifications name, so a repair needs no dump: a wanted neighbour or FDB
entry that went or changed is replaced; a wanted route that went is created again, one that
changed is replaced only where the route now there is flannel's, else left alone as the
reconcile leaves it; an entry of flannel's kind that no lease explains (a neighbour or FDB
entry on flannel's device, a second remote for a VTEP MAC, a flannel-style route) is deleted.
The datapath's own writes notify too: they are what is wanted, or deletes of what is not.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pyflannel_runtime.netlink.diff import creation_ops, diff_ops
from pyflannel_runtime.netlink.dump import Ownership, main_route_key, owns_route, route_facts
from pyflannel_runtime.netlink.encoder import AF_BRIDGE, NTF_SELF, NUD_PERMANENT
from pyflannel_runtime.netlink.entries import (
    Action,
    DatapathState,
    Entry,
    EntryT,
    Fdb,
    IPAddress,
    IPNetwork,
    Neigh,
    Op,
    Route,
)
from pyflannel_runtime.netlink.monitor import NeighEvent, RouteEvent

Outer = TypeVar("Outer", bound=Hashable)
Inner = TypeVar("Inner", bound=Hashable)


class KeyTable(Generic[Outer, Inner, EntryT]):
    """Entries by kernel key, a dict in a dict: one level for the part of the key that takes
    few values (the device, the route metric), one for the part that tells the entries apart
    (a destination, an IP, a MAC: objects each entry holds anyway). One dict keyed by the key
    tuples would hold a tuple per entry besides, 15 000 of them (0.8 MiB) at 5 000 peers."""

    def __init__(self, split: Callable[[EntryT], tuple[Outer, Inner]]) -> None:
        self._split: Callable[[EntryT], tuple[Outer, Inner]] = split
        self._tables: dict[Outer, dict[Inner, EntryT]] = {}

    def get_for(self, entry: EntryT) -> EntryT | None:
        """The entry held under `entry`'s key."""
        outer, inner = self._split(entry)
        table = self._tables.get(outer)
        return None if table is None else table.get(inner)

    def get(self, outer: Outer, inner: Inner) -> EntryT | None:
        table = self._tables.get(outer)
        return None if table is None else table.get(inner)

    def put(self, entry: EntryT) -> None:
        outer, inner = self._split(entry)
        self._tables.setdefault(outer, {})[inner] = entry

    def discard(self, entry: EntryT) -> None:
        """Forget `entry` (not another entry that took its key since)."""
        outer, inner = self._split(entry)
        table = self._tables.get(outer)
        if table is not None and table.get(inner) == entry:
            del table[inner]
            if not table:
                del self._tables[outer]

    def values(self) -> Iterator[EntryT]:
        for table in self._tables.values():
            yield from table.values()

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables.values())


def _route_split(route: Route) -> tuple[int, IPNetwork]:
    return route.priority, route.dst


def _neigh_split(neigh: Neigh) -> tuple[int, IPAddress]:
    return neigh.ifindex, neigh.ip


def _fdb_split(fdb: Fdb) -> tuple[int, str]:
    return fdb.ifindex, fdb.lladdr


class Wanted:
    """The entries the datapath holds in the kernel, by kernel key."""

    def __init__(self) -> None:
        self.routes: KeyTable[int, IPNetwork, Route] = KeyTable(_route_split)
        self.neighs: KeyTable[int, IPAddress, Neigh] = KeyTable(_neigh_split)
        self.fdbs: KeyTable[int, str, Fdb] = KeyTable(_fdb_split)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Wanted:
        wanted = cls()
        for entry in entries:
            wanted.add(entry)
        return wanted

    def add(self, entry: Entry) -> None:
        self._table(entry).put(entry)

    def discard(self, entry: Entry) -> None:
        """Forget `entry` (not another entry that took its key since)."""
        self._table(entry).discard(entry)

    def held(self, entry: EntryT) -> EntryT:
        """The wanted entry equal to `entry`, else `entry` (`netlink.entries.Held`)."""
        kept = self._table(entry).get_for(entry)
        return kept if kept == entry else entry

    def _table(self, entry: Entry) -> KeyTable[Any, Any, Any]:
        """The table of `entry`'s kind."""
        if isinstance(entry, Route):
            return self.routes
        if isinstance(entry, Neigh):
            return self.neighs
        return self.fdbs

    def state(self) -> DatapathState:
        """The wanted entries as `netlink.diff.desired_state` gives them (one per key)."""
        return DatapathState(
            frozenset(self.routes.values()),
            frozenset(self.neighs.values()),
            frozenset(self.fdbs.values()),
        )

    def creation_ops(self) -> list[Op]:
        """The writes of every wanted entry into a kernel that holds none of the datapath's."""
        return creation_ops(self.routes.values(), self.neighs.values(), self.fdbs.values())

    def __len__(self) -> int:
        return len(self.routes) + len(self.neighs) + len(self.fdbs)


# The kinds of entries a repair puts back, as the agent's metrics name them.
REPAIR_KINDS = ("route", "neighbour", "fdb")


def repair_kind(entry: Entry) -> str:
    if isinstance(entry, Route):
        return "route"
    return "neighbour" if isinstance(entry, Neigh) else "fdb"


def kernel_key(entry: Entry) -> tuple[type, object]:
    """An entry's kernel key, told apart by kind."""
    return type(entry), entry.key


@dataclass(frozen=True)
class KernelSurvey:
    """The datapath's kernel entries as a dump read them without the datapath's lock, the
    ownership they were read under, and the kernel keys of every write sent since the dump
    began (filled in as they are sent): the kernel's word on those keys is newer than the
    dump's. `doubts` counts what had cast doubt on the notifications when the dump began."""

    state: DatapathState
    ownership: Ownership
    written: set[tuple[type, object]]
    doubts: int

    def ops(self, desired: DatapathState) -> list[Op]:
        """`netlink.diff.diff_ops` from the dump to `desired`, but for the keys written since
        the dump began (each op follows from the entries of its own key alone)."""
        ops = diff_ops(desired, self.state)
        if not self.written:
            return ops
        return [op for op in ops if kernel_key(op.entry) not in self.written]


def repairs(
    wanted: Wanted, events: Iterable[RouteEvent | NeighEvent], ownership: Ownership
) -> list[Op]:
    """The writes that undo what `events` (in the order the kernel sent them) did; the last
    word on each entry counts. Order as `netlink.diff`: neighbours, FDB, routes, then deletes
    in the same order."""
    # What holds each route key now: None when nothing does, else the route (None where it
    # is not a unicast route through a device, a blackhole say) and whether it is flannel's.
    routes: dict[tuple[IPNetwork, int], tuple[Route | None, bool] | None] = {}
    neighs: dict[tuple[int, IPAddress], Neigh | None] = {}
    fdbs: dict[Fdb, bool] = {}  # a MAC may have several remotes: each one on its own
    for event in events:
        if isinstance(event, RouteEvent):
            key = main_route_key(event.route)
            if key is None:
                continue
            facts = route_facts(event.route)
            if event.deleted:
                routes[key] = None
            elif facts is None:
                routes[key] = (None, False)
            else:
                routes[key] = (facts.route, owns_route(facts, ownership))
            continue
        record = event.neigh
        if record.ifindex not in ownership.devices or record.dst is None:
            continue  # cni0's neighbours come and go all the time: nothing of flannel's
        permanent = bool(record.state & NUD_PERMANENT) and not event.deleted
        if record.family == AF_BRIDGE:
            if record.lladdr is not None and record.flags & NTF_SELF:
                fdbs[Fdb(record.ifindex, record.lladdr, record.dst)] = permanent
        else:
            seen = Neigh(record.ifindex, record.dst, record.lladdr or "") if permanent else None
            neighs[(record.ifindex, record.dst)] = seen

    upserts: list[Op] = []
    deletes: list[Op] = []
    for neigh_key, neigh in neighs.items():
        want_neigh = wanted.neighs.get(*neigh_key)
        if want_neigh is not None and neigh != want_neigh:
            upserts.append(Op(Action.REPLACE, want_neigh))
        elif want_neigh is None and neigh is not None:
            deletes.append(Op(Action.DELETE, neigh))  # no lease explains it
    for fdb, present in fdbs.items():
        want_fdb = wanted.fdbs.get_for(fdb)
        if fdb == want_fdb and not present:
            upserts.append(Op(Action.REPLACE, want_fdb))
        elif fdb != want_fdb and present:
            deletes.append(Op(Action.DELETE, fdb))  # a stale entry, or a second remote
    for route_key, route_seen in routes.items():
        want_route = wanted.routes.get(route_key[1], route_key[0])
        if want_route is None:
            if route_seen is not None and route_seen[0] is not None and route_seen[1]:
                deletes.append(Op(Action.DELETE, route_seen[0]))
        elif route_seen is None:
            upserts.append(Op(Action.CREATE, want_route))  # never over a route put there since
        elif route_seen[0] != want_route and route_seen[1]:
            upserts.append(Op(Action.REPLACE, want_route))
    return upserts + deletes
