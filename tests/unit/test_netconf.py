"""net-conf.json decoding and validation against flannel's own vectors and messages
(flannel-io/flannel pkg/subnet/config.go, config_test.go)."""

from __future__ import annotations

import dataclasses
import json
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.backend_spec.options import UdpOptions, VxlanOptions
from pyflannel_runtime.wire.netconf import (
    ConfigError,
    NetworkConfig,
    check_network_config,
    encode_config,
    ip_stack,
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
        specs.validate(cfg)


def test_unsupported_backend_names_the_supported_ones() -> None:
    cfg = parse_config('{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}')
    with pytest.raises(ConfigError) as err:
        specs.validate(cfg)
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
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48",'
            '"IPv6SubnetMax":"fc00:1::"}',
            "IPv6SubnetMax is not in the range of the IPv6Network",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48",'
            '"IPv6SubnetMax":"fc00:0:0:9::1"}',
            "IPv6SubnetMax is not on a SubnetLen boundary: fc00:0:0:9::1",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48","IPv6SubnetLen":49}',
            "network must be able to accommodate at least four subnets",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetLen":1}',
            "network must be able to accommodate at least four subnets",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48","IPv6SubnetLen":1}',
            "network must be able to accommodate at least four subnets",
        ),
        (
            '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"::/0"}',
            "please define a correct IPv6Network parameter in the flannel config",
        ),
        (
            '{"Network":"10.0.0.0/16","SubnetLen":18446744073709551615}',
            "SubnetLen must be less than /31",
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
        (
            '{"Network":"10.0.0.0/16","Backend":{"Type":5}}',
            "error decoding Backend property of config: json: cannot unmarshal number into "
            "Go struct field .Type of type string",
        ),
        ('{"Network":"banana/8"}', "invalid CIDR address: banana/8"),
        ('{"Network":{"a":"b"}}', 'invalid CIDR address: {"a":"b"}'),
        ('{"Network":["x", 1]}', 'invalid CIDR address: ["x",1]'),
        ('{"Network":5}', "invalid CIDR address: 5"),
        ('{"Network":"10.0.0.0/16","SubnetMin":"fd00::1"}', "invalid IPv4 address format"),
        ('{"IPv6SubnetMin":"banana"}', "invalid IPv6 address format"),
        (
            '{"SubnetLen":18446744073709551616}',
            "json: cannot unmarshal number 18446744073709551616 into Go struct field "
            "Config.SubnetLen of type uint",
        ),
        (
            '{"SubnetLen":1.5}',
            "json: cannot unmarshal number 1.5 into Go struct field Config.SubnetLen of type uint",
        ),
        (
            '{"SubnetLen":24.0}',
            "json: cannot unmarshal number 24.0 into Go struct field Config.SubnetLen of type uint",
        ),
        (  # a JSON bool is no number, though Python's True is an int
            '{"SubnetLen":true}',
            "json: cannot unmarshal bool into Go struct field Config.SubnetLen of type uint",
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


@pytest.mark.parametrize(
    "text",
    [
        '{"Network":"10.0.0.0/16","SubnetLen":0}',
        '{"EnableIPv6":true,"Network":"10.0.0.0/16","IPv6Network":"fc00::/48","IPv6SubnetLen":0}',
    ],
)
def test_an_explicit_zero_subnet_len_is_the_default(text: str) -> None:
    """Go cannot tell "SubnetLen":0 from an absent SubnetLen: both get the default."""
    cfg = checked(text)
    assert cfg.subnet_len == 24
    assert cfg.ipv6_subnet_len in (0, 64)


@pytest.mark.parametrize(
    ("prefix", "subnet_len"), [(120, 122), (120, 126), (60, 62), (62, 64), (63, 65), (124, 126)]
)
def test_ipv6_subnet_len_bounds_and_defaults(prefix: int, subnet_len: int) -> None:
    net = f"fc00::/{prefix}"
    explicit = checked(
        json.dumps(
            {
                "EnableIPv4": False,
                "EnableIPv6": True,
                "IPv6Network": net,
                "IPv6SubnetLen": subnet_len,
            }
        )
    )
    assert explicit.ipv6_subnet_len == subnet_len
    default = checked(json.dumps({"EnableIPv4": False, "EnableIPv6": True, "IPv6Network": net}))
    assert default.ipv6_subnet_len == (64 if prefix <= 62 else prefix + 2)


networks4 = st.builds(
    lambda a, p: IPv4Network((a, p), strict=False), st.integers(0, 2**32 - 1), st.integers(8, 28)
)
networks6 = st.builds(
    lambda a, p: IPv6Network((a, p), strict=False),
    st.integers(0, 2**128 - 1),
    st.integers(8, 124),
)


@given(
    ipv4=st.one_of(st.none(), networks4),
    ipv6=st.one_of(st.none(), networks6),
    nftables=st.booleans(),
    backend=st.sampled_from([None, {"Type": "vxlan", "VNI": 7}, {"Type": "host-gw"}]),
)
def test_encoded_config_parses_back_to_itself(
    ipv4: IPv4Network | None,
    ipv6: IPv6Network | None,
    nftables: bool,
    backend: dict[str, object] | None,
) -> None:
    """v4-only, v6-only and dual-stack, every flag and default kept (the encoding is what
    `pyflannel config` publishes to etcd for Go flanneld to read)."""
    if ipv4 is None and ipv6 is None:
        return
    fields: dict[str, object] = {"EnableIPv4": ipv4 is not None, "EnableIPv6": ipv6 is not None}
    fields["EnableNFTables"] = nftables
    if backend is not None:
        fields["Backend"] = backend
    if ipv4 is not None:
        fields["Network"] = str(ipv4)
    if ipv6 is not None:
        fields["IPv6Network"] = str(ipv6)
    cfg = checked(json.dumps(fields))
    encoded = encode_config(cfg)
    again = check_network_config(parse_config(encoded))
    # An absent Backend is written as {"Type": "udp"}; the raw Backend object is all that differs.
    assert dataclasses.replace(again, backend={}) == dataclasses.replace(cfg, backend={})
    assert encode_config(again) == encoded
    assert json.loads(encoded)["EnableNFTables"] is nftables


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


# --- what the mutation run showed untested ----------------------------------------------------


def test_encode_config_is_byte_exact() -> None:
    """Go's field names and order, two-space indent, a final newline (what `pyflannel config`
    publishes for flanneld to read)."""
    cfg = checked(
        '{"Network":"10.42.0.0/16","EnableIPv6":true,"IPv6Network":"2001:cafe:42::/56",'
        '"EnableNFTables":true,"Backend":{"Type":"vxlan"}}'
    )
    assert encode_config(cfg) == (
        "{\n"
        '  "EnableIPv4": true,\n'
        '  "EnableIPv6": true,\n'
        '  "EnableNFTables": true,\n'
        '  "Network": "10.42.0.0/16",\n'
        '  "IPv6Network": "2001:cafe:42::/56",\n'
        '  "SubnetMin": "10.42.1.0",\n'
        '  "SubnetMax": "10.42.255.0",\n'
        '  "IPv6SubnetMin": "2001:cafe:42:1::",\n'
        '  "IPv6SubnetMax": "2001:cafe:42:ff::",\n'
        '  "SubnetLen": 24,\n'
        '  "IPv6SubnetLen": 64,\n'
        '  "Backend": {\n'
        '    "Type": "vxlan"\n'
        "  }\n"
        "}\n"
    )
    bare = dataclasses.replace(cfg, backend={}, backend_type="host-gw")
    assert json.loads(encode_config(bare))["Backend"] == {"Type": "host-gw"}


def test_zero_bounds_are_unset_and_other_families_map_in() -> None:
    cfg = checked('{"Network":"10.0.0.0/16","SubnetMin":"0.0.0.0","SubnetMax":"0.0.0.0"}')
    assert (cfg.subnet_min, cfg.subnet_max) == (IPv4Address("10.0.1.0"), IPv4Address("10.0.255.0"))
    v6 = checked(
        '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fc00::/48",'
        '"IPv6SubnetMin":"::","IPv6SubnetMax":"::"}'
    )
    assert (v6.ipv6_subnet_min, v6.ipv6_subnet_max) == (
        IPv6Address("fc00:0:0:1::"),
        IPv6Address("fc00:0:0:ffff::"),
    )
    mapped = parse_config('{"SubnetMin":"::ffff:10.0.1.0","IPv6SubnetMin":"10.0.0.1"}')
    assert mapped.subnet_min == IPv4Address("10.0.1.0")
    assert mapped.ipv6_subnet_min == IPv6Address("::ffff:10.0.0.1")


def test_a_null_backend_type_is_unknown() -> None:
    assert parse_config('{"Backend":{"Type":null}}').backend_type == ""
    assert parse_config('{"Backend":null}').backend_type == ""
    assert parse_config('{"Backend":{"type":"VXLAN"}}').backend_type == "vxlan"


@given(prefix=st.integers(min_value=1, max_value=28))
def test_the_default_subnet_max_is_the_last_block(prefix: int) -> None:
    """At the top of the address space too: 255.255.255.0/24 ends where IPv4 does."""
    net = IPv4Network(((0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF, prefix))
    cfg = checked(json.dumps({"Network": str(net)}))
    assert cfg.subnet_max is not None
    assert int(cfg.subnet_max) + (1 << (32 - cfg.subnet_len)) == 2**32


@pytest.mark.parametrize(("ipv4", "ipv6"), [(True, False), (False, True), (True, True)])
def test_enabled_networks_are_those_of_the_enabled_families(ipv4: bool, ipv6: bool) -> None:
    cfg = NetworkConfig(
        enable_ipv4=ipv4,
        enable_ipv6=ipv6,
        network=IPv4Network("10.244.0.0/16"),
        ipv6_network=IPv6Network("fd00:10:244::/56"),
    )
    assert cfg.enabled_network == (IPv4Network("10.244.0.0/16") if ipv4 else None)
    assert cfg.enabled_ipv6_network == (IPv6Network("fd00:10:244::/56") if ipv6 else None)
    assert cfg.enabled_networks == tuple(
        n for n in (cfg.enabled_network, cfg.enabled_ipv6_network) if n is not None
    )
    assert len(cfg.enabled_networks) == ipv4 + ipv6


@pytest.mark.parametrize(("ipv4", "ipv6"), [(True, False), (False, True), (True, True)])
def test_the_ip_stack_is_the_enabled_families(ipv4: bool, ipv6: bool) -> None:
    assert ip_stack(NetworkConfig(enable_ipv4=ipv4, enable_ipv6=ipv6)) == (ipv4, ipv6)


def test_a_config_without_either_family_is_flannels_none_defined_stack() -> None:
    with pytest.raises(ConfigError, match=r"^none defined stack$"):
        ip_stack(NetworkConfig(enable_ipv4=False, enable_ipv6=False))


def test_an_unset_subnet_length_is_left_out_of_the_encoding() -> None:
    """Unchecked, as a user wrote it: no SubnetLen means flannel's default, not a /0."""
    encoded = json.loads(encode_config(parse_config('{"Network":"10.0.0.0/16"}')))
    assert "SubnetLen" not in encoded and "IPv6SubnetLen" not in encoded
    explicit = parse_config('{"Network":"10.0.0.0/16","SubnetLen":26,"IPv6SubnetLen":80}')
    assert json.loads(encode_config(explicit))["SubnetLen"] == 26
    assert json.loads(encode_config(explicit))["IPv6SubnetLen"] == 80
