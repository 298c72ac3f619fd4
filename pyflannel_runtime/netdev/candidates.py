"""Pure address and regex logic of flannel's interface selection (pkg/ip, pkg/ipmatch)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TypeVar

from pyflannel_runtime.netdev.types import IfAddr, IPAddress, IpStack, Link

IFA_F_SECONDARY = 0x01
IFA_F_TEMPORARY = IFA_F_SECONDARY  # same bit: IPv4 secondaries rank like IPv6 temporaries
IFA_F_DEPRECATED = 0x20
IFA_F_PERMANENT = 0x80

_V4_BROADCAST = IPv4Address("255.255.255.255")


def parse_go_ip(text: str) -> IPAddress | None:
    """Parse like Go's net.ParseIP: plain v4/v6 literals only; v4-mapped v6 counts as v4."""
    if "%" in text:
        return None
    try:
        ip = ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_link_local_unicast(ip: IPAddress) -> bool:
    return ip.is_link_local


def is_global_unicast(ip: IPAddress) -> bool:
    """Go's IP.IsGlobalUnicast: private ranges count as global, unlike Python's is_global."""
    return not (
        ip.is_unspecified
        or ip.is_loopback
        or ip.is_multicast
        or ip.is_link_local
        or ip == _V4_BROADCAST
    )


def _preference(addr: IfAddr) -> tuple[bool, bool, bool]:
    # global before link-local, static before dynamic, stable before temporary
    return (
        not is_global_unicast(addr.ip),
        not addr.flags & IFA_F_PERMANENT,
        bool(addr.flags & IFA_F_TEMPORARY),
    )


def usable_addresses(addrs: Iterable[IfAddr], version: int) -> list[IPAddress]:
    """GetInterfaceIP4Addrs/IP6Addrs: usable addresses of one family, most preferred first.

    Go sorts with an unstable sort before filtering; filtering first and sorting stably gives
    the same order on the survivors and keeps kernel order among equals.
    """
    usable = [
        a
        for a in addrs
        if a.ip.version == version
        and (is_global_unicast(a.ip) or is_link_local_unicast(a.ip))
        and not a.flags & IFA_F_DEPRECATED
    ]
    return [a.ip for a in sorted(usable, key=_preference)]


def usable_v4_addresses(addrs: Iterable[IfAddr]) -> list[IPv4Address]:
    return [ip for ip in usable_addresses(addrs, 4) if isinstance(ip, IPv4Address)]


def usable_v6_addresses(addrs: Iterable[IfAddr]) -> list[IPv6Address]:
    return [ip for ip in usable_addresses(addrs, 6) if isinstance(ip, IPv6Address)]


_Ip = TypeVar("_Ip", IPv4Address, IPv6Address)


def _first_match(pattern: re.Pattern[str], ips: Sequence[_Ip]) -> _Ip | None:
    return next((ip for ip in ips if pattern.search(str(ip))), None)


@dataclass(frozen=True)
class RegexMatch:
    link: Link
    addr: IPv4Address | None  # set when the match came from an IP string
    v6_addr: IPv6Address | None


def regex_candidate(
    links: Sequence[Link], pattern: re.Pattern[str], stack: IpStack
) -> RegexMatch | None:
    """`--iface-regex`: IP strings of every link first (index order), then link names.

    Dual stack needs a v4 and a v6 match on the same link. Go keeps a v4 match from a link
    whose v6 addresses did not match and pairs it with a later name match on another link;
    here a name match always resolves its addresses from its own link.
    """
    for link in links:
        v4 = usable_v4_addresses(link.addrs)
        v6 = usable_v6_addresses(link.addrs)
        if stack is IpStack.V4:
            hit4 = _first_match(pattern, v4)
            if hit4 is not None:
                return RegexMatch(link, hit4, None)
        elif stack is IpStack.V6:
            hit6 = _first_match(pattern, v6)
            if hit6 is not None:
                return RegexMatch(link, None, hit6)
        else:
            hit4 = _first_match(pattern, v4)
            hit6 = _first_match(pattern, v6)
            if hit4 is not None and hit6 is not None:
                return RegexMatch(link, hit4, hit6)
    for link in links:
        if pattern.search(link.name):
            return RegexMatch(link, None, None)
    return None


def describe_links(links: Sequence[Link], stack: IpStack) -> str:
    """The `eth0:[10.0.0.5 10.0.0.6], lo:[]` list of flannel's regex error (Go's %v of []net.IP)."""
    version = 6 if stack is IpStack.V6 else 4
    return ", ".join(
        f"{link.name}:[{' '.join(str(ip) for ip in usable_addresses(link.addrs, version))}]"
        for link in links
    )
