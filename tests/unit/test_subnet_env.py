"""subnet.env: flanneld's exact bytes, flanneld's lenient reader, the CNI plugin's strict one."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pyflannel_runtime.wire.subnet_env import (
    CniSubnetEnv,
    PreviousSubnets,
    SubnetEnv,
    SubnetEnvError,
    _ipv6_hex,
    masked_cidr,
    parse_cni_subnet_env,
    parse_dotenv,
    read_previous_subnets,
)

UNIT = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"
DUAL_STACK_EXAMPLE = (
    "FLANNEL_NETWORK=10.42.0.0/16\n"
    "FLANNEL_SUBNET=10.42.0.1/24\n"
    "FLANNEL_IPV6_NETWORK=2001:cafe:42::/56\n"
    "FLANNEL_IPV6_SUBNET=2001:cafe:42::1/64\n"
    "FLANNEL_MTU=1450\n"
    "FLANNEL_IPMASQ=true\n"
)


def test_dual_stack_example_byte_for_byte() -> None:
    env = SubnetEnv(
        network=IPv4Network("10.42.0.0/16"),
        subnet=IPv4Network("10.42.0.0/24"),
        ipv6_network=IPv6Network("2001:cafe:42::/56"),
        ipv6_subnet=IPv6Network("2001:cafe:42::/64"),
        mtu=1450,
        ipmasq=True,
    )
    assert env.render() == DUAL_STACK_EXAMPLE


def test_ipv4_only_without_masq() -> None:
    env = SubnetEnv(
        IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24"), None, None, 1500, False
    )
    assert env.render() == (
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n"
        "FLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n"
    )


def test_lenient_reader_masks_and_accepts_quotes_export_comments() -> None:
    prev = read_previous_subnets(
        "# written by flanneld\nexport FLANNEL_NETWORK='10.244.0.0/16'\n"
        'FLANNEL_SUBNET="10.244.7.1/24"\nFLANNEL_IPV6_SUBNET=fd00::1/64\n'
    )
    assert prev.network == IPv4Network("10.244.0.0/16")
    assert prev.subnet == IPv4Network("10.244.7.0/24")
    assert prev.ipv6_subnet == IPv6Network("fd00::/64")
    assert prev.ipv6_network is None


@pytest.mark.parametrize("value", ["", "garbage", "10.1.0.0/24,10.2.0.0/24", "10.1.0.1"])
def test_lenient_reader_needs_exactly_one_valid_cidr(value: str) -> None:
    assert read_previous_subnets(f"FLANNEL_SUBNET={value}\n").subnet is None


def test_lenient_reader_ends_lines_at_lf_and_cr_only() -> None:
    """godotenv's rule; str.splitlines() would also split at \\x1c, \\v and more."""
    for other in ("\x1c", "\x0b", "\u2028"):
        prev = read_previous_subnets(
            f"FLANNEL_SUBNET=10.244.1.1/24{other}FLANNEL_NETWORK=10.0.0.0/8\n"
        )
        assert (prev.subnet, prev.network) == (None, None)
    prev = read_previous_subnets("FLANNEL_SUBNET=10.244.1.1/24\rFLANNEL_NETWORK=10.0.0.0/8\r\n")
    assert (prev.subnet, prev.network) == (IPv4Network("10.244.1.0/24"), IPv4Network("10.0.0.0/8"))


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ('A=""', {"A": ""}),
        ('A="x\\"y"', {"A": 'x\\"y'}),  # an escaped quote does not end the value
        ("A=x #", {"A": "x"}),
        ("A=x #y", {"A": "x"}),
        ("A=x#y #z", {"A": "x#y"}),
        ("A=x\u2003", {"A": "x\u2003"}),  # values shed godotenv's blanks only
        ("A=\u2003x", {"A": "\u2003x"}),
        ("export\t\u2003A=1", {"\u2003A": "1"}),
        ("=A:B", {}),
        ("=x", {}),
        ("AB", {}),
        ("A=1", {"A": "1"}),
        ("A=1\r\nB:2\rC = 3", {"A": "1", "B": "2", "C": "3"}),
    ],
)
def test_dotenv_statements(text: str, values: dict[str, str]) -> None:
    assert parse_dotenv(text) == values


def test_lenient_reader_reads_past_lines_without_a_value() -> None:
    text = "junk\n# FLANNEL_SUBNET=10.9.9.1/24\n=10.8.0.1/24\nFLANNEL_SUBNET=10.244.1.1/24\n"
    assert read_previous_subnets(text).subnet == IPv4Network("10.244.1.0/24")
    yaml = "FLANNEL_IPV6_SUBNET: fd00::1/64\rFLANNEL_IPV6_NETWORK: fd00::/56\n"
    prev = read_previous_subnets(yaml)
    assert (prev.ipv6_subnet, prev.ipv6_network) == (
        IPv6Network("fd00::/64"),
        IPv6Network("fd00::/56"),
    )


def test_records_compare_print_and_hash_by_value() -> None:
    a = PreviousSubnets(IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24"))
    b = PreviousSubnets(IPv4Network("10.244.0.0/16"), IPv4Network("10.244.2.0/24"))
    assert a == PreviousSubnets(IPv4Network("10.244.0.0/16"), IPv4Network("10.244.1.0/24"))
    assert a != b and a != SubnetEnv(a.network, a.subnet, None, None, 1500, True)
    assert a != PreviousSubnets() and PreviousSubnets() == PreviousSubnets()
    assert hash(a) == hash(PreviousSubnets(a.network, a.subnet))
    assert repr(a) == (
        "PreviousSubnets(ipv6_network=None, ipv6_subnet=None, "
        "network=IPv4Network('10.244.0.0/16'), subnet=IPv4Network('10.244.1.0/24'))"
    )
    with pytest.raises(AttributeError, match="PreviousSubnets is immutable"):
        a.subnet = None  # type: ignore[misc]


def test_render_writes_a_family_only_with_both_network_and_subnet() -> None:
    net4, net6 = IPv4Network("10.244.0.0/16"), IPv6Network("fd00::/56")
    assert SubnetEnv(net4, None, net6, None, 1400, False).render() == (
        "FLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n"
    )
    assert SubnetEnv(None, IPv4Network("10.244.1.0/24"), None, IPv6Network("fd00::/64"), 1400,
                     False).render() == "FLANNEL_MTU=1400\nFLANNEL_IPMASQ=false\n"  # fmt: skip


def test_strict_reader_keeps_each_family_to_its_key() -> None:
    text = (
        "FLANNEL_NETWORK=10.1.0.0/16,fd00::/56\nFLANNEL_IPV6_NETWORK=10.2.0.0/16,fd01::/56\n"
        "FLANNEL_SUBNET=fd00::1/64\nFLANNEL_IPV6_SUBNET=10.1.17.1/24\n"
        "FLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"
    )
    with pytest.raises(
        SubnetEnvError, match=r"^/f is missing FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET$"
    ):
        parse_cni_subnet_env(text, "/f")
    fixed = text.replace("FLANNEL_SUBNET=fd00::1/64", "FLANNEL_SUBNET=10.1.17.1/24")
    env = parse_cni_subnet_env(fixed, "/f")
    assert (env.networks, env.ipv6_networks) == (["10.1.0.0/16"], ["fd01::/56"])
    assert (env.subnet, env.ipv6_subnet) == ("10.1.17.0/24", None)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("FLANNEL_MTU=4294967296", 'strconv.ParseUint: parsing "4294967296": value out of range'),
        ("FLANNEL_MTU=1450=", 'strconv.ParseUint: parsing "1450=": invalid syntax'),
        # Unicode digits other than ASCII's: Python's int() reads them, Go's ParseUint does not.
        ("FLANNEL_MTU=\u0661\u0664\u0665\u0660", 'strconv.ParseUint: parsing "\u0661\u0664\u0665\u0660": invalid syntax'),
        ("FLANNEL_IPMASQ=true=", "/f is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, "
                                 "FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, FLANNEL_MTU"),
    ],
)  # fmt: skip
def test_strict_reader_splits_once_on_the_first_equals(line: str, error: str) -> None:
    with pytest.raises(SubnetEnvError) as err:
        parse_cni_subnet_env(f"{line}\n", "/f")
    assert str(err.value) == error


@pytest.mark.parametrize(
    "record",
    [
        PreviousSubnets(),
        SubnetEnv(IPv4Network("10.1.0.0/16"), IPv4Network("10.1.17.0/24"), None, None, 1472, True),
    ],
)
def test_a_record_equals_only_a_record_of_its_kind(record: Any) -> None:
    assert record == type(record)(**{name: getattr(record, name) for name in record.__slots__})
    assert record != None  # noqa: E711 (the comparison itself is under test)
    assert record != object()
    assert record != tuple(getattr(record, name) for name in record.__slots__)


def test_strict_reader_reads_past_lines_without_equals_and_takes_the_largest_mtu() -> None:
    env = parse_cni_subnet_env("# comment\n" + UNIT.replace("1472", "4294967295"), "/f")
    assert env.mtu == 4294967295 and env.subnet == "10.1.17.0/24"


def test_lenient_reader_skips_invalid_elements() -> None:
    assert read_previous_subnets("FLANNEL_SUBNET=junk,10.9.0.1/24\n").subnet == IPv4Network(
        "10.9.0.0/24"
    )


def test_strict_reader_parses_what_flanneld_writes() -> None:
    env = parse_cni_subnet_env(DUAL_STACK_EXAMPLE, "/run/flannel/subnet.env")
    assert env.networks == ["10.42.0.0/16"]
    assert env.subnet == "10.42.0.0/24"
    assert env.ipv6_networks == ["2001:cafe:42::/56"]
    assert env.ipv6_subnet == "2001:cafe:42::/64"
    assert (env.mtu, env.ipmasq) == (1450, True)


def test_strict_reader_lists_only_missing_items() -> None:
    with pytest.raises(SubnetEnvError) as err:
        parse_cni_subnet_env("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_IPMASQ=false\n", "/x/subnet.env")
    assert str(err.value) == (
        "/x/subnet.env is missing FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET, FLANNEL_MTU"
    )
    with pytest.raises(SubnetEnvError) as err:
        parse_cni_subnet_env("", "/y")
    assert str(err.value) == (
        "/y is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET, "
        "FLANNEL_IPV6_SUBNET, FLANNEL_MTU, FLANNEL_IPMASQ"
    )


def test_strict_reader_does_no_quote_handling() -> None:
    with pytest.raises(SubnetEnvError, match="invalid CIDR address"):
        parse_cni_subnet_env('FLANNEL_SUBNET="10.1.17.1/24"\n', "/f")


def test_strict_reader_ipmasq_is_exactly_true() -> None:
    text = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\n"
    assert parse_cni_subnet_env(text + "FLANNEL_IPMASQ=True\n", "/f").ipmasq is False
    assert parse_cni_subnet_env(text + "FLANNEL_IPMASQ=true\n", "/f").ipmasq is True


def test_strict_reader_rejects_bad_mtu() -> None:
    with pytest.raises(SubnetEnvError, match="ParseUint"):
        parse_cni_subnet_env("FLANNEL_MTU=-1\n", "/f")


def family_networks(version: int) -> st.SearchStrategy[tuple[Any, Any]]:
    """A network and a subnet inside it, of one IP version (any address, any sane lengths)."""
    bits = 32 if version == 4 else 128
    make = IPv4Network if version == 4 else IPv6Network
    return st.tuples(
        st.integers(0, 2**bits - 1), st.integers(8, bits - 12), st.integers(1, 10)
    ).map(lambda t: (make((t[0], t[1]), strict=False), make((t[0], t[1] + t[2]), strict=False)))


@given(
    v4=st.one_of(st.none(), family_networks(4)),
    v6=st.one_of(st.none(), family_networks(6)),
    mtu=st.integers(68, 65535),
    masq=st.booleans(),
)
def test_render_then_both_readers_round_trip(
    v4: tuple[IPv4Network, IPv4Network] | None,
    v6: tuple[IPv6Network, IPv6Network] | None,
    mtu: int,
    masq: bool,
) -> None:
    """v4-only, v6-only and dual-stack files alike."""
    assume(v4 is not None or v6 is not None)
    network, subnet = v4 or (None, None)
    ipv6_network, ipv6_subnet = v6 or (None, None)
    text = SubnetEnv(network, subnet, ipv6_network, ipv6_subnet, mtu, masq).render()
    prev = read_previous_subnets(text)
    assert (prev.network, prev.subnet, prev.ipv6_network, prev.ipv6_subnet) == (
        network,
        subnet,
        ipv6_network,
        ipv6_subnet,
    )
    cni = parse_cni_subnet_env(text, "/f")
    assert cni == CniSubnetEnv(
        [str(network)] if network else [],
        str(subnet) if subnet else None,
        [str(ipv6_network)] if ipv6_network else [],
        str(ipv6_subnet) if ipv6_subnet else None,
        mtu,
        masq,
    )


def test_strict_reader_accepts_a_v6_only_file() -> None:
    env = parse_cni_subnet_env(
        "FLANNEL_IPV6_NETWORK=fd00:10::/56\nFLANNEL_IPV6_SUBNET=fd00:10:0:3::1/64\n"
        "FLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n",
        "/f",
    )
    assert env == CniSubnetEnv([], None, ["fd00:10::/56"], "fd00:10:0:3::/64", 1430, False)


def test_strict_reader_collapses_repeated_networks_and_keeps_their_order() -> None:
    env = parse_cni_subnet_env(
        "FLANNEL_NETWORK=10.1.0.0/16,10.2.0.1/16,10.1.9.9/16\n"
        "FLANNEL_IPV6_NETWORK=fd00::/56,fd00::1/56,fd01::/56\n"
        "FLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n",
        "/f",
    )
    assert env.networks == ["10.1.0.0/16", "10.2.0.0/16"]
    assert env.ipv6_networks == ["fd00::/56", "fd01::/56"]


def test_strict_reader_drops_one_carriage_return_per_line_as_go_scanner_does() -> None:
    text = DUAL_STACK_EXAMPLE.replace("\n", "\r\n")
    assert parse_cni_subnet_env(text, "/f") == parse_cni_subnet_env(DUAL_STACK_EXAMPLE, "/f")
    with pytest.raises(SubnetEnvError, match="ParseUint"):
        parse_cni_subnet_env("FLANNEL_MTU=1450\r\r\n", "/f")


@pytest.mark.parametrize(
    ("line", "subnet"),
    [
        ("FLANNEL_SUBNET=10.244.1.1/24 # note", "10.244.1.0/24"),
        ("FLANNEL_SUBNET=10.244.1.1/24\t# note", "10.244.1.0/24"),
        ("FLANNEL_SUBNET = 10.244.1.1/24   ", "10.244.1.0/24"),
        ("FLANNEL_SUBNET: 10.244.1.1/24", "10.244.1.0/24"),
        ("export\tFLANNEL_SUBNET=10.244.1.1/24", "10.244.1.0/24"),
        ('FLANNEL_SUBNET="10.244.1.1/24" # note', "10.244.1.0/24"),
        ("FLANNEL_SUBNET='10.244.1.1/24'", "10.244.1.0/24"),
        # godotenv cuts at the last blank-preceded '#', and only there
        ("FLANNEL_SUBNET=10.244.1.1/24 # a # b", None),
        ("FLANNEL_SUBNET=10.244.1.1/24#note", None),
        ('FLANNEL_SUBNET="10.244.1.1/24', None),
        ("exportFLANNEL_SUBNET=10.244.1.1/24", None),
        # a statement starts after any Unicode space and its key sheds them
        ("\u2003FLANNEL_SUBNET=10.244.1.1/24", "10.244.1.0/24"),
        ("FLANNEL_SUBNET\u2003=10.244.1.1/24", "10.244.1.0/24"),
        ('FLANNEL_SUBNET= "10.244.1.1/24"', "10.244.1.0/24"),
        ("FLANNEL_SUBNET=10.244.1.1/24 # a=b", "10.244.1.0/24"),  # the first '=' separates
        ("export  FLANNEL_SUBNET=10.244.1.1/24", "10.244.1.0/24"),
    ],
)
def test_lenient_reader_follows_godotenv_for_comments_quotes_and_blanks(
    line: str, subnet: str | None
) -> None:
    expected = IPv4Network(subnet) if subnet else None
    assert read_previous_subnets(f"{line}\n").subnet == expected


@given(
    address=st.ip_addresses(),
    prefix=st.integers(0, 128),
)
def test_masked_cidr_agrees_with_ipaddress(address: IPv4Address | IPv6Address, prefix: int) -> None:
    prefix = min(prefix, address.max_prefixlen)
    version, text = masked_cidr(f"{address}/{prefix}")
    expected = ip_network(f"{address}/{prefix}", strict=False)
    # An IPv4-mapped network is Go's own case (test_an_ipv4_mapped_network_is_printed_as_go_does).
    assume(not (isinstance(address, IPv6Address) and address.ipv4_mapped is not None))
    assert (version, text) == (expected.version, str(expected))


zero_rich_ipv6 = st.lists(
    st.one_of(st.just(0), st.integers(0, 0xFFFF)), min_size=8, max_size=8
).map(lambda groups: IPv6Address(b"".join(g.to_bytes(2, "big") for g in groups)))


@given(zero_rich_ipv6)
def test_ipv6_text_is_rfc_5952(address: IPv6Address) -> None:
    """The hexadecimal form ipaddress also prints: the first longest run of two or more zero
    groups as '::' (Go's netip string6)."""
    assume(address.ipv4_mapped is None)
    assert _ipv6_hex(address.packed) == address.compressed


@pytest.mark.parametrize(
    ("cidr", "text"),
    [
        ("::1ff:f0ff/116", "::1ff:f000/116"),  # glibc: ::1.255.240.0
        ("::10.0.0.1/128", "::a00:1/128"),
        ("::2/128", "::2/128"),
        ("1:0:0:1::/64", "1:0:0:1::/64"),
        ("1::1:0:0:0/128", "1::1:0:0:0/128"),  # the first of two equal runs is compressed
        ("1:0:0:2:0:0:3:4/128", "1::2:0:0:3:4/128"),
        ("1:0:2:3:4:5:6:7/128", "1:0:2:3:4:5:6:7/128"),  # a single zero group stays
    ],
)
def test_masked_ipv6_is_printed_as_go_prints_it(cidr: str, text: str) -> None:
    assert masked_cidr(cidr) == (6, text)
    assert str(ip_network(cidr, strict=False)) == text


@pytest.mark.parametrize(
    ("cidr", "text"),
    [
        ("::ffff:10.0.0.1/128", "10.0.0.1/32"),
        ("::ffff:10.0.0.7/120", "10.0.0.0/24"),
        ("::ffff:10.0.0.0/96", "0.0.0.0/0"),
        ("::ffff:10.0.0.0/95", "::fffe:0:0/95"),  # masked out of the mapped range
        ("::10.0.0.1/128", "::a00:1/128"),  # IPv4-compatible: hexadecimal, as Go prints it
    ],
)
def test_an_ipv4_mapped_network_is_printed_as_go_does(cidr: str, text: str) -> None:
    """Go's IPNet.String prints an IPv4-mapped IPv6 network as the IPv4 network inside it;
    glibc and ipaddress keep the ::ffff: prefix."""
    assert masked_cidr(cidr) == (6, text)


@pytest.mark.parametrize(
    "bad",
    [
        "10.0.0.0",
        "10.0.0.0/33",
        "10.0.0.01/8",
        "fe80::/129",
        "x/8",
        "10.0.0.0/+8",
        "10.0.0.0/",
        "10.0.0.0/\u0668",  # an Arabic-Indic 8: a digit to Python, not to Go
    ],
)
def test_masked_cidr_rejects_what_go_rejects(bad: str) -> None:
    with pytest.raises(SubnetEnvError, match="invalid CIDR address"):
        masked_cidr(bad)
