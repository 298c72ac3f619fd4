"""The interface both traffic managers offer, and how flanneld starts them (flannel-io/flannel
main.go: main, newTrafficManager)."""

from __future__ import annotations

import logging
from typing import Protocol

from pyflannel_runtime.firewall.command import CommandRunner
from pyflannel_runtime.firewall.iptables import IPTablesManager
from pyflannel_runtime.firewall.nftables import NFTablesManager
from pyflannel_runtime.firewall.rules import IPNetwork

log = logging.getLogger(__name__)


class TrafficManager(Protocol):
    # The rule sets the resync re-created after someone else removed a rule or chain.
    rules_repaired: int

    async def init(self) -> None:
        """Prepare the mode (nft: create the tables). Raises FirewallError."""

    async def cleanup(self) -> None:
        """Remove everything this mode may have installed; never raises."""

    async def setup_masq(
        self,
        network: IPNetwork,
        subnet: IPNetwork,
        *,
        previous_network: IPNetwork | None = None,
        previous_subnet: IPNetwork | None = None,
    ) -> None:
        """Masquerade rules for one IP version; ``previous_*`` come from the old subnet.env."""

    async def setup_forward(self, network: IPNetwork) -> None:
        """Forward-accept rules for one IP version."""

    async def resync(self, period: float) -> None:
        """Keep the rules in place every ``period`` seconds until cancelled (or return at once)."""


def new_traffic_manager(
    use_nftables: bool, runner: CommandRunner | None = None, *, fully_random_disabled: bool = False
) -> TrafficManager:
    if use_nftables:
        return NFTablesManager(runner, fully_random_disabled=fully_random_disabled)
    return IPTablesManager(runner, fully_random_disabled=fully_random_disabled)


async def start_traffic_manager(
    use_nftables: bool, runner: CommandRunner | None = None, *, fully_random_disabled: bool = False
) -> TrafficManager:
    """Clean up the mode not in use, then init the one in use, as flanneld starts."""
    log.info("Cleaning-up unused traffic manager rules")
    await new_traffic_manager(not use_nftables, runner).cleanup()
    manager = new_traffic_manager(use_nftables, runner, fully_random_disabled=fully_random_disabled)
    await manager.init()
    return manager
