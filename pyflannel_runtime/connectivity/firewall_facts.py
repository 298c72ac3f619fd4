"""What a node's firewall does to pod traffic, as far as a failed scenario needs to know: a
FORWARD policy that drops, and whether flannel's forward and masquerade rules are in place
(flannel-io/flannel pkg/trafficmngr/iptables/iptables.go and nftables/nftables.go).

Parsers are pure: ``iptables-save`` output for the iptables mode (what Docker's DROP policy
shows up in), ``nft -j list ruleset`` for the nftables mode and for base chains of other
tables that drop what they do not accept. ``read_firewall`` runs the two commands.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from dataclasses import dataclass, replace
from typing import Any

from pyflannel_runtime.firewall.rules import (
    FORWARD_CHAIN,
    MASQ_CHAIN,
    NFT_FORWARD_CHAIN,
    NFT_MASQ_CHAIN,
    nft_table,
)


@dataclass(frozen=True)
class FirewallFacts:
    readable: bool = True
    # Chains that drop forwarded packets by policy, as "<family> <table> <chain>".
    forward_drop: tuple[str, ...] = ()
    forward_rules: bool = False  # flannel's ACCEPT rules, reached from the forward hook
    masquerade: bool = False  # flannel's MASQUERADE rules, reached from postrouting
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "readable": self.readable,
            "forward_drop": list(self.forward_drop),
            "forward_rules": self.forward_rules,
            "masquerade": self.masquerade,
            "note": self.note,
        }

    @classmethod
    def of(cls, value: dict[str, Any] | None) -> FirewallFacts:
        if not value:
            return cls(readable=False, note="not read")
        return cls(
            readable=bool(value.get("readable")),
            forward_drop=tuple(value.get("forward_drop") or ()),
            forward_rules=bool(value.get("forward_rules")),
            masquerade=bool(value.get("masquerade")),
            note=str(value.get("note") or ""),
        )


def parse_iptables_save(text: str) -> FirewallFacts:
    """The filter table's FORWARD policy and flannel's chains, from ``iptables-save``."""
    table = ""
    policy: dict[tuple[str, str], str] = {}
    rules: dict[tuple[str, str], list[list[str]]] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0].startswith("*"):
            table = words[0][1:]
        elif words[0].startswith(":") and len(words) >= 2:
            policy[(table, words[0][1:])] = words[1]
        elif words[0] == "-A" and len(words) >= 2:
            rules.setdefault((table, words[1]), []).append(words[2:])

    def jumps(chain: str, target: str, table: str) -> bool:
        return any(_target(rule) == target for rule in rules.get((table, chain), ()))

    def count(chain: str, target: str, table: str) -> int:
        return sum(_target(rule) == target for rule in rules.get((table, chain), ()))

    drop = ["ip filter FORWARD"] if policy.get(("filter", "FORWARD")) == "DROP" else []
    return FirewallFacts(
        forward_drop=tuple(drop),
        forward_rules=jumps("FORWARD", FORWARD_CHAIN, "filter")
        and count(FORWARD_CHAIN, "ACCEPT", "filter") > 0,
        masquerade=jumps("POSTROUTING", MASQ_CHAIN, "nat")
        and count(MASQ_CHAIN, "MASQUERADE", "nat") > 0,
    )


def _target(rule: list[str]) -> str:
    for option, value in itertools.pairwise(rule):
        if option in ("-j", "--jump", "-g", "--goto"):
            return value
    return ""


def parse_nft_ruleset(document: str) -> FirewallFacts:
    """Base chains hooked at forward with a drop policy, and flannel's nftables-mode chains,
    from ``nft -j list ruleset``."""
    try:
        items = json.loads(document).get("nftables", [])
    except (ValueError, AttributeError):
        return FirewallFacts(readable=False, note="nft's ruleset did not parse")
    chains = [i["chain"] for i in items if isinstance(i, dict) and "chain" in i]
    rules = [i["rule"] for i in items if isinstance(i, dict) and "rule" in i]
    drop = tuple(
        f"{c.get('family')} {c.get('table')} {c.get('name')}"
        for c in chains
        if c.get("hook") == "forward" and c.get("policy") == "drop"
    )

    family, table = nft_table(4)

    def has(chain: str, verdict: str) -> bool:
        return any(
            r.get("family") == family
            and r.get("table") == table
            and r.get("chain") == chain
            and any(isinstance(e, dict) and verdict in e for e in r.get("expr", ()))
            for r in rules
        )

    return FirewallFacts(
        forward_drop=drop,
        forward_rules=has(NFT_FORWARD_CHAIN, "accept"),
        masquerade=has(NFT_MASQ_CHAIN, "masquerade"),
    )


def _run(*argv: str) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_firewall(nftables_mode: bool) -> FirewallFacts:
    """This host's facts: iptables-save in iptables mode, nft's ruleset either way (other
    tables' drop policies; flannel's own table in nftables mode)."""
    nft = _run("nft", "-j", "list", "ruleset")
    from_nft = parse_nft_ruleset(nft) if nft is not None else FirewallFacts(readable=False)
    if nftables_mode:
        return from_nft if nft is not None else FirewallFacts(readable=False, note="no nft")
    saved = _run("iptables-save")
    if saved is None:
        return FirewallFacts(readable=False, note="iptables-save did not run")
    from_iptables = parse_iptables_save(saved)
    # iptables-nft's own chains show in both listings: keep nft's drop chains of other tables.
    other = tuple(d for d in from_nft.forward_drop if d != "ip filter FORWARD")
    return replace(from_iptables, forward_drop=from_iptables.forward_drop + other)
