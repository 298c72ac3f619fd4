"""Pure address preference and regex-candidate logic of interface selection (flannel-io/flannel
pkg/ipmatch/match.go: LookupExtIface; pkg/ip/iface.go: GetInterfaceIP4Addrs)."""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv6Address, ip_address
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.netdev.candidates import (
    IFA_F_DEPRECATED,
    IFA_F_PERMANENT,
    IFA_F_TEMPORARY,
    describe_links,
    is_global_unicast,
    parse_go_ip,
    regex_candidate,
    usable_addresses,
)
from pyflannel_runtime.netdev.types import IfAddr, IpStack, Link

PERM = IFA_F_PERMANENT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1", True),
        ("192.168.1.1", True),  # private still counts as global unicast in Go
        ("240.0.0.1", True),
        ("127.0.0.1", False),
        ("169.254.3.4", False),
        ("224.0.0.5", False),
        ("255.255.255.255", False),
        ("0.0.0.0", False),
        ("2001:db8::1", True),
        ("fd00::1", True),
        ("fe80::1", False),
        ("::1", False),
        ("ff02::1", False),
        ("::", False),
    ],
)
def test_is_global_unicast_follows_go(text: str, expected: bool) -> None:
    assert is_global_unicast(ip_address(text)) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1", IPv4Address("10.0.0.1")),
        ("::ffff:10.0.0.1", IPv4Address("10.0.0.1")),
        ("2001:db8::1", IPv6Address("2001:db8::1")),
        ("fe80::1%eth0", None),
        ("010.0.0.1", None),
        ("eth0", None),
        ("10.0.0.0/8", None),
        ("", None),
    ],
)
def test_parse_go_ip(text: str, expected: object) -> None:
    assert parse_go_ip(text) == expected


def _addrs(*items: tuple[str, int]) -> list[IfAddr]:
    return [IfAddr(ip_address(text), flags) for text, flags in items]


def test_usable_addresses_orders_by_scope_then_permanent_then_temporary() -> None:
    addrs = _addrs(
        ("fe80::1", PERM),
        ("2001:db8::7", IFA_F_TEMPORARY),
        ("2001:db8::5", 0),
        ("2001:db8::dead", PERM | IFA_F_DEPRECATED),
        ("2001:db8::1", PERM),
        ("::1", PERM),
        ("10.0.0.1", PERM),
    )
    assert [str(ip) for ip in usable_addresses(addrs, 6)] == [
        "2001:db8::1",
        "2001:db8::5",
        "2001:db8::7",
        "fe80::1",
    ]


def test_ipv4_secondary_ranks_after_primary() -> None:
    # IFA_F_SECONDARY shares the IFA_F_TEMPORARY bit, so Go ranks secondaries last
    addrs = _addrs(("10.0.0.9", PERM | 0x01), ("169.254.0.2", PERM), ("10.0.0.5", PERM))
    assert [str(ip) for ip in usable_addresses(addrs, 4)] == [
        "10.0.0.5",
        "10.0.0.9",
        "169.254.0.2",
    ]


# Addresses from every category selection distinguishes, with random IFA_F_* flags.
_IPS = st.one_of(
    st.integers(0, 2**32 - 1).map(IPv4Address),
    st.integers(0, 2**16 - 1).map(lambda n: IPv4Address(0xA9FE0000 + n)),  # 169.254/16
    st.integers(0, 2**16 - 1).map(lambda n: IPv4Address(0x7F000000 + n)),  # loopback
    st.integers(0, 2**64 - 1).map(lambda n: IPv6Address((0x20010DB8 << 96) + n)),
    st.integers(0, 2**64 - 1).map(lambda n: IPv6Address((0xFE80 << 112) + n)),
    st.sampled_from([IPv6Address("::1"), IPv6Address("::"), IPv6Address("ff02::1")]),
)
_FLAGS = st.lists(st.sampled_from([0x01, 0x02, 0x20, 0x40, 0x80]), max_size=5).map(sum)
_ADDR_LISTS = st.lists(st.builds(IfAddr, _IPS, _FLAGS), max_size=12, unique_by=lambda a: a.ip)


def _go_compare(a: IfAddr, b: IfAddr) -> int:
    """An independent transcription of the three-step comparison flannel sorts with."""
    a_ll, b_ll = a.ip.is_link_local, b.ip.is_link_local
    if not a_ll and b_ll:
        return -1
    if a_ll and not b_ll:
        return 1
    a_perm, b_perm = bool(a.flags & 0x80), bool(b.flags & 0x80)
    if a_perm != b_perm:
        return -1 if a_perm else 1
    a_temp, b_temp = bool(a.flags & 0x01), bool(b.flags & 0x01)
    if a_temp != b_temp:
        return 1 if a_temp else -1
    return 0


def _eligible(addr: IfAddr, version: int) -> bool:
    ip = addr.ip
    usable_scope = not (ip.is_loopback or ip.is_multicast or ip.is_unspecified) and (
        ip != IPv4Address("255.255.255.255")
    )
    return ip.version == version and usable_scope and not addr.flags & 0x20


@given(_ADDR_LISTS, st.sampled_from([4, 6]))
def test_usable_addresses_is_a_stable_sort_of_the_eligible(
    addrs: list[IfAddr], version: int
) -> None:
    result = usable_addresses(addrs, version)
    by_ip = {a.ip: a for a in addrs}
    position = {a.ip: i for i, a in enumerate(addrs)}

    assert sorted(result, key=position.__getitem__) == [
        a.ip for a in addrs if _eligible(a, version)
    ]
    for earlier, later in pairwise(result):
        order = _go_compare(by_ip[earlier], by_ip[later])
        assert order <= 0
        if order == 0:
            assert position[earlier] < position[later]


def _link(name: str, index: int, *addrs: str, mtu: int = 1500) -> Link:
    return Link(name, index, mtu, tuple(IfAddr(ip_address(a), PERM) for a in addrs))


LINKS = [
    _link("lo", 1, "127.0.0.1", "::1"),
    _link("eth0", 2, "10.0.0.5", "2001:db8::5"),
    _link("eth1", 3, "192.0.2.10", "2001:db8:1::10"),
    _link("wg0", 4, "172.16.0.1"),
]


def test_regex_matches_ip_before_any_name() -> None:
    match = regex_candidate(LINKS, re.compile(r"eth0|192\.0\.2\."), IpStack.V4)
    assert match is not None
    assert (match.link.name, match.addr, match.v6_addr) == ("eth1", IPv4Address("192.0.2.10"), None)


def test_regex_falls_back_to_names_in_index_order() -> None:
    match = regex_candidate(LINKS, re.compile(r"^(wg|eth)"), IpStack.V4)
    assert match is not None
    assert (match.link.name, match.addr) == ("eth0", None)


def test_regex_is_unanchored_like_go_matchstring() -> None:
    match = regex_candidate(LINKS, re.compile(r"0\.1$"), IpStack.V4)
    assert match is not None
    assert (match.link.name, match.addr) == ("wg0", IPv4Address("172.16.0.1"))


def test_regex_v6_stack_only_looks_at_v6_addresses() -> None:
    match = regex_candidate(LINKS, re.compile(r"^2001:db8:1:"), IpStack.V6)
    assert match is not None
    assert (match.link.name, match.addr, match.v6_addr) == (
        "eth1",
        None,
        IPv6Address("2001:db8:1::10"),
    )
    assert regex_candidate(LINKS, re.compile(r"^10\."), IpStack.V6) is None


def test_regex_dual_stack_needs_both_families_on_one_link() -> None:
    both = regex_candidate(LINKS, re.compile(r"^(10\.0|2001:db8::)"), IpStack.DUAL)
    assert both is not None
    assert (both.link.name, both.addr, both.v6_addr) == (
        "eth0",
        IPv4Address("10.0.0.5"),
        IPv6Address("2001:db8::5"),
    )


def test_regex_dual_stack_half_match_does_not_leak_into_a_name_match() -> None:
    # eth0 matches by v4 only; the name match on wg0 must not inherit eth0's 10.0.0.5
    match = regex_candidate(LINKS, re.compile(r"^10\.|wg"), IpStack.DUAL)
    assert match is not None
    assert (match.link.name, match.addr, match.v6_addr) == ("wg0", None, None)


def test_regex_no_match() -> None:
    assert regex_candidate(LINKS, re.compile(r"^bond"), IpStack.V4) is None


@given(st.sampled_from(LINKS[1:]))
def test_exact_ip_regex_selects_the_link_that_owns_it(link: Link) -> None:
    ip = usable_addresses(link.addrs, 4)[0]
    match = regex_candidate(LINKS, re.compile(f"^{re.escape(str(ip))}$"), IpStack.V4)
    assert match is not None
    assert (match.link, match.addr) == (link, ip)


def test_describe_links_formats_like_go() -> None:
    assert describe_links(LINKS, IpStack.V4) == (
        "lo:[], eth0:[10.0.0.5], eth1:[192.0.2.10], wg0:[172.16.0.1]"
    )
    assert describe_links(LINKS, IpStack.V6) == (
        "lo:[], eth0:[2001:db8::5], eth1:[2001:db8:1::10], wg0:[]"
    )
    two = [_link("eth0", 2, "10.0.0.6", "10.0.0.5")]
    assert describe_links(two, IpStack.DUAL) == "eth0:[10.0.0.6 10.0.0.5]"
