"""The kernel side of interface selection: links, addresses and routes over rtnetlink."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from ipaddress import ip_address

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pyflannel_runtime.netdev.selection import select_on_view
from pyflannel_runtime.netdev.types import (
    ExternalInterface,
    IfAddr,
    InterfaceError,
    IPAddress,
    IpStack,
    Link,
    NetViewError,
    RouteHop,
)

RT_TABLE_MAIN = 254


def _go_errno_text(err: NetlinkError) -> str:
    # Go prints errnos lower-case ("network is unreachable")
    text = os.strerror(err.code)
    return text[:1].lower() + text[1:]


class KernelNetView:
    """A NetView over one rtnetlink socket; links are dumped once per view."""

    def __init__(self, ipr: IPRoute) -> None:
        self._ipr = ipr
        self._links: tuple[Link, ...] | None = None

    def links(self) -> Sequence[Link]:
        if self._links is None:
            self._links = self._dump_links()
        return self._links

    def _dump_links(self) -> tuple[Link, ...]:
        try:
            link_msgs = list(self._ipr.get_links())
            addr_msgs = list(self._ipr.get_addr())
        except NetlinkError as err:
            raise NetViewError(_go_errno_text(err)) from err
        addrs: dict[int, list[IfAddr]] = {}
        for msg in addr_msgs:
            # IFA_LOCAL is the own address; on point-to-point links IFA_ADDRESS is the peer
            text = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
            if text is None:
                continue
            flags = msg.get_attr("IFA_FLAGS")
            addrs.setdefault(msg["index"], []).append(
                IfAddr(ip_address(text), msg["flags"] if flags is None else flags)
            )
        links = (
            Link(
                name=msg.get_attr("IFLA_IFNAME"),
                index=msg["index"],
                mtu=msg.get_attr("IFLA_MTU") or 0,
                addrs=tuple(addrs.get(msg["index"], ())),
            )
            for msg in link_msgs
        )
        return tuple(sorted(links, key=lambda link: link.index))

    def default_route_oif(self, version: int) -> int | None:
        family = socket.AF_INET if version == 4 else socket.AF_INET6
        try:
            routes = list(self._ipr.get_routes(family=family))
        except NetlinkError as err:
            raise NetViewError(_go_errno_text(err)) from err
        for route in routes:
            table = route.get_attr("RTA_TABLE") or route["table"]
            if table == RT_TABLE_MAIN and route["dst_len"] == 0:
                oif: int | None = route.get_attr("RTA_OIF")
                return oif or 0
        return None

    def route_get(self, ip: IPAddress) -> RouteHop | None:
        try:
            routes = list(self._ipr.route("get", dst=str(ip)))
        except NetlinkError as err:
            raise NetViewError(_go_errno_text(err)) from err
        if not routes:
            return None
        src = routes[0].get_attr("RTA_PREFSRC")
        return RouteHop(
            oif=routes[0].get_attr("RTA_OIF") or 0,
            src=None if src is None else ip_address(src),
        )


def _open_rtnetlink(netns: str | None) -> IPRoute:
    if netns is None:
        return IPRoute()
    try:
        # flags=0: never create the namespace as a side effect
        return IPRoute(netns=netns, flags=0)
    except OSError as err:
        raise InterfaceError(f"cannot open network namespace {netns}: {err.strerror}") from err


def select_external_interface(
    ifaces: list[str],
    iface_regexes: list[str],
    can_reach: str,
    public_ip: str,
    public_ipv6: str,
    ipv4: bool,
    ipv6: bool,
    *,
    netns: str | None = None,
) -> ExternalInterface:
    """Pick flanneld's external interface (flannel-io/flannel pkg/ipmatch/match.go:
    LookupExtIface); raises InterfaceError with flannel's text.

    `netns` names a namespace under /run/netns to inspect instead of the current one.
    """
    stack = IpStack.from_flags(ipv4, ipv6)
    with _open_rtnetlink(netns) as ipr:
        return select_on_view(
            KernelNetView(ipr), ifaces, iface_regexes, can_reach, public_ip, public_ipv6, stack
        )
