"""``--ip-blackhole-route``: keep a blackhole route for the own lease subnet.

flannel-io/flannel main.go: main (the resync loop); pkg/ip/iface.go: AddBlackholeV4Route.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence

from pyroute2 import AsyncIPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pyflannel_runtime.firewall.rules import IPNetwork

log = logging.getLogger(__name__)

_RTN_BLACKHOLE = 6
_RT_TABLE_MAIN = 254


async def ensure_blackhole_route(subnet: IPNetwork, *, netns: str | None = None) -> bool:
    """Add ``blackhole <subnet>`` to the main table unless one exists; True if it was added."""
    family = socket.AF_INET if subnet.version == 4 else socket.AF_INET6
    async with AsyncIPRoute(netns=netns) if netns else AsyncIPRoute() as ipr:
        async for route in await ipr.route("dump", family=family):
            if (
                route["type"] == _RTN_BLACKHOLE
                and route.get("table") == _RT_TABLE_MAIN
                and route["dst_len"] == subnet.prefixlen
                and route.get("dst") == str(subnet.network_address)
            ):
                return False
        await ipr.route(
            "add",
            family=family,
            dst=str(subnet),
            type="blackhole",
            proto="boot",  # what the kernel records for flannel's netlink.RouteAdd
        )
        return True


async def keep_blackhole_routes(
    subnets: Sequence[IPNetwork], period: float, *, netns: str | None = None
) -> None:
    """Every ``period`` (``--iptables-resync``) seconds ensure each route; runs until cancelled."""
    while True:
        await asyncio.sleep(period)
        for subnet in subnets:
            try:
                await ensure_blackhole_route(subnet, netns=netns)
            except (NetlinkError, OSError) as err:
                log.error("Failed to setup blackhole route, %s", err)
