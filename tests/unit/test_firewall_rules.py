"""Golden rule lines (flannel-io/flannel e2e/rules.go, pkg/trafficmngr/) and the payloads built
from them."""

from __future__ import annotations

import re
import shlex
from ipaddress import IPv4Network, IPv6Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.firewall.rules import (
    Rule,
    bootstrap_payload,
    chain_removal_payload,
    forward_rules,
    masq_rules,
    nft_forward_script,
    nft_fully_random_probe_script,
    nft_init_script,
    nft_masq_script,
    nft_owned_tables,
    owned_rule_lines,
    restore_line,
    teardown_payload,
)

N4, S4 = IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24")
N6, S6 = IPv6Network("fd00:10:244::/56"), IPv6Network("fd00:10:244:1::/64")

MASQ_V4 = [
    '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
    '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s 10.244.1.0/24 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.1.0/24 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
    '-A FLANNEL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
]  # fmt: skip

MASQ_V6 = [
    '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
    '-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s fd00:10:244:1::/64 -d fd00:10:244::/56 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s fd00:10:244::/56 -d fd00:10:244:1::/64 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG ! -s fd00:10:244::/56 -d fd00:10:244:1::/64 -m comment --comment "flanneld masq" -j RETURN',
    '-A FLANNEL-POSTRTG -s fd00:10:244::/56 ! -d ff00::/8 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
    '-A FLANNEL-POSTRTG ! -s fd00:10:244::/56 -d fd00:10:244::/56 -m comment --comment "flanneld masq" -j MASQUERADE --random-fully',
]  # fmt: skip

FORWARD_V4 = [
    '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
    '-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT',
    '-A FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT',
]

FORWARD_V6 = [
    '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
    '-A FLANNEL-FWD -s fd00:10:244::/56 -m comment --comment "flanneld forward" -j ACCEPT',
    '-A FLANNEL-FWD -d fd00:10:244::/56 -m comment --comment "flanneld forward" -j ACCEPT',
]


def lines(rules: list[Rule]) -> list[str]:
    return [restore_line("-A", rule) for rule in rules]


def test_masq_rules_v4_golden() -> None:
    rules = masq_rules(N4, S4, fully_random=True)
    assert lines(rules) == MASQ_V4
    assert {rule.table for rule in rules} == {"nat"}


def test_masq_rules_v6_golden() -> None:
    assert lines(masq_rules(N6, S6, fully_random=True)) == MASQ_V6


def test_masq_rules_without_random_fully_drop_only_the_suffix() -> None:
    expected = [line.removesuffix(" --random-fully") for line in MASQ_V4]
    assert lines(masq_rules(N4, S4, fully_random=False)) == expected
    assert expected[-1].endswith("-j MASQUERADE")


def test_forward_rules_golden() -> None:
    assert lines(forward_rules(N4)) == FORWARD_V4
    assert lines(forward_rules(N6)) == FORWARD_V6
    assert {rule.table for rule in forward_rules(N4)} == {"filter"}


def test_rule_spec_keeps_the_comment_as_one_argument() -> None:
    jump = masq_rules(N4, S4, fully_random=True)[0]
    assert jump.spec == ("-m", "comment", "--comment", "flanneld masq", "-j", "FLANNEL-POSTRTG")


def test_mixed_ip_versions_are_rejected() -> None:
    message = "network 10.244.0.0/16 and subnet fd00:10:244:1::/64 are of different IP versions"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        masq_rules(N4, S6, fully_random=True)


def test_owned_chains() -> None:
    jump, mark, *_ = masq_rules(N4, S4, fully_random=True)
    assert jump.owned_chains == {"FLANNEL-POSTRTG"}
    assert mark.owned_chains == {"FLANNEL-POSTRTG"}
    assert forward_rules(N4)[0].owned_chains == {"FLANNEL-FWD"}


def test_bootstrap_payload_deletes_existing_rules_before_appending_each() -> None:
    rules = masq_rules(N4, S4, fully_random=True)
    payload = bootstrap_payload(rules, existing=[rules[0], rules[3]])
    expected = [
        "*nat",
        MASQ_V4[0].replace("-A", "-D", 1),
        MASQ_V4[0],
        MASQ_V4[1],
        MASQ_V4[2],
        MASQ_V4[3].replace("-A", "-D", 1),
        MASQ_V4[3],
        *MASQ_V4[4:],
        "COMMIT",
    ]
    assert payload == "\n".join(expected) + "\n"


def test_bootstrap_payload_groups_tables_in_first_seen_order() -> None:
    rules = forward_rules(N4) + masq_rules(N4, S4, fully_random=True)
    payload = bootstrap_payload(rules, existing=[])
    expected = ["*filter", *FORWARD_V4, "COMMIT", "*nat", *MASQ_V4, "COMMIT"]
    assert payload == "\n".join(expected) + "\n"


def test_teardown_payload_deletes_only_existing_rules() -> None:
    rules = masq_rules(N4, S4, fully_random=True)
    payload = teardown_payload(rules, existing=[rules[6], rules[1]])
    deletes = [MASQ_V4[i].replace("-A", "-D", 1) for i in (1, 6)]
    assert payload == "\n".join(["*nat", *deletes, "COMMIT"]) + "\n"
    assert teardown_payload(rules, existing=[]) == ""


NAT_DUMP = """\
-P PREROUTING ACCEPT
-P INPUT ACCEPT
-P OUTPUT ACCEPT
-P POSTROUTING ACCEPT
-N FLANNEL-POSTRTG
-N KUBE-POSTROUTING
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "flanneld masq" -j RETURN
"""

FILTER_DUMP = """\
-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N FLANNEL-FWD
-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD
-A FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "flanneld forward" -j ACCEPT
"""


def test_chain_removal_payload_removes_both_chains_with_their_jumps() -> None:
    payload = chain_removal_payload({"nat": NAT_DUMP, "filter": FILTER_DUMP})
    assert payload == (
        "*nat\n"
        '-D POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG\n'
        "-F FLANNEL-POSTRTG\n"
        "-X FLANNEL-POSTRTG\n"
        "COMMIT\n"
        "*filter\n"
        '-D FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD\n'
        "-F FLANNEL-FWD\n"
        "-X FLANNEL-FWD\n"
        "COMMIT\n"
    )


def test_chain_removal_payload_goes_on_past_a_table_without_its_chain() -> None:
    assert chain_removal_payload({"nat": "-P POSTROUTING ACCEPT\n", "filter": FILTER_DUMP}) == (
        "*filter\n"
        '-D FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD\n'
        "-F FLANNEL-FWD\n"
        "-X FLANNEL-FWD\n"
        "COMMIT\n"
    )


def test_only_appended_jumps_into_the_chain_are_deleted() -> None:
    dump = (
        "-N FLANNEL-FWD\n\n-j FLANNEL-FWD\n-I FORWARD -j FLANNEL-FWD\n-A FORWARD -j FLANNEL-FWDX\n"
    )
    assert chain_removal_payload({"filter": dump}) == (
        "*filter\n-F FLANNEL-FWD\n-X FLANNEL-FWD\nCOMMIT\n"
    )


def test_chain_removal_payload_is_empty_without_flannel_chains() -> None:
    bare = "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n"
    assert chain_removal_payload({"filter": bare, "nat": ""}) == ""


def test_owned_rule_lines_are_the_chains_their_rules_and_the_jumps_into_them() -> None:
    foreign = "-N KEEP\n-A POSTROUTING -j KEEP\n-A KEEP -j FLANNEL-POSTRTG-NOT\n"
    assert owned_rule_lines({"nat": NAT_DUMP + foreign, "filter": FILTER_DUMP}) == [
        (table, line)
        for table, dump in (("nat", NAT_DUMP), ("filter", FILTER_DUMP))
        for line in dump.splitlines()
        if "FLANNEL" in line
    ]


def test_owned_rule_lines_without_flannels_chain_are_none() -> None:
    # A stray jump alone is no chain of flannel's to remove (and -X would fail on it).
    assert owned_rule_lines({"filter": "-A FORWARD -j FLANNEL-FWD\n", "nat": ""}) == []


def test_nft_owned_tables_are_flannels_two_only() -> None:
    listing = "table inet filter\ntable ip flannel-ipv4\ntable ip6 flannel-ipv6x\ntable ip6 flannel-ipv6\n"
    assert nft_owned_tables(listing) == [4, 6]
    assert nft_owned_tables("table ip flannel-ipv6\ntable inet flannel-ipv4\n") == []


def test_nft_init_script() -> None:
    assert nft_init_script() == (
        'add table ip flannel-ipv4 { comment "rules for flannel-ipv4" ; }\n'
        'add table ip6 flannel-ipv6 { comment "rules for flannel-ipv6" ; }\n'
    )


def test_nft_masq_script_v4() -> None:
    assert nft_masq_script(N4, S4, fully_random=True) == (
        "add chain ip flannel-ipv4 postrtg { type nat hook postrouting priority srcnat ;"
        ' comment "chain to manage traffic masquerading by flannel" ; }\n'
        "flush chain ip flannel-ipv4 postrtg\n"
        "add rule ip flannel-ipv4 postrtg meta mark 0x4000 return\n"
        "add rule ip flannel-ipv4 postrtg ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return\n"
        "add rule ip flannel-ipv4 postrtg ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return\n"
        "add rule ip flannel-ipv4 postrtg ip saddr != 10.244.1.0/24 ip daddr 10.244.0.0/16 return\n"
        "add rule ip flannel-ipv4 postrtg"
        " ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random\n"
        "add rule ip flannel-ipv4 postrtg"
        " ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random\n"
    )


def test_nft_masq_script_v6_without_fully_random() -> None:
    assert nft_masq_script(N6, S6, fully_random=False) == (
        "add chain ip6 flannel-ipv6 postrtg { type nat hook postrouting priority srcnat ;"
        ' comment "chain to manage traffic masquerading by flannel" ; }\n'
        "flush chain ip6 flannel-ipv6 postrtg\n"
        "add rule ip6 flannel-ipv6 postrtg meta mark 0x4000 return\n"
        "add rule ip6 flannel-ipv6 postrtg"
        " ip6 saddr fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 return\n"
        "add rule ip6 flannel-ipv6 postrtg"
        " ip6 saddr fd00:10:244::/56 ip6 daddr fd00:10:244:1::/64 return\n"
        "add rule ip6 flannel-ipv6 postrtg"
        " ip6 saddr != fd00:10:244:1::/64 ip6 daddr fd00:10:244::/56 return\n"
        "add rule ip6 flannel-ipv6 postrtg"
        " ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade\n"
        "add rule ip6 flannel-ipv6 postrtg"
        " ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244::/56 masquerade\n"
    )


def test_nft_forward_script() -> None:
    assert nft_forward_script(N4) == (
        "add chain ip flannel-ipv4 forward { type filter hook forward priority filter ;"
        ' comment "chain to accept flannel traffic" ; }\n'
        "flush chain ip flannel-ipv4 forward\n"
        "add rule ip flannel-ipv4 forward ip saddr 10.244.0.0/16 accept\n"
        "add rule ip flannel-ipv4 forward ip daddr 10.244.0.0/16 accept\n"
    )
    assert "add rule ip6 flannel-ipv6 forward ip6 daddr fd00:10:244::/56 accept\n" in (
        nft_forward_script(N6)
    )


def test_nft_probe_tests_fully_random_masquerade() -> None:
    """The whole transaction: without its table or chain, ``nft --check`` fails on every
    kernel and fully-random masquerade would silently never be used."""
    assert nft_fully_random_probe_script() == (
        "add table ip flannel-ipv4\n"
        "add chain ip flannel-ipv4 masqueradeTest { type nat hook postrouting priority srcnat ; }\n"
        "add rule ip flannel-ipv4 masqueradeTest ip saddr != 127.0.0.1 masquerade fully-random\n"
    )


# --- properties ---------------------------------------------------------------------------


@st.composite
def network_and_subnet(
    draw: st.DrawFn,
) -> tuple[IPv4Network | IPv6Network, IPv4Network | IPv6Network]:
    version = draw(st.sampled_from([4, 6]))
    bits = 32 if version == 4 else 128
    prefix = draw(st.integers(min_value=1, max_value=bits - 1))
    address = draw(st.integers(min_value=0, max_value=2**bits - 1))
    make = IPv4Network if version == 4 else IPv6Network
    network = make((address, prefix), strict=False)
    sub_prefix = draw(st.integers(min_value=prefix, max_value=bits))
    index = draw(st.integers(min_value=0, max_value=2 ** (sub_prefix - prefix) - 1))
    subnet = make((int(network.network_address) + (index << (bits - sub_prefix)), sub_prefix))
    assert subnet.subnet_of(network)  # type: ignore[arg-type]
    return network, subnet


def _restore_blocks(payload: str) -> list[tuple[str, list[list[str]]]]:
    """Parse a payload the way iptables-restore tokenises it (quotes respected)."""
    blocks: list[tuple[str, list[list[str]]]] = []
    assert payload.endswith("COMMIT\n")
    for line in payload.splitlines():
        if line.startswith("*"):
            blocks.append((line[1:], []))
        elif line != "COMMIT":
            blocks[-1][1].append(shlex.split(line))
    return blocks


@given(network_and_subnet(), st.booleans(), st.data())
def test_bootstrap_payload_round_trips_to_the_rule_specs(
    pair: tuple[IPv4Network | IPv6Network, IPv4Network | IPv6Network],
    fully_random: bool,
    data: st.DataObject,
) -> None:
    network, subnet = pair
    rules = masq_rules(network, subnet, fully_random) + forward_rules(network)
    existing = data.draw(st.lists(st.sampled_from(rules), unique=True))
    payload = bootstrap_payload(rules, existing)

    blocks = _restore_blocks(payload)
    assert [table for table, _ in blocks] == ["nat", "filter"]
    parsed = [tokens for _, body in blocks for tokens in body]
    expected: list[list[str]] = []
    for rule in rules:
        if rule in existing:
            expected.append(["-D", rule.chain, *rule.spec])
        expected.append(["-A", rule.chain, *rule.spec])
    assert parsed == expected
    rule_lines = [line for line in payload.splitlines() if line.startswith("-")]
    assert all(
        ' --comment "flanneld masq" ' in line or ' --comment "flanneld forward" ' in line
        for line in rule_lines
    )


@given(network_and_subnet(), st.booleans())
def test_masq_rules_put_subnet_and_network_where_the_spec_says(
    pair: tuple[IPv4Network | IPv6Network, IPv4Network | IPv6Network], fully_random: bool
) -> None:
    network, subnet = pair
    n, s = str(network), str(subnet)
    multicast = "224.0.0.0/4" if network.version == 4 else "ff00::/8"
    addresses = [
        [t for t in rule.spec if t in (n, s, multicast) or t == "!"]
        for rule in masq_rules(network, subnet, fully_random)
    ]
    if n == s:  # the subnet may be the whole network; then only the positions are checked
        return
    assert addresses == [[], [], [s, n], [n, s], ["!", n, s], [n, "!", multicast], ["!", n, n]]


@given(network_and_subnet(), st.booleans())
def test_nft_masq_script_is_one_flush_then_six_rules(
    pair: tuple[IPv4Network | IPv6Network, IPv4Network | IPv6Network], fully_random: bool
) -> None:
    network, subnet = pair
    family, table, addr = (
        ("ip", "flannel-ipv4", "ip") if network.version == 4 else ("ip6", "flannel-ipv6", "ip6")
    )
    script = nft_masq_script(network, subnet, fully_random).splitlines()
    assert script[1] == f"flush chain {family} {table} postrtg"
    prefix = f"add rule {family} {table} postrtg "
    rules = [line.removeprefix(prefix) for line in script[2:]]
    assert all(line.startswith(prefix) for line in script[2:])
    masquerade = "masquerade fully-random" if fully_random else "masquerade"
    assert rules[3] == f"{addr} saddr != {subnet} {addr} daddr {network} return"
    assert rules[5] == f"{addr} saddr != {network} {addr} daddr {network} {masquerade}"
    assert len(rules) == 6
