"""Startup steps 12-15 of flanneld: traffic manager, masquerade, forward rules, blackhole."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network
from typing import Any

from pyflannel_runtime.agent.errors import StartupError
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.firewall.blackhole import keep_blackhole_routes
from pyflannel_runtime.firewall.command import FirewallError
from pyflannel_runtime.firewall.manager import TrafficManager, start_traffic_manager
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig
from pyflannel_runtime.wire.subnet_env import PreviousSubnets


@dataclass(frozen=True)
class _Family:
    network: IPv4Network | IPv6Network
    subnet: IPv4Network | IPv6Network
    previous_network: IPv4Network | IPv6Network | None
    previous_subnet: IPv4Network | IPv6Network | None


def _families(config: NetworkConfig, lease: Lease, previous: PreviousSubnets) -> list[_Family]:
    out: list[_Family] = []
    if config.enable_ipv4 and config.network is not None and lease.subnet is not None:
        out.append(_Family(config.network, lease.subnet, previous.network, previous.subnet))
    if config.enable_ipv6 and config.ipv6_network is not None and lease.ipv6_subnet is not None:
        out.append(
            _Family(
                config.ipv6_network, lease.ipv6_subnet, previous.ipv6_network, previous.ipv6_subnet
            )
        )
    return out


@dataclass(frozen=True)
class TrafficRules:
    manager: TrafficManager
    keepers: list[asyncio.Task[None]]  # the background tasks that keep them (resync, blackhole)


async def install_traffic_rules(
    opts: Options, config: NetworkConfig, lease: Lease, previous: PreviousSubnets
) -> TrafficRules:
    """Install the rules, and start what keeps them in place."""
    families = _families(config, lease, previous)
    try:
        manager = await start_traffic_manager(
            config.enable_nftables, fully_random_disabled=opts.ip_masq_fully_random_disable
        )
        if opts.ip_masq:
            for fam in families:
                await manager.setup_masq(
                    fam.network,
                    fam.subnet,
                    previous_network=fam.previous_network,
                    previous_subnet=fam.previous_subnet,
                )
        if opts.iptables_forward_rules:
            for fam in families:
                await manager.setup_forward(fam.network)
    except FirewallError as err:
        raise StartupError(f"Failed to setup traffic rules: {err}") from err

    keepers: list[Coroutine[Any, Any, None]] = []
    if opts.ip_masq or opts.iptables_forward_rules:
        keepers.append(manager.resync(opts.iptables_resync))
    if opts.ip_blackhole_route:
        keepers.append(keep_blackhole_routes([f.subnet for f in families], opts.iptables_resync))
    return TrafficRules(manager, [asyncio.create_task(k) for k in keepers])
