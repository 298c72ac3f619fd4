"""subnet.env: flanneld's exact bytes, flanneld's lenient reader, the CNI plugin's strict one."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pyflannel_runtime.model.subnet_env import (
    SubnetEnv,
    SubnetEnvError,
    masked_cidr,
    parse_cni_subnet_env,
    read_previous_subnets,
)

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


@given(
    seed=st.integers(0, 2**32 - 1),
    prefix=st.integers(8, 20),
    sublen=st.integers(21, 30),
    mtu=st.integers(68, 65535),
    masq=st.booleans(),
)
def test_render_then_both_readers_round_trip(
    seed: int, prefix: int, sublen: int, mtu: int, masq: bool
) -> None:
    network = IPv4Network((seed, prefix), strict=False)
    subnet = IPv4Network((seed, sublen), strict=False)
    text = SubnetEnv(network, subnet, None, None, mtu, masq).render()
    prev = read_previous_subnets(text)
    assert (prev.network, prev.subnet) == (network, subnet)
    cni = parse_cni_subnet_env(text, "/f")
    assert (cni.networks, cni.subnet, cni.mtu, cni.ipmasq) == (
        [str(network)],
        str(subnet),
        mtu,
        masq,
    )


@given(
    address=st.ip_addresses(),
    prefix=st.integers(0, 128),
)
def test_masked_cidr_agrees_with_ipaddress(address: IPv4Address | IPv6Address, prefix: int) -> None:
    prefix = min(prefix, address.max_prefixlen)
    version, text = masked_cidr(f"{address}/{prefix}")
    expected = ip_network(f"{address}/{prefix}", strict=False)
    # glibc prints the embedded IPv4 form (::ffff:1.2.3.4), as Go does; ipaddress does not.
    assume(not (isinstance(address, IPv6Address) and address.ipv4_mapped is not None))
    assert (version, text) == (expected.version, str(expected))


@pytest.mark.parametrize(
    "bad",
    ["10.0.0.0", "10.0.0.0/33", "10.0.0.01/8", "fe80::/129", "x/8", "10.0.0.0/+8", "10.0.0.0/"],
)
def test_masked_cidr_rejects_what_go_rejects(bad: str) -> None:
    with pytest.raises(SubnetEnvError, match="invalid CIDR address"):
        masked_cidr(bad)
