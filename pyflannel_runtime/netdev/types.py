"""Value types shared by external-interface selection (flannel's `backend.ExternalInterface`)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Protocol

from pyflannel_runtime import PyflannelError

IPAddress = IPv4Address | IPv6Address


class InterfaceError(PyflannelError):
    """Interface selection failed; str(err) is flannel's message."""


class NetViewError(PyflannelError):
    """A kernel query failed; str(err) is the Go-style reason flannel wraps into its message."""


class IpStack(enum.Enum):
    V4 = "ipv4"
    V6 = "ipv6"
    DUAL = "dual"

    @classmethod
    def from_flags(cls, ipv4: bool, ipv6: bool) -> IpStack:
        if ipv4 and ipv6:
            return cls.DUAL
        if ipv4:
            return cls.V4
        if ipv6:
            return cls.V6
        raise InterfaceError("none defined stack")


@dataclass(frozen=True)
class IfAddr:
    """One kernel address: the local IP and the IFA_F_* flags (IFA_FLAGS when present)."""

    ip: IPAddress
    flags: int = 0


@dataclass(frozen=True)
class Link:
    name: str
    index: int
    mtu: int
    addrs: tuple[IfAddr, ...] = ()  # kernel dump order, both families


@dataclass(frozen=True)
class RouteHop:
    """The answer of `ip route get`: output interface and preferred source (if any)."""

    oif: int
    src: IPAddress | None


@dataclass(frozen=True)
class ExternalInterface:
    name: str
    index: int
    mtu: int
    iface_addr: IPv4Address | None
    iface_v6_addr: IPv6Address | None
    ext_addr: IPv4Address | None
    ext_v6_addr: IPv6Address | None


class NetView(Protocol):
    """What selection needs from the kernel; methods raise NetViewError."""

    def links(self) -> Sequence[Link]:
        """All links with their addresses, in kernel index order."""
        ...

    def default_route_oif(self, version: int) -> int | None:
        """Output ifindex of the first main-table default route (0 if it has none), or None."""
        ...

    def route_get(self, ip: IPAddress) -> RouteHop | None:
        """The first route `ip route get` returns, or None when it returns none."""
        ...
