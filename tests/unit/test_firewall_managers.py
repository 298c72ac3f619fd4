"""The traffic managers' logic against a simulated iptables / nft (no root needed)."""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Coroutine
from ipaddress import IPv4Network
from typing import Any, TypeVar

import pytest

from pyflannel_runtime.firewall.command import CommandResult, CommandRunner, FirewallError
from pyflannel_runtime.firewall.iptables import IPTablesManager, parse_iptables_version
from pyflannel_runtime.firewall.nftables import NFTablesManager
from pyflannel_runtime.firewall.rules import forward_rules, masq_rules

T = TypeVar("T")
N, S, OLD_S = (
    IPv4Network("10.244.0.0/16"),
    IPv4Network("10.244.1.0/24"),
    IPv4Network("10.244.7.0/24"),
)
BUILTIN = {("nat", "POSTROUTING"), ("filter", "FORWARD")}

RuleKey = tuple[str, str, tuple[str, ...]]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class FakeIptables(CommandRunner):
    """Just enough of iptables, iptables-restore and iptables --version for the manager."""

    def __init__(self, version: str = "iptables v1.8.9 (nf_tables)") -> None:
        super().__init__()
        self.version = version
        self.chains: set[tuple[str, str]] = set(BUILTIN)
        self.rules: list[RuleKey] = []
        self.calls: list[tuple[str, ...]] = []
        self.restores: list[str] = []

    def rule_keys(self, rules: list[Any]) -> list[RuleKey]:
        return [(r.table, r.chain, r.spec) for r in rules]

    def _apply(self, table: str, tokens: list[str]) -> None:
        action, chain, spec = tokens[0], tokens[1], tuple(tokens[2:])
        if action == "-A":
            assert (table, chain) in self.chains
            self.rules.append((table, chain, spec))
        elif action == "-D":
            self.rules.remove((table, chain, spec))
        elif action == "-N":
            assert (table, chain) not in self.chains
            self.chains.add((table, chain))
        elif action == "-F":
            self.rules = [r for r in self.rules if r[:2] != (table, chain)]
        elif action == "-X":
            assert not [r for r in self.rules if r[:2] == (table, chain) or r[2][-1:] == (chain,)]
            self.chains.remove((table, chain))

    def _restore(self, payload: str) -> None:
        self.restores.append(payload)
        table = ""
        for line in payload.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                # --noflush: a user chain declared is emptied, or created.
                chain = line[1:].split()[0]
                action = "-F" if (table, chain) in self.chains else "-N"
                self._apply(table, [action, chain])
            elif line != "COMMIT":
                self._apply(table, shlex.split(line))

    def _dump(self, table: str) -> str:
        lines = [f"-N {c}" for t, c in sorted(self.chains) if t == table and (t, c) not in BUILTIN]
        lines += [shlex.join(["-A", c, *spec]) for t, c, spec in self.rules if t == table]
        return "".join(f"{line}\n" for line in lines)

    async def run(self, *argv: str, stdin: str | None = None) -> CommandResult:
        self.calls.append(argv)
        await asyncio.sleep(0)  # a real subprocess lets other tasks run meanwhile
        args = [a for a in argv[1:] if a != "--wait"]
        ok = CommandResult(argv, 0, "", "")
        if args == ["--version"]:
            return CommandResult(argv, 0, self.version + "\n", "")
        if argv[0].endswith("-restore"):
            assert stdin is not None
            self._restore(stdin)
            return ok
        table, action, rest = args[1], args[2], args[3:]
        if action == "-S" and not rest:
            return CommandResult(argv, 0, self._dump(table), "")
        if action == "-S":
            return ok if (table, rest[0]) in self.chains else CommandResult(argv, 1, "", "")
        if action == "-C":
            present = (table, rest[0], tuple(rest[1:])) in self.rules
            return ok if present else CommandResult(argv, 1, "", "Bad rule")
        self._apply(table, [action, *rest])
        return ok


def test_parse_iptables_version() -> None:
    assert parse_iptables_version("iptables v1.8.9 (nf_tables)\n") == (1, 8, 9)
    assert parse_iptables_version("ip6tables-restore v1.6.10 (legacy)") == (1, 6, 10)
    with pytest.raises(FirewallError):
        parse_iptables_version("iptables: unknown")


def test_setup_masq_installs_the_rules_in_order_with_wait() -> None:
    fake = FakeIptables()
    run(IPTablesManager(fake).setup_masq(N, S))
    assert fake.rules == fake.rule_keys(masq_rules(N, S, fully_random=True))
    assert ("nat", "FLANNEL-POSTRTG") in fake.chains
    restores = [call for call in fake.calls if call[0] == "iptables-restore"]
    assert restores == [("iptables-restore", "--noflush", "--wait")]
    assert all("--wait" in call for call in fake.calls if "-C" in call)


def test_a_start_replaces_the_rules_in_one_transaction() -> None:
    """What each agent start does, on rules already in place: never a chain flushed on its own
    (masqueraded connections would lose their translation until the rules are back)."""
    fake = FakeIptables()
    run(IPTablesManager(fake).setup_masq(N, S))
    run(IPTablesManager(fake).setup_forward(N))
    fake.calls.clear()
    fake.restores.clear()
    run(IPTablesManager(fake).setup_masq(N, S))
    run(IPTablesManager(fake).setup_forward(N))
    assert fake.rules == fake.rule_keys(masq_rules(N, S, True) + forward_rules(N))
    changes = [c for c in fake.calls if c[0] != "iptables-restore" and {"-F", "-N", "-A"} & {*c}]
    assert changes == []
    assert [payload.splitlines()[1] for payload in fake.restores] == [
        ":FLANNEL-POSTRTG - [0:0]",
        ":FLANNEL-FWD - [0:0]",
    ]


def test_old_iptables_gets_neither_wait_nor_random_fully() -> None:
    fake = FakeIptables("iptables v1.6.1")
    run(IPTablesManager(fake).setup_masq(N, S))
    assert fake.rules == fake.rule_keys(masq_rules(N, S, fully_random=False))
    assert not [call for call in fake.calls if "--wait" in call]


def test_fully_random_can_be_disabled() -> None:
    fake = FakeIptables()
    run(IPTablesManager(fake, fully_random_disabled=True).setup_masq(N, S))
    assert fake.rules == fake.rule_keys(masq_rules(N, S, fully_random=False))


def test_re_setup_moves_the_jump_behind_foreign_rules() -> None:
    fake = FakeIptables()
    run(IPTablesManager(fake).setup_masq(N, S))
    foreign = ("nat", "POSTROUTING", ("-s", "192.0.2.0/24", "-j", "RETURN"))
    fake.rules.append(foreign)
    run(IPTablesManager(fake).setup_masq(N, S))
    postrouting = [r for r in fake.rules if r[1] == "POSTROUTING"]
    assert postrouting == [foreign, fake.rule_keys(masq_rules(N, S, True))[0]]
    assert '-D POSTROUTING -m comment --comment "flanneld masq"' in fake.restores[-1]


def test_ensure_does_nothing_when_everything_is_present() -> None:
    fake = FakeIptables()
    manager = IPTablesManager(fake)

    async def scenario() -> bool:
        await manager.setup_masq(N, S)
        await manager.setup_forward(N)
        return await manager.ensure()

    assert run(scenario()) is False
    assert len(fake.restores) == 2


def test_ensure_rebuilds_a_set_with_a_missing_rule(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel_runtime.firewall.iptables")
    fake = FakeIptables()
    manager = IPTablesManager(fake)
    run(manager.setup_masq(N, S))
    expected = list(fake.rules)
    del fake.rules[3]
    assert run(manager.ensure()) is True
    assert fake.rules == expected
    assert "Some iptables rules are missing; deleting and recreating rules" in caplog.messages


def test_ensure_recreates_a_deleted_chain() -> None:
    fake = FakeIptables()
    manager = IPTablesManager(fake)
    run(manager.setup_forward(N))
    fake.rules.clear()
    fake.chains.discard(("filter", "FLANNEL-FWD"))
    assert run(manager.ensure()) is True
    assert fake.rules == fake.rule_keys(forward_rules(N))


def test_concurrent_ensures_rebuild_once() -> None:
    fake = FakeIptables()
    manager = IPTablesManager(fake)
    run(manager.setup_masq(N, S))
    del fake.rules[-1]
    before = len(fake.restores)

    async def both() -> list[bool]:
        return list(await asyncio.gather(manager.ensure(), manager.ensure()))

    assert sorted(run(both())) == [False, True]
    assert len(fake.restores) == before + 1


def test_previous_subnet_rules_are_torn_down_when_present() -> None:
    fake = FakeIptables()
    run(IPTablesManager(fake).setup_masq(N, OLD_S))
    run(IPTablesManager(fake).setup_masq(N, S, previous_network=N, previous_subnet=OLD_S))
    teardown = fake.restores[1]
    assert teardown.startswith("*nat\n-D POSTROUTING ")
    assert "-D FLANNEL-POSTRTG -s 10.244.7.0/24 -d 10.244.0.0/16" in teardown
    assert "-A" not in teardown
    assert fake.rules == fake.rule_keys(masq_rules(N, S, True))


def test_unchanged_previous_values_skip_the_teardown() -> None:
    fake = FakeIptables()
    run(IPTablesManager(fake).setup_masq(N, S))
    run(IPTablesManager(fake).setup_masq(N, S, previous_network=N, previous_subnet=S))
    assert len(fake.restores) == 2


def test_cleanup_removes_both_chains_and_their_jumps() -> None:
    fake = FakeIptables()
    manager = IPTablesManager(fake)
    run(manager.setup_masq(N, S))
    run(manager.setup_forward(N))
    run(IPTablesManager(fake).cleanup())
    assert fake.rules == []
    assert fake.chains == BUILTIN


class FakeNft(CommandRunner):
    def __init__(self, fully_random: bool = True, fail: bool = False) -> None:
        super().__init__()
        self.fully_random = fully_random
        self.fail = fail
        self.scripts: list[tuple[tuple[str, ...], str]] = []

    async def run(self, *argv: str, stdin: str | None = None) -> CommandResult:
        assert stdin is not None
        self.scripts.append((argv, stdin))
        if "--check" in argv:
            return CommandResult(argv, 0 if self.fully_random else 1, "", "")
        return CommandResult(argv, 1 if self.fail else 0, "", "Error: boom")


def test_nft_masq_falls_back_without_fully_random(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNft(fully_random=False)
    run(NFTablesManager(fake).setup_masq(N, S))
    probe, (argv, script) = fake.scripts
    assert probe[0][:2] == ("nft", "--check")
    assert argv == ("nft", "-f", "-")
    assert script.rstrip().endswith("ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade")
    assert "nftables: random fully unsupported" in caplog.messages


def test_nft_fully_random_disabled_skips_the_probe() -> None:
    fake = FakeNft()
    run(NFTablesManager(fake, fully_random_disabled=True).setup_masq(N, S))
    [(_, script)] = fake.scripts
    assert "fully-random" not in script


def test_nft_failures_raise() -> None:
    with pytest.raises(FirewallError, match="couldn't initialise"):
        run(NFTablesManager(FakeNft(fail=True)).init())
    with pytest.raises(FirewallError, match="couldn't setup forward rules"):
        run(NFTablesManager(FakeNft(fail=True)).setup_forward(N))


def test_nft_cleanup_ignores_missing_tables() -> None:
    fake = FakeNft(fail=True)
    run(NFTablesManager(fake).cleanup())
    assert [script for _, script in fake.scripts] == [
        "delete table ip flannel-ipv4\n",
        "delete table ip6 flannel-ipv6\n",
    ]


def test_remove_owned_chains_reports_them_and_in_check_mode_leaves_them() -> None:
    fake = FakeIptables()
    manager = IPTablesManager(fake)
    run(manager.setup_masq(N, S))
    run(manager.setup_forward(N))
    fake._apply("filter", ["-N", "KEEP"])
    fake._apply("filter", ["-A", "FORWARD", "-j", "KEEP"])
    rules, chains = list(fake.rules), set(fake.chains)

    found = run(IPTablesManager(fake).remove_owned_chains(4, check=True))
    assert (fake.rules, fake.chains) == (rules, chains)
    assert found[0] == "-t nat -N FLANNEL-POSTRTG"
    assert len(found) == 2 + len(masq_rules(N, S, True)) + len(forward_rules(N))

    assert run(IPTablesManager(fake).remove_owned_chains(4)) == found
    assert fake.rules == [("filter", "FORWARD", ("-j", "KEEP"))]
    assert fake.chains == {*BUILTIN, ("filter", "KEEP")}
    assert run(IPTablesManager(fake).remove_owned_chains(4)) == []


class FakeNftTables(CommandRunner):
    """nft with tables to list and delete."""

    def __init__(self, tables: list[str]) -> None:
        super().__init__()
        self.tables = tables
        self.scripts: list[str] = []

    async def run(self, *argv: str, stdin: str | None = None) -> CommandResult:
        if argv == ("nft", "list", "tables"):
            return CommandResult(argv, 0, "".join(f"table {t}\n" for t in self.tables), "")
        assert argv == ("nft", "-f", "-") and stdin is not None
        self.scripts.append(stdin)
        for line in stdin.splitlines():
            self.tables.remove(line.removeprefix("delete table "))
        return CommandResult(argv, 0, "", "")


def test_nft_remove_tables_deletes_flannels_that_exist_in_one_transaction() -> None:
    fake = FakeNftTables(["inet filter", "ip flannel-ipv4", "ip6 flannel-ipv6"])
    assert run(NFTablesManager(fake).remove_tables(check=True)) == [
        "ip flannel-ipv4",
        "ip6 flannel-ipv6",
    ]
    assert fake.scripts == []
    assert run(NFTablesManager(fake).remove_tables()) == ["ip flannel-ipv4", "ip6 flannel-ipv6"]
    assert fake.scripts == ["delete table ip flannel-ipv4\ndelete table ip6 flannel-ipv6\n"]
    assert fake.tables == ["inet filter"]
    assert run(NFTablesManager(fake).remove_tables()) == []
    assert len(fake.scripts) == 1


def test_nft_remove_tables_fails_when_nft_cannot_list() -> None:
    class Broken(CommandRunner):
        async def run(self, *argv: str, stdin: str | None = None) -> CommandResult:
            return CommandResult(argv, 1, "", "Error: Could not process rule")

    with pytest.raises(FirewallError, match="couldn't list tables"):
        run(NFTablesManager(Broken()).remove_tables())
