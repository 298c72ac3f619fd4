"""The nftables traffic manager: tables flannel-ipv4/-ipv6, one `nft -f -` per setup.

flannel-io/flannel pkg/trafficmngr/nftables/nftables.go: Init, SetupAndEnsureMasqRules,
SetupAndEnsureForwardRules, CleanUp.
"""

from __future__ import annotations

import logging

from pyflannel_runtime.firewall.command import CommandResult, CommandRunner, FirewallError
from pyflannel_runtime.firewall.rules import (
    IPNetwork,
    nft_delete_table_script,
    nft_forward_script,
    nft_fully_random_probe_script,
    nft_init_script,
    nft_masq_script,
    nft_owned_tables,
    nft_table,
)

log = logging.getLogger(__name__)


class NFTablesManager:
    """flannel's nftables mode. Chains are flushed and refilled, so there is nothing to resync."""

    def __init__(
        self, runner: CommandRunner | None = None, *, fully_random_disabled: bool = False
    ) -> None:
        self._runner = runner or CommandRunner()
        self._fully_random_disabled = fully_random_disabled
        self._fully_random_supported: bool | None = None
        self.rules_repaired = 0  # no resync, so never more

    async def init(self) -> None:
        log.info("Starting flannel in nftables mode...")
        result = await self._nft(nft_init_script())
        if result.returncode != 0:
            raise FirewallError(f"nftables: couldn't initialise tables: {result.describe()}")

    async def cleanup(self) -> None:
        """Delete both flannel tables; each separately, errors (e.g. no such table) only logged."""
        log.info("Cleaning-up nftables rules...")
        for version in (4, 6):
            try:
                result = await self._nft(nft_delete_table_script(version))
            except FirewallError as err:
                log.debug("nftables: couldn't delete table: %s", err)
                continue
            if result.returncode != 0:
                family, table = nft_table(version)
                log.debug("nftables: couldn't delete table %s %s: %s", family, table, result.stderr)

    async def remove_tables(self, *, check: bool = False) -> list[str]:
        """Delete those of flannel's two tables that exist, in one transaction (with ``check``
        only find them); returns them as ``<family> <table>``. Raises FirewallError."""
        listing = await self._runner.run("nft", "list", "tables")
        if listing.returncode != 0:
            raise FirewallError(f"nftables: couldn't list tables: {listing.describe()}")
        versions = nft_owned_tables(listing.stdout)
        if versions and not check:
            script = "".join(nft_delete_table_script(version) for version in versions)
            result = await self._nft(script)
            if result.returncode != 0:
                raise FirewallError(f"nftables: couldn't delete tables: {result.describe()}")
        return [" ".join(nft_table(version)) for version in versions]

    async def setup_masq(
        self,
        network: IPNetwork,
        subnet: IPNetwork,
        *,
        previous_network: IPNetwork | None = None,
        previous_subnet: IPNetwork | None = None,
    ) -> None:
        """The postrtg chain. The previous run's values are not needed: the chain is flushed."""
        version = network.version
        log.info("nftables: setting up masking rules (%s)", "ipv4" if version == 4 else "ipv6")
        fully_random = not self._fully_random_disabled and await self._supports_fully_random()
        result = await self._nft(nft_masq_script(network, subnet, fully_random))
        if result.returncode != 0:
            raise FirewallError(f"nftables: couldn't setup masq rules: {result.describe()}")

    async def setup_forward(self, network: IPNetwork) -> None:
        log.info(
            "Changing default FORWARD chain policy to ACCEPT"
            if network.version == 4
            else "Changing default FORWARD chain policy to ACCEPT (ipv6)"
        )
        result = await self._nft(nft_forward_script(network))
        if result.returncode != 0:
            raise FirewallError(f"nftables: couldn't setup forward rules: {result.describe()}")

    async def resync(self, period: float) -> None:
        """flannel has no periodic resync in nft mode: returns at once."""

    async def _nft(self, script: str, *options: str) -> CommandResult:
        return await self._runner.run("nft", *options, "-f", "-", stdin=script)

    async def _supports_fully_random(self) -> bool:
        if self._fully_random_supported is None:
            probe = await self._nft(nft_fully_random_probe_script(), "--check")
            self._fully_random_supported = probe.returncode == 0
            if not self._fully_random_supported:
                log.warning("nftables: random fully unsupported")
        return self._fully_random_supported
