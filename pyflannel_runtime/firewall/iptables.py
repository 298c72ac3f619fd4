"""The iptables traffic manager: bootstrap with iptables-restore, then resync.

flannel-io/flannel pkg/trafficmngr/iptables/iptables.go: SetupAndEnsureMasqRules,
SetupAndEnsureForwardRules, ipTablesBootstrap, ensureIPTables.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pyflannel_runtime.firewall.command import CommandResult, CommandRunner, FirewallError
from pyflannel_runtime.firewall.rules import (
    FORWARD_CHAIN,
    MASQ_CHAIN,
    OWNED_CHAINS,
    IPNetwork,
    Rule,
    bootstrap_payload,
    chain_removal_payload,
    forward_rules,
    masq_rules,
    owned_rule_lines,
    teardown_payload,
)

log = logging.getLogger(__name__)

_VERSION = re.compile(r"v([0-9]+)\.([0-9]+)\.([0-9]+)")
# Both `--wait` for iptables-restore and MASQUERADE `--random-fully` arrived in 1.6.2.
_MODERN = (1, 6, 2)


def parse_iptables_version(text: str) -> tuple[int, int, int]:
    """The first ``vX.Y.Z`` in ``iptables --version`` output."""
    match = _VERSION.search(text)
    if match is None:
        raise FirewallError(f"no iptables version found in string: {text.strip()}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


@dataclass(frozen=True)
class _Tools:
    iptables: str
    restore: str
    label: str


_TOOLS = {
    4: _Tools("iptables", "iptables-restore", "IPv4"),
    6: _Tools("ip6tables", "ip6tables-restore", "IPv6"),
}


def _empty_network(version: int) -> str:
    """How Go prints a missing previous network in flannel's recycle message."""
    return "0.0.0.0/0" if version == 4 else "::/0"


class IPTablesManager:
    """flannel's iptables mode. One lock per IP version serialises every check and apply."""

    def __init__(
        self, runner: CommandRunner | None = None, *, fully_random_disabled: bool = False
    ) -> None:
        self._runner = runner or CommandRunner()
        self._fully_random_disabled = fully_random_disabled
        self._locks = {4: asyncio.Lock(), 6: asyncio.Lock()}
        self._modern: dict[int, bool] = {}
        # What resync keeps in place, keyed by (IP version, table); a new setup replaces it.
        self._rule_sets: dict[tuple[int, str], list[Rule]] = {}
        self.rules_repaired = 0  # rule sets `ensure` re-created (the agent's metrics)

    # --- the TrafficManager interface ---------------------------------------------------

    async def init(self) -> None:
        log.info("Starting flannel in iptables mode...")

    async def cleanup(self) -> None:
        """Remove flannel's chains and the jumps into them, for v4 and v6; errors are logged."""
        log.info("Cleaning-up iptables rules...")
        for version, tools in _TOOLS.items():
            try:
                await self.remove_owned_chains(version)
            except FirewallError as err:
                log.debug("could not clean-up flannel chains (%s): %s", tools.label, err)

    async def remove_owned_chains(self, version: int, *, check: bool = False) -> list[str]:
        """Remove flannel's chains from ``version``'s tables, with every jump into them, in one
        iptables-restore transaction (with ``check`` only find them); returns what was there as
        ``-t <table> <-S line>``. Nothing else is touched. Raises FirewallError."""
        async with self._locks[version]:
            dumps: dict[str, str] = {}
            for table in OWNED_CHAINS:
                listing = await self._iptables(version, "-t", table, "-S")
                if listing.returncode == 0:
                    dumps[table] = listing.stdout
                else:
                    log.debug("could not list table %s: %s", table, listing.describe())
            if not check:
                await self._apply(version, chain_removal_payload(dumps))
        return [f"-t {table} {line}" for table, line in owned_rule_lines(dumps)]

    async def setup_masq(
        self,
        network: IPNetwork,
        subnet: IPNetwork,
        *,
        previous_network: IPNetwork | None = None,
        previous_subnet: IPNetwork | None = None,
    ) -> None:
        """Masquerade: recycle the previous run's rules if network or lease changed, then
        bootstrap (iptables.go: SetupAndEnsureMasqRules)."""
        version = network.version
        fully_random = await self._fully_random(version)
        rules = masq_rules(network, subnet, fully_random)
        if previous_network != network or previous_subnet != subnet:
            log.info(
                "Current network or subnet (%s, %s) is not equal to previous one (%s, %s), "
                "trying to recycle old iptables rules",
                network,
                subnet,
                previous_network or _empty_network(version),
                previous_subnet or _empty_network(version),
            )
            if previous_network is not None and previous_subnet is not None:
                await self.remove_masq(previous_network, previous_subnet)
        log.info("Setting up masking rules%s", "" if version == 4 else " for IPv6")
        await self._install(version, "nat", MASQ_CHAIN, rules)

    async def remove_masq(self, network: IPNetwork, subnet: IPNetwork) -> None:
        """Delete those masquerade rules for (network, subnet) that exist, in one transaction."""
        version = network.version
        rules = masq_rules(network, subnet, await self._fully_random(version))
        async with self._locks[version]:
            await self._teardown(version, rules)

    async def setup_forward(self, network: IPNetwork) -> None:
        """Accept forwarding to and from the flannel network (iptables.go:
        SetupAndEnsureForwardRules)."""
        version = network.version
        log.info(
            "Changing default FORWARD chain policy to ACCEPT"
            if version == 4
            else "IPv6: Changing default FORWARD chain policy to ACCEPT"
        )
        await self._install(version, "filter", FORWARD_CHAIN, forward_rules(network))

    async def resync(self, period: float) -> None:
        """Every ``period`` seconds re-create whatever went missing; runs until cancelled."""
        while True:
            await asyncio.sleep(period)
            try:
                await self.ensure()
            except FirewallError as err:
                log.error("Failed to ensure iptables rules: %s", err)

    async def ensure(self) -> bool:
        """Re-bootstrap every rule set with a missing rule or chain; True if any was rebuilt.

        Every set is tried; the first error is raised afterwards.
        """
        rebuilt = False
        first_error: FirewallError | None = None
        for (version, _table), rules in list(self._rule_sets.items()):
            try:
                async with self._locks[version]:
                    if await self._all_present(version, rules):
                        continue
                    log.info("Some iptables rules are missing; deleting and recreating rules")
                    await self._bootstrap(version, rules)
                    self.rules_repaired += 1
                    rebuilt = True
            except FirewallError as err:
                first_error = first_error or err
        if first_error is not None:
            raise first_error
        return rebuilt

    # --- mechanics --------------------------------------------------------------------------

    async def _install(self, version: int, table: str, chain: str, rules: list[Rule]) -> None:
        # Registered first so resync retries even when this first bootstrap fails.
        self._rule_sets[(version, table)] = rules
        async with self._locks[version]:
            await self._clear_chain(version, table, chain)
            await self._bootstrap(version, rules)

    async def _is_modern(self, version: int) -> bool:
        if version not in self._modern:
            result = await self._runner.check(_TOOLS[version].iptables, "--version")
            self._modern[version] = parse_iptables_version(result.stdout) >= _MODERN
        return self._modern[version]

    async def _fully_random(self, version: int) -> bool:
        return not self._fully_random_disabled and await self._is_modern(version)

    async def _iptables(self, version: int, *args: str) -> CommandResult:
        wait = ("--wait",) if await self._is_modern(version) else ()
        return await self._runner.run(_TOOLS[version].iptables, *wait, *args)

    async def _exit_status_says(self, version: int, *args: str) -> bool:
        """0 means yes, 1 means no (iptables' convention for -C and -S); anything else fails."""
        result = await self._iptables(version, *args)
        if result.returncode not in (0, 1):
            raise FirewallError(f"failed to check rule existence: {result.describe()}")
        return result.returncode == 0

    async def _chain_exists(self, version: int, table: str, chain: str) -> bool:
        return await self._exit_status_says(version, "-t", table, "-S", chain)

    async def _present_rules(self, version: int, rules: Sequence[Rule]) -> list[Rule]:
        chains: dict[tuple[str, str], bool] = {}
        present: list[Rule] = []
        for rule in rules:
            for chain in sorted(rule.owned_chains):
                key = (rule.table, chain)
                if key not in chains:
                    chains[key] = await self._chain_exists(version, rule.table, chain)
            # -C fails with an error, not "no", when the jump target is missing.
            if not all(chains[(rule.table, chain)] for chain in rule.owned_chains):
                continue
            check = ("-t", rule.table, "-C", rule.chain, *rule.spec)
            if await self._exit_status_says(version, *check):
                present.append(rule)
        return present

    async def _all_present(self, version: int, rules: Sequence[Rule]) -> bool:
        return len(await self._present_rules(version, rules)) == len(rules)

    async def _apply(self, version: int, payload: str) -> None:
        if not payload:
            return
        wait = ("--wait",) if await self._is_modern(version) else ()
        log.debug("trying to run with payload %s", payload)
        await self._runner.check(_TOOLS[version].restore, "--noflush", *wait, stdin=payload)

    async def _clear_chain(self, version: int, table: str, chain: str) -> None:
        action = "-F" if await self._chain_exists(version, table, chain) else "-N"
        result = await self._iptables(version, "-t", table, action, chain)
        if result.returncode != 0:
            raise FirewallError(f"Error on creating the chain: {result.describe()}")

    async def _bootstrap(self, version: int, rules: Sequence[Rule]) -> None:
        for table, chain in sorted({(r.table, c) for r in rules for c in r.owned_chains}):
            if not await self._chain_exists(version, table, chain):
                await self._clear_chain(version, table, chain)
        present = await self._present_rules(version, rules)
        await self._apply(version, bootstrap_payload(rules, present))
        log.info("bootstrap done")

    async def _teardown(self, version: int, rules: Sequence[Rule]) -> None:
        present = await self._present_rules(version, rules)
        await self._apply(version, teardown_payload(rules, present))
