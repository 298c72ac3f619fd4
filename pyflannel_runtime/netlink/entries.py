"""The kernel entries a flannel datapath owns: routes, neighbours and vxlan FDB entries.

These are plain values; `encoder` turns them into netlink messages, `dump` reads them back and
`diff` plans the writes that turn one set into another.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Protocol, TypeVar

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True)
class Route:
    """A unicast route in the main table (protocol boot, scope universe)."""

    dst: IPNetwork
    gateway: IPAddress | None  # None: a device route (never written, only found stale)
    oif: int
    onlink: bool = False
    priority: int = 0

    @property
    def key(self) -> tuple[IPNetwork, int]:
        """What the kernel identifies a main-table route by: a replace overwrites the rest."""
        return (self.dst, self.priority)


@dataclass(frozen=True, slots=True)
class Neigh:
    """A permanent neighbour (ARP/NDP) entry."""

    ifindex: int
    ip: IPAddress
    lladdr: str

    @property
    def key(self) -> tuple[int, IPAddress]:
        return (self.ifindex, self.ip)


@dataclass(frozen=True, slots=True)
class Fdb:
    """A permanent `self` FDB entry on a vxlan device: VTEP MAC -> remote underlay IP."""

    ifindex: int
    lladdr: str
    dst: IPAddress

    @property
    def key(self) -> tuple[int, str]:
        return (self.ifindex, self.lladdr)


Entry = Route | Neigh | Fdb
EntryT = TypeVar("EntryT", Route, Neigh, Fdb)


class Held(Protocol):
    """The caller's own object equal to a decoded entry, or the entry itself.

    A dump of 5 000 peers decodes 15 000 entries, nearly all equal to what the datapath already
    holds; keeping the held objects instead lets the decoded ones go at once, so the full
    reconcile's dump leaves no second copy of the datapath in the heap to pin its pages."""

    def __call__(self, entry: EntryT, /) -> EntryT: ...


def as_decoded(entry: EntryT, /) -> EntryT:
    """`Held` for a caller that holds nothing."""
    return entry


class Action(enum.Enum):
    REPLACE = "replace"  # overwrite whatever holds the key: only for what the datapath owns
    CREATE = "create"  # fails with EEXIST when anything holds the key: never takes one over
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Op:
    action: Action
    entry: Entry


@dataclass(frozen=True)
class DatapathState:
    routes: frozenset[Route] = field(default_factory=frozenset)
    neighs: frozenset[Neigh] = field(default_factory=frozenset)
    fdbs: frozenset[Fdb] = field(default_factory=frozenset)

    @classmethod
    def of(cls, entries: frozenset[Entry] | set[Entry] | list[Entry]) -> DatapathState:
        return cls(
            routes=frozenset(e for e in entries if isinstance(e, Route)),
            neighs=frozenset(e for e in entries if isinstance(e, Neigh)),
            fdbs=frozenset(e for e in entries if isinstance(e, Fdb)),
        )

    def entries(self) -> frozenset[Entry]:
        return frozenset[Entry]().union(self.routes, self.neighs, self.fdbs)
