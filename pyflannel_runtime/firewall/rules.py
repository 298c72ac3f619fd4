"""flannel's firewall rules as data, and the exact iptables-restore / nft payloads
(docs/compatibility.md, "iptables and nftables rules").

Pure functions only: the managers in ``iptables.py`` and ``nftables.py`` feed them what they
observed on the host and run what they return.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

IPNetwork = IPv4Network | IPv6Network

MASQ_CHAIN = "FLANNEL-POSTRTG"
FORWARD_CHAIN = "FLANNEL-FWD"
MASQ_COMMENT = "flanneld masq"
FORWARD_COMMENT = "flanneld forward"
# kube-proxy's masquerade mark: traffic it marked is NATed by kube-proxy, never twice.
KUBE_PROXY_MARK = "0x4000/0x4000"

# Where each flannel-owned chain lives; the jump into it sits in that table's built-in chain.
OWNED_CHAINS: Mapping[str, str] = {"nat": MASQ_CHAIN, "filter": FORWARD_CHAIN}

NFT_MASQ_CHAIN = "postrtg"
NFT_FORWARD_CHAIN = "forward"
NFT_MASQ_CHAIN_COMMENT = "chain to manage traffic masquerading by flannel"
NFT_FORWARD_CHAIN_COMMENT = "chain to accept flannel traffic"
NFT_PROBE_CHAIN = "masqueradeTest"


@dataclass(frozen=True)
class Rule:
    """One iptables rule: ``-t <table> -A <chain> <spec...>``."""

    table: str
    chain: str
    spec: tuple[str, ...]

    @property
    def owned_chains(self) -> frozenset[str]:
        """flannel's own chains this rule needs: the one it sits in and the one it jumps to."""
        target = self.spec[self.spec.index("-j") + 1] if "-j" in self.spec else ""
        return frozenset(c for c in (self.chain, target) if c in OWNED_CHAINS.values())


def _multicast(network: IPNetwork) -> str:
    return "224.0.0.0/4" if network.version == 4 else "ff00::/8"


def _check_same_family(network: IPNetwork, subnet: IPNetwork) -> None:
    if network.version != subnet.version:
        raise ValueError(f"network {network} and subnet {subnet} are of different IP versions")


def masq_rules(network: IPNetwork, subnet: IPNetwork, fully_random: bool) -> list[Rule]:
    """The masquerade rules in install order (flannel-io/flannel
    pkg/trafficmngr/iptables/iptables.go: masqRules, masqIP6Rules); ``network`` is the cluster
    network, ``subnet`` the own lease."""
    _check_same_family(network, subnet)
    n, s = str(network), str(subnet)
    comment = ("-m", "comment", "--comment", MASQ_COMMENT)
    masquerade = ("-j", "MASQUERADE", "--random-fully") if fully_random else ("-j", "MASQUERADE")
    specs: list[tuple[str, tuple[str, ...]]] = [
        ("POSTROUTING", (*comment, "-j", MASQ_CHAIN)),
        (MASQ_CHAIN, ("-m", "mark", "--mark", KUBE_PROXY_MARK, *comment, "-j", "RETURN")),
        (MASQ_CHAIN, ("-s", s, "-d", n, *comment, "-j", "RETURN")),
        (MASQ_CHAIN, ("-s", n, "-d", s, *comment, "-j", "RETURN")),
        (MASQ_CHAIN, ("!", "-s", n, "-d", s, *comment, "-j", "RETURN")),
        (MASQ_CHAIN, ("-s", n, "!", "-d", _multicast(network), *comment, *masquerade)),
        (MASQ_CHAIN, ("!", "-s", n, "-d", n, *comment, *masquerade)),
    ]
    return [Rule("nat", chain, spec) for chain, spec in specs]


def forward_rules(network: IPNetwork) -> list[Rule]:
    """The forward rules in install order (iptables.go: forwardRules)."""
    n = str(network)
    comment = ("-m", "comment", "--comment", FORWARD_COMMENT)
    return [
        Rule("filter", "FORWARD", (*comment, "-j", FORWARD_CHAIN)),
        Rule("filter", FORWARD_CHAIN, ("-s", n, *comment, "-j", "ACCEPT")),
        Rule("filter", FORWARD_CHAIN, ("-d", n, *comment, "-j", "ACCEPT")),
    ]


# --- iptables-restore payloads ------------------------------------------------------------


def restore_line(action: str, rule: Rule) -> str:
    """``-A``/``-D`` line; the comment is quoted because iptables-restore splits on spaces."""
    tokens = [action, rule.chain]
    for previous, token in itertools.pairwise(("", *rule.spec)):
        tokens.append(f'"{token}"' if previous == "--comment" else token)
    return " ".join(tokens)


def render_restore_payload(lines: Sequence[tuple[str, str]]) -> str:
    """``(table, line)`` pairs as ``*table ... COMMIT`` blocks, tables in first-seen order."""
    by_table: dict[str, list[str]] = {}
    for table, line in lines:
        by_table.setdefault(table, []).append(line)
    return "".join(
        f"*{table}\n" + "".join(f"{line}\n" for line in body) + "COMMIT\n"
        for table, body in by_table.items()
    )


def bootstrap_payload(rules: Sequence[Rule], existing: Collection[Rule]) -> str:
    """Delete each rule that exists, then append it: the chain ends up in exactly this order."""
    lines: list[tuple[str, str]] = []
    for rule in rules:
        if rule in existing:
            lines.append((rule.table, restore_line("-D", rule)))
        lines.append((rule.table, restore_line("-A", rule)))
    return render_restore_payload(lines)


def install_payload(chain: str, rules: Sequence[Rule], existing: Collection[Rule]) -> str:
    """`chain` declared afresh (iptables-restore --noflush empties a user chain it is given,
    or creates it) and filled with its rules, the others (the jump into it) deleted where they
    exist and appended: one transaction. flannel flushes the chain with a command of its own
    first (pkg/trafficmngr/iptables/iptables.go: CreateIP4Chain, ClearChain); on a host where
    the masquerade rules are all that needs connection tracking, the kernel stops tracking
    connections until they are back, and replies of masqueraded connections meanwhile reach the
    host untranslated, which answers them with resets."""
    table = rules[0].table
    lines = [(table, f":{chain} - [0:0]")]
    for rule in rules:
        if rule.chain != chain and rule in existing:
            lines.append((rule.table, restore_line("-D", rule)))
        lines.append((rule.table, restore_line("-A", rule)))
    return render_restore_payload(lines)


def teardown_payload(rules: Sequence[Rule], existing: Collection[Rule]) -> str:
    """Delete only the rules that exist (deleting a missing rule aborts the whole restore)."""
    return render_restore_payload(
        [(rule.table, restore_line("-D", rule)) for rule in rules if rule in existing]
    )


def _jumps_to(line: str, chain: str) -> bool:
    tokens = line.split()
    return tokens[:1] == ["-A"] and tokens[-2:] == ["-j", chain]


def _holding_flannels_chain(
    table_dumps: Mapping[str, str],
) -> Iterator[tuple[str, str, list[str]]]:
    """``(table, flannel's chain, -S lines)`` of each listing in which that chain exists."""
    for table, dump in table_dumps.items():
        chain = OWNED_CHAINS[table]
        listed = dump.splitlines()
        if f"-N {chain}" in listed:
            yield table, chain, listed


def owned_rule_lines(table_dumps: Mapping[str, str]) -> list[tuple[str, str]]:
    """flannel's own lines in ``iptables -t <table> -S`` listings, as ``(table, line)``: its
    chain, the chain's rules and every jump into it (what ``chain_removal_payload`` removes)."""
    return [
        (table, line)
        for table, chain, listed in _holding_flannels_chain(table_dumps)
        for line in listed
        if line == f"-N {chain}" or line.startswith(f"-A {chain} ") or _jumps_to(line, chain)
    ]


def chain_removal_payload(table_dumps: Mapping[str, str]) -> str:
    """Remove flannel's chains and every jump into them, given ``iptables -t <table> -S``.

    Unlike flannel (which looks for FLANNEL-FWD in ``nat`` and cannot delete a chain that is
    still referenced), this removes FLANNEL-POSTRTG from ``nat`` and FLANNEL-FWD from
    ``filter`` together with their POSTROUTING/FORWARD jumps. ``-S`` lines are already in
    iptables-restore syntax, so a jump is deleted by replaying its line with ``-D``.
    """
    lines: list[tuple[str, str]] = []
    for table, chain, listed in _holding_flannels_chain(table_dumps):
        lines.extend((table, "-D" + line[2:]) for line in listed if _jumps_to(line, chain))
        lines.append((table, f"-F {chain}"))
        lines.append((table, f"-X {chain}"))
    return render_restore_payload(lines)


# --- nftables scripts (`nft -f -`) --------------------------------------------------------


_NFT_TABLES = {4: ("ip", "flannel-ipv4"), 6: ("ip6", "flannel-ipv6")}


def nft_table(version: int) -> tuple[str, str]:
    """The (family, name) of flannel's nft table for an IP version."""
    return _NFT_TABLES[version]


def _nft_addr(version: int) -> str:
    return "ip" if version == 4 else "ip6"


def nft_init_script() -> str:
    """Both tables, with flannel's table comments."""
    return "".join(
        f'add table {family} {name} {{ comment "rules for {name}" ; }}\n'
        for family, name in _NFT_TABLES.values()
    )


def _nft_chain_refill(
    version: int, chain: str, declaration: str, comment: str, rules: Sequence[str]
) -> str:
    family, table = nft_table(version)
    head = [
        f'add chain {family} {table} {chain} {{ {declaration} ; comment "{comment}" ; }}',
        f"flush chain {family} {table} {chain}",
    ]
    body = [f"add rule {family} {table} {chain} {rule}" for rule in rules]
    return "".join(f"{line}\n" for line in head + body)


def nft_masq_rules(network: IPNetwork, subnet: IPNetwork, fully_random: bool) -> list[str]:
    """The postrtg rules (flannel-io/flannel pkg/trafficmngr/nftables/nftables.go:
    addMasqRules). Unlike iptables: exact mark match, and `saddr != S` in rule 4."""
    _check_same_family(network, subnet)
    a, n, s = _nft_addr(network.version), str(network), str(subnet)
    masquerade = "masquerade fully-random" if fully_random else "masquerade"
    return [
        "meta mark 0x4000 return",
        f"{a} saddr {s} {a} daddr {n} return",
        f"{a} saddr {n} {a} daddr {s} return",
        f"{a} saddr != {s} {a} daddr {n} return",
        f"{a} saddr {n} {a} daddr != {_multicast(network)} {masquerade}",
        f"{a} saddr != {n} {a} daddr {n} {masquerade}",
    ]


def nft_forward_rules(network: IPNetwork) -> list[str]:
    a, n = _nft_addr(network.version), str(network)
    return [f"{a} saddr {n} accept", f"{a} daddr {n} accept"]


def nft_masq_script(network: IPNetwork, subnet: IPNetwork, fully_random: bool) -> str:
    """Create-or-keep the postrtg chain, flush it, refill it: one transaction."""
    return _nft_chain_refill(
        network.version,
        NFT_MASQ_CHAIN,
        "type nat hook postrouting priority srcnat",
        NFT_MASQ_CHAIN_COMMENT,
        nft_masq_rules(network, subnet, fully_random),
    )


def nft_forward_script(network: IPNetwork) -> str:
    return _nft_chain_refill(
        network.version,
        NFT_FORWARD_CHAIN,
        "type filter hook forward priority filter",
        NFT_FORWARD_CHAIN_COMMENT,
        nft_forward_rules(network),
    )


def nft_fully_random_probe_script() -> str:
    """A transaction that only passes ``nft --check`` if the kernel has masquerade fully-random."""
    family, table = nft_table(4)
    return (
        f"add table {family} {table}\n"
        f"add chain {family} {table} {NFT_PROBE_CHAIN}"
        " { type nat hook postrouting priority srcnat ; }\n"
        f"add rule {family} {table} {NFT_PROBE_CHAIN} ip saddr != 127.0.0.1"
        " masquerade fully-random\n"
    )


def nft_delete_table_script(version: int) -> str:
    family, table = nft_table(version)
    return f"delete table {family} {table}\n"


def nft_owned_tables(listing: str) -> list[int]:
    """The IP versions whose flannel table ``nft list tables`` lists."""
    listed = set(listing.splitlines())
    return [
        version
        for version, (family, table) in _NFT_TABLES.items()
        if f"table {family} {table}" in listed
    ]
