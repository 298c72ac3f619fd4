"""net-conf.json decoding and validation against flannel's own vectors and messages
(flannel-io/flannel pkg/subnet/config.go, config_test.go)."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.options import UdpOptions, VxlanOptions
from pyflannel_runtime.model.netconf import (
    ConfigError,
    check_network_config,
    encode_config,
    parse_config,
)


def checked(text: str):
    return check_network_config(parse_config(text))


def test_flannel_vector_ipv4_defaults() -> None:
    cfg = checked('{"network":"10.3.0.0/16"}')
    assert cfg.subnet_len == 24
    assert cfg.subnet_min == IPv4Address("10.3.1.0")
    assert cfg.subnet_max == IPv4Address("10.3.255.0")


def test_flannel_vector_ipv6_only() -> None:
    cfg = checked('{"enableIPv6":true,"ipv6Network":"fc00::/48","enableIPv4":false}')
    assert cfg.ipv6_subnet_len == 64
    assert cfg.ipv6_subnet_min == IPv6Address("fc00:0:0:1::")
    assert cfg.ipv6_subnet_max == IPv6Address("fc00:0:0:ffff::")
    assert cfg.network is None


def test_documentation_example_keeps_explicit_values() -> None:
    cfg = checked(
        '{"Network":"10.0.0.0/8","SubnetLen":20,"SubnetMin":"10.10.0.0",'
        '"SubnetMax":"10.99.0.0","Backend":{"Type":"udp","Port":7890}}'
    )
    assert (cfg.subnet_len, str(cfg.subnet_min), str(cfg.subnet_max)) == (
        20,
        "10.10.0.0",
        "10.99.0.0",
    )
    assert UdpOptions.of(cfg).port == 7890


def test_keys_are_case_insensitive_and_last_duplicate_wins() -> None:
    cfg = parse_config('{"NETWORK":"10.1.0.0/16","network":"10.2.0.0/16","enableipv4":true}')
    assert cfg.network == IPv4Network("10.2.0.0/16")


def test_exact_key_preferred_over_folded_only_by_position() -> None:
    cfg = parse_config('{"Network":"10.1.0.0/16","network":"10.2.0.0/16"}')
    assert cfg.network == IPv4Network("10.2.0.0/16")


def test_network_is_masked_on_parse() -> None:
    assert parse_config('{"Network":"10.244.1.5/16"}').network == IPv4Network("10.244.0.0/16")


def test_defaults_enable_ipv4_and_udp_backend() -> None:
    cfg = parse_config('{"Network":"10.244.0.0/16"}')
    assert cfg.enable_ipv4 and not cfg.enable_ipv6 and not cfg.enable_nftables
    assert cfg.backend_type == "udp"


def test_backend_type_is_lowercased_and_options_case_insensitive() -> None:
    cfg = parse_config('{"Network":"10.244.0.0/16","backend":{"type":"VXLAN","vni":4,"port":4789}}')
    assert cfg.backend_type == "vxlan"
    opts = VxlanOptions.of(cfg)
    assert (opts.vni, opts.port, opts.mtu, opts.direct_routing) == (4, 4789, 0, False)


def test_vxlan_defaults() -> None:
    opts = VxlanOptions.of(parse_config('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}'))
    assert (opts.vni, opts.port, opts.gbp, opts.learning) == (1, 0, False, False)


def test_backend_without_type_is_unknown() -> None:
    cfg = parse_config('{"Network":"10.244.0.0/16","Backend":{}}')
    assert cfg.backend_type == ""
    with pytest.raises(ConfigError, match=r"^unknown backend type: "):
        registry.validate(cfg)


def test_unsupported_backend_names_the_supported_ones() -> None:
    cfg = parse_config('{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}')
    with pytest.raises(ConfigError) as err:
        registry.validate(cfg)
    assert "unknown backend type: wireguard" in str(err.value)
    assert "vxlan, host-gw, udp" in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "please define a correct Network parameter in the flannel config"),
        (
            '{"Network":"0.0.0.0/0"}',
            "please define a correct Network parameter in the flannel config",
        ),
        ('{"Network":"10.0.0.0/16","SubnetLen":31}', "SubnetLen must be less than /31"),
        (
            '{"Network":"10.0.0.0/16","SubnetLen":17}',
            "network must be able to accommodate at least four subnets",
        ),
        ('{"Network":"10.0.0.0/29"}', "network is too small. Minimum useful network prefix is /28"),
        (
            '{"Network":"10.0.0.0/16","SubnetMin":"10.1.0.0"}',
            "SubnetMin is not in the range of the Network",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetMax":"11.0.0.0"}',
            "SubnetMax is not in the range of the Network",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetMin":"10.0.1.5"}',
            "SubnetMin is not on a SubnetLen boundary: 10.0.1.5",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetMax":"10.0.9.1"}',
            "SubnetMax is not on a SubnetLen boundary: 10.0.9.1",
        ),
        (
            '{"EnableIPv6":true,"Network":"10.0.0.0/16"}',
            "please define a correct IPv6Network parameter in the flannel config",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48","IPv6SubnetLen":127}',
            "SubnetLen must be less than /127",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/125"}',
            "IPv6Network is too small. Minimum useful network prefix is /124",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48",'
            '"IPv6SubnetMin":"fd00::"}',
            "IPv6SubnetMin is not in the range of the IPv6Network",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48",'
            '"IPv6SubnetMin":"fc00:0:0:1::1"}',
            "IPv6SubnetMin is not on a SubnetLen boundary: fc00:0:0:1::1",
        ),
    ],
)
def test_validation_messages_are_flannels(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        checked(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"Network":"fc00::/48"}', "invalid IPv4 CIDR format"),
        ('{"Network":"10.0.0.0"}', "invalid CIDR address: 10.0.0.0"),
        ('{"Network":"10.0.0.0/16","SubnetMin":"banana"}', "invalid IPv4 address format"),
        (
            '{"Network":"10.0.0.0/16","SubnetLen":-1}',
            "json: cannot unmarshal number -1 into Go struct field Config.SubnetLen of type uint",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetLen":"24"}',
            "json: cannot unmarshal string into Go struct field Config.SubnetLen of type uint",
        ),
        (
            '{"EnableIPv6":"yes"}',
            "json: cannot unmarshal string into Go struct field Config.EnableIPv6 of type bool",
        ),
        ("[1]", "json: cannot unmarshal array into Go value of type subnet.Config"),
        (
            '{"Backend":"vxlan"}',
            "error decoding Backend property of config: json: cannot unmarshal string into "
            "Go value of type struct { Type string }",
        ),
    ],
)
def test_decode_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert str(err.value) == message


def test_invalid_json_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_config('{"Network": ')


def test_vxlan_option_type_error() -> None:
    cfg = parse_config('{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":"1"}}')
    with pytest.raises(ConfigError, match="error decoding VXLAN backend config"):
        VxlanOptions.of(cfg)


def test_dual_stack_config() -> None:
    cfg = checked(
        '{"Network":"10.42.0.0/16","EnableIPv6":true,"IPv6Network":"2001:cafe:42::/56",'
        '"Backend":{"Type":"vxlan"}}'
    )
    assert cfg.ipv6_network == IPv6Network("2001:cafe:42::/56")
    assert cfg.ipv6_subnet_len == 64
    assert cfg.ipv6_subnet_min == IPv6Address("2001:cafe:42:1::")
    assert cfg.ipv6_subnet_max == IPv6Address("2001:cafe:42:ff::")


def test_encode_round_trips_through_parse() -> None:
    cfg = checked('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":7}}')
    again = check_network_config(parse_config(encode_config(cfg)))
    assert again == cfg
    assert json.loads(encode_config(cfg))["Backend"] == {"Type": "vxlan", "VNI": 7}


@given(prefix=st.integers(min_value=8, max_value=28), seed=st.integers(0, 2**32 - 1))
def test_defaults_always_fit_the_network(prefix: int, seed: int) -> None:
    net = IPv4Network((seed, prefix), strict=False)
    cfg = checked(json.dumps({"Network": str(net)}))
    size = 1 << (32 - cfg.subnet_len)
    assert cfg.subnet_len == (24 if prefix <= 22 else prefix + 2)
    assert cfg.subnet_min in net and cfg.subnet_max in net
    assert int(cfg.subnet_min) == int(net.network_address) + size
    assert int(cfg.subnet_max) + size == int(net.broadcast_address) + 1
    assert int(cfg.subnet_min) % size == 0 and int(cfg.subnet_max) % size == 0


@given(
    prefix=st.integers(min_value=8, max_value=28),
    seed=st.integers(0, 2**32 - 1),
    host=st.integers(0, 2**32 - 1),
)
def test_network_is_always_masked(prefix: int, seed: int, host: int) -> None:
    net = IPv4Network((seed, prefix), strict=False)
    addr = IPv4Address(int(net.network_address) | (host & ((1 << (32 - prefix)) - 1)))
    assert parse_config(json.dumps({"Network": f"{addr}/{prefix}"})).network == net
