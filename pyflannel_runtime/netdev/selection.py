"""flannel's external-interface selection (main.go order + ipmatch.LookupExtIface) on a NetView.

Messages and log lines are flannel's, verbatim. Deliberate differences from Go:
* dual stack with an IPv6 `--iface` and no `--public-ipv6` (a nil dereference in Go) looks up
  that IPv6 address itself;
* `--public-ip` must be IPv4 and `--public-ipv6` IPv6 (Go accepts either family in both);
* the can-reach route source fills the address of its own family (Go always stores it as the
  IPv4 interface address).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address
from typing import TypeVar

from pyflannel_runtime.netdev.candidates import (
    describe_links,
    parse_go_ip,
    regex_candidate,
    usable_v4_addresses,
    usable_v6_addresses,
)
from pyflannel_runtime.netdev.types import (
    ExternalInterface,
    InterfaceError,
    IPAddress,
    IpStack,
    Link,
    NetView,
    NetViewError,
)

log = logging.getLogger("pyflannel.iface")

# Go's net.InterfaceByName / InterfaceByIndex error text
_NO_SUCH_INTERFACE = "route ip+net: no such network interface"

_Ip = TypeVar("_Ip", IPv4Address, IPv6Address)
_Resolved = tuple[Link, IPv4Address | None, IPv6Address | None]


def select_on_view(
    view: NetView,
    ifaces: Sequence[str],
    iface_regexes: Sequence[str],
    can_reach: str,
    public_ip: str,
    public_ipv6: str,
    stack: IpStack,
) -> ExternalInterface:
    """main.go: `--iface` values, then `--iface-regex` values, then `--iface-can-reach`;
    with none of them, the public IP (which must be local) or else the default route."""
    if not ifaces and not iface_regexes and not can_reach:
        try:
            return lookup_ext_iface(
                view, stack, public_ip, public_ipv6, ifname=public_ip or public_ipv6
            )
        except InterfaceError as err:
            raise InterfaceError(f"Failed to find any valid interface to use: {err}") from err

    for ifname in ifaces:
        try:
            return lookup_ext_iface(view, stack, public_ip, public_ipv6, ifname=ifname)
        except InterfaceError as err:
            log.info("Could not find valid interface matching %s: %s", ifname, err)
    for regex in iface_regexes:
        try:
            return lookup_ext_iface(view, stack, public_ip, public_ipv6, regex=regex)
        except InterfaceError as err:
            log.info("Could not find valid interface matching %s: %s", regex, err)
    if can_reach:
        try:
            return lookup_ext_iface(view, stack, public_ip, public_ipv6, can_reach=can_reach)
        except InterfaceError as err:
            log.info(
                "Could not find valid interface matching ifaceCanReach: %s: %s", can_reach, err
            )
    raise InterfaceError(
        "Failed to find interface to use that matches the interfaces and/or regexes provided"
    )


def lookup_ext_iface(
    view: NetView,
    stack: IpStack,
    public_ip: str,
    public_ipv6: str,
    *,
    ifname: str = "",
    regex: str = "",
    can_reach: str = "",
) -> ExternalInterface:
    """ipmatch.LookupExtIface: one selector (name/IP, regex, can-reach, else default route)."""
    link, addr, v6_addr = _resolve(view, stack, public_ipv6, ifname, regex, can_reach)

    if stack is not IpStack.V6 and addr is None:
        addr = _first_or_fail(usable_v4_addresses(link.addrs), "IPv4", link)
    if stack is not IpStack.V4 and v6_addr is None:
        v6_addr = _first_or_fail(usable_v6_addresses(link.addrs), "IPv6", link)
    if addr is not None:
        log.info("Using interface with name %s and address %s", link.name, addr)
    if v6_addr is not None:
        log.info("Using interface with name %s and v6 address %s", link.name, v6_addr)

    if link.mtu == 0:
        raise InterfaceError(
            f"failed to determine MTU for {addr if addr is not None else '<nil>'} interface"
        )

    ext_addr = _external_address(public_ip, IPv4Address, "IP", "", addr, stack is not IpStack.V6)
    ext_v6_addr = _external_address(
        public_ipv6, IPv6Address, "IPv6", "v6 ", v6_addr, stack is not IpStack.V4
    )

    return ExternalInterface(
        name=link.name,
        index=link.index,
        mtu=link.mtu,
        iface_addr=addr,
        iface_v6_addr=v6_addr,
        ext_addr=ext_addr,
        ext_v6_addr=ext_v6_addr,
    )


def _external_address(
    public: str, kind: type[_Ip], label: str, shown: str, iface_addr: _Ip | None, in_stack: bool
) -> _Ip | None:
    """--public-ip(v6) if given, else (for an enabled family) the interface's own address."""
    if public:
        parsed = parse_go_ip(public)
        if not isinstance(parsed, kind):
            raise InterfaceError(f"invalid public {label} address: {public}")
        log.info("Using %s as external address", parsed)
        return parsed
    if in_stack:
        log.info("Defaulting external %saddress to interface address (%s)", shown, iface_addr)
        return iface_addr
    return None


def _resolve(
    view: NetView, stack: IpStack, public_ipv6: str, ifname: str, regex: str, can_reach: str
) -> _Resolved:
    pattern: re.Pattern[str] | None = None
    if regex:
        try:
            pattern = re.compile(regex)
        except re.error as err:
            raise InterfaceError(
                f"could not compile the IP address regex '{regex}': {err}"
            ) from err
    if ifname:
        ip = parse_go_ip(ifname)
        if ip is None:
            return _by_name(view, ifname), None, None
        log.info("Searching for interface using %s", ip)
        return _by_ip(view, stack, ifname, ip, public_ipv6)
    if pattern is not None:
        return _by_regex(view, stack, regex, pattern)
    if can_reach:
        log.info("Determining interface to use based on given ifcanreach: %s", can_reach)
        return _by_route_to(view, stack, can_reach)
    log.info("Determining IP address of default interface")
    return _by_default_route(view, stack), None, None


def _links(view: NetView) -> Sequence[Link]:
    try:
        return view.links()
    except NetViewError as err:
        raise InterfaceError(f"error listing all interfaces: {err}") from err


def _owner(view: NetView, ip: IPAddress) -> Link | None:
    return next((link for link in _links(view) if any(a.ip == ip for a in link.addrs)), None)


def _link_by_index(view: NetView, index: int) -> Link | None:
    return next((link for link in _links(view) if link.index == index), None)


def _by_name(view: NetView, ifname: str) -> Link:
    link = next((link for link in _links(view) if link.name == ifname), None)
    if link is None:
        raise InterfaceError(f"error looking up interface {ifname}: {_NO_SUCH_INTERFACE}")
    return link


def _v4_owner(view: NetView, ip: IPAddress, shown: str) -> tuple[Link, IPv4Address]:
    link = _owner(view, ip)
    if link is None or not isinstance(ip, IPv4Address):
        raise InterfaceError(
            f"error looking up interface {shown}: no interface with given IP found"
        )
    return link, ip


def _v6_owner(view: NetView, ip: IPAddress | None, shown: str) -> tuple[Link, IPv6Address]:
    link = None if ip is None else _owner(view, ip)
    if link is None or not isinstance(ip, IPv6Address):
        raise InterfaceError(
            f"error looking up v6 interface {shown}: no interface with given IPv6 found"
        )
    return link, ip


def _by_ip(
    view: NetView, stack: IpStack, ifname: str, ip: IPAddress, public_ipv6: str
) -> _Resolved:
    if stack is IpStack.V4:
        link, addr = _v4_owner(view, ip, ifname)
        return link, addr, None
    if stack is IpStack.V6:
        link, v6_addr = _v6_owner(view, ip, ifname)
        return link, None, v6_addr

    # dual stack: --public-ipv6 names the v6 address and must sit on the same interface
    public_v6 = parse_go_ip(public_ipv6) if public_ipv6 else None
    if isinstance(ip, IPv4Address):
        link, addr = _v4_owner(view, ip, ifname)
        if public_v6 is None:
            return link, addr, None
        v6_link, v6_addr = _v6_owner(view, public_v6, public_ipv6)
        if v6_link.name != link.name:
            raise InterfaceError(
                f"v6 interface {v6_link.name} must be the same with v4 interface {link.name}"
            )
        return link, addr, v6_addr
    if public_v6 is not None:
        v6_link, v6_addr = _v6_owner(view, public_v6, public_ipv6)
    else:
        v6_link, v6_addr = _v6_owner(view, ip, ifname)
    return v6_link, None, v6_addr


def _by_regex(view: NetView, stack: IpStack, regex: str, pattern: re.Pattern[str]) -> _Resolved:
    links = _links(view)
    match = regex_candidate(links, pattern, stack)
    if match is None:
        raise InterfaceError(
            f"could not match pattern {regex} to any of the available network interfaces "
            f"({describe_links(links, stack)})"
        )
    return match.link, match.addr, match.v6_addr


def _by_route_to(view: NetView, stack: IpStack, can_reach: str) -> _Resolved:
    prefix = "failed to get ifcanreach based interface"
    ip = parse_go_ip(can_reach)
    if ip is None:
        # Go asks the kernel about a nil IP, which rejects the empty RTA_DST
        raise InterfaceError(f"{prefix}: couldn't lookup route to <nil>: invalid argument")
    try:
        hop = view.route_get(ip)
    except NetViewError as err:
        raise InterfaceError(f"{prefix}: couldn't lookup route to {ip}: {err}") from err
    if hop is None:
        raise InterfaceError(f"{prefix}: no interface with given IP found")
    link = _link_by_index(view, hop.oif)
    if link is None:
        raise InterfaceError(f"{prefix}: couldn't lookup interface: {_NO_SUCH_INTERFACE}")
    # the route's source address is the interface address of its own family
    src = hop.src
    addr = src if isinstance(src, IPv4Address) and stack is not IpStack.V6 else None
    v6_addr = src if isinstance(src, IPv6Address) and stack is not IpStack.V4 else None
    return link, addr, v6_addr


def _default_route_link(view: NetView, version: int) -> Link:
    v6 = " v6" if version == 6 else ""
    context = f"failed to get default{v6} interface"
    route = f"default{v6} route"
    try:
        oif = view.default_route_oif(version)
    except NetViewError as err:
        raise InterfaceError(f"{context}: {err}") from err
    if oif is None:
        raise InterfaceError(f"{context}: unable to find {route}")
    if oif <= 0:
        raise InterfaceError(f"{context}: found {route} but could not determine interface")
    link = _link_by_index(view, oif)
    if link is None:
        raise InterfaceError(f"{context}: {_NO_SUCH_INTERFACE}")
    return link


def _by_default_route(view: NetView, stack: IpStack) -> Link:
    if stack is IpStack.V4:
        return _default_route_link(view, 4)
    if stack is IpStack.V6:
        return _default_route_link(view, 6)
    v4_link = _default_route_link(view, 4)
    v6_link = _default_route_link(view, 6)
    if v6_link.name != v4_link.name:
        raise InterfaceError(
            f"v6 default route interface {v6_link.name} "
            f"must be the same with v4 default route interface {v4_link.name}"
        )
    return v4_link


def _first_or_fail(addrs: list[_Ip], family: str, link: Link) -> _Ip:
    if not addrs:
        raise InterfaceError(f"failed to find {family} address for interface {link.name}")
    return addrs[0]
