"""The delegate flannel builds (flannel-io/cni-plugin flannel_linux.go: doCmdAdd) and Go's JSON
encoding of it, as exact bytes."""

from __future__ import annotations

import json

import pytest

from pyflannel_runtime.cni.delegate import (
    DelegateError,
    build_delegate,
    check_delegate,
    encode_delegate,
)
from pyflannel_runtime.cni.plugin_config import NetConfError, parse_netconf, saved_delegate_type
from pyflannel_runtime.gojson.core import GoJSONError, decode
from pyflannel_runtime.gojson.encode import marshal
from pyflannel_runtime.wire.subnet_env import parse_cni_subnet_env

MANIFEST_ENV = (
    "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n"
    "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
)
UNIT_ENV = "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\nFLANNEL_MTU=1472\nFLANNEL_IPMASQ=true\n"


def delegate_bytes(conf: dict[str, object], subnet_env: str) -> bytes:
    parsed = parse_netconf(json.dumps(conf).encode())
    if parsed.delegate is not None:
        check_delegate(parsed.delegate)
    return encode_delegate(build_delegate(parsed, parse_cni_subnet_env(subnet_env, "env")))


def test_default_manifest_delegate_is_byte_exact() -> None:
    conf = {
        "name": "cbr0",
        "cniVersion": "0.3.1",
        "type": "flannel",
        "delegate": {"hairpinMode": True, "isDefaultGateway": True},
    }
    assert delegate_bytes(conf, MANIFEST_ENV) == (
        b'{"cniVersion":"0.3.1","hairpinMode":true,"ipMasq":false,"ipam":{"ranges":'
        b'[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}],"type":"host-local"},'
        b'"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}'
    )


def test_flannel_unit_test_delegate_matches_and_go_sorts_its_keys() -> None:
    # flannel's own test compares this value with MatchJSON; json.Marshal sorts the keys
    expected_value = (
        '{"ipMasq":false,"ipam":{"routes":[{"dst":"10.1.0.0/16"}],"ranges":[[{"subnet":'
        '"10.1.17.0/24"}]],"type":"host-local"},"isGateway":true,"mtu":1472,'
        '"name":"cni-flannel","type":"bridge"}'
    )
    produced = delegate_bytes({"name": "cni-flannel", "type": "flannel"}, UNIT_ENV)
    assert json.loads(produced) == json.loads(expected_value)
    assert produced == (
        b'{"ipMasq":false,"ipam":{"ranges":[[{"subnet":"10.1.17.0/24"}]],"routes":'
        b'[{"dst":"10.1.0.0/16"}],"type":"host-local"},"isGateway":true,"mtu":1472,'
        b'"name":"cni-flannel","type":"bridge"}'
    )


def test_dual_stack_puts_v4_range_and_routes_first() -> None:
    env = (
        "FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.17.1/24\n"
        "FLANNEL_IPV6_NETWORK=fd00:10::/56\nFLANNEL_IPV6_SUBNET=fd00:10:0:11::1/64\n"
        "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"
    )
    delegate = json.loads(delegate_bytes({"name": "n", "type": "flannel"}, env))
    assert delegate["ipMasq"] is True
    assert delegate["ipam"]["ranges"] == [
        [{"subnet": "10.1.17.0/24"}],
        [{"subnet": "fd00:10:0:11::/64"}],
    ]
    assert delegate["ipam"]["routes"] == [{"dst": "10.1.0.0/16"}, {"dst": "fd00:10::/56"}]


def test_ipv6_only() -> None:
    env = "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:5::1/64\n"
    env += "FLANNEL_MTU=1400\nFLANNEL_IPMASQ=true\n"
    delegate = json.loads(delegate_bytes({"name": "n"}, env))
    assert delegate["ipam"]["ranges"] == [[{"subnet": "fd00:0:0:5::/64"}]]
    assert delegate["ipam"]["routes"] == [{"dst": "fd00::/48"}]


def test_existing_fields_win_except_name_cniversion_and_ipam() -> None:
    conf = {
        "name": "net",
        "cniVersion": "1.0.0",
        "delegate": {"type": "ipvlan", "ipMasq": True, "mtu": 9000, "cniVersion": "0.1.0"},
        "ipam": {"type": "static", "dataDir": "/d", "ranges": "ignored"},
        "runtimeConfig": {"portMappings": []},
    }
    assert delegate_bytes(conf, UNIT_ENV) == (
        b'{"cniVersion":"1.0.0","ipMasq":true,"ipam":{"dataDir":"/d","ranges":[[{"subnet":'
        b'"10.1.17.0/24"}]],"routes":[{"dst":"10.1.0.0/16"}],"type":"static"},"mtu":9000,'
        b'"name":"net","runtimeConfig":{"portMappings":[]},"type":"ipvlan"}'
    )


def test_input_routes_keep_go_route_field_order_and_come_first() -> None:
    conf = {
        "name": "n",
        "ipam": {
            "routes": [
                {"table": 0, "gw": "10.0.0.1", "mtu": 0, "dst": "192.168.7.9/24", "scope": 253},
                {"DST": "0.0.0.0/0", "advmss": 1400.0, "priority": 5},
            ]
        },
    }
    routes = delegate_bytes(conf, UNIT_ENV).split(b'"routes":')[1].split(b"]")[0]
    assert routes == (
        b'[{"dst":"192.168.7.9/24","gw":"10.0.0.1","table":0,"scope":253},'
        b'{"dst":"0.0.0.0/0","advmss":1400,"priority":5},{"dst":"10.1.0.0/16"}'
    )


@pytest.mark.parametrize(
    ("routes", "reason"),
    [
        ([{"dst": "10.0.0.0"}], "invalid CIDR address: 10.0.0.0"),
        ([{"dst": "10.0.0.0/24", "gw": "bogus"}], "invalid IP address: bogus"),
        ("x", "json: cannot unmarshal string into Go value of type []types.Route"),
        (
            [{"dst": "10.0.0.0/24", "mtu": 1.5}],
            "json: cannot unmarshal number 1.5 into Go struct field route.mtu of type int",
        ),
    ],
)
def test_bad_input_routes(routes: object, reason: str) -> None:
    assert_route_error(routes, reason)


def assert_route_error(routes: object, reason: str) -> None:
    with pytest.raises(DelegateError) as err:
        delegate_bytes({"name": "n", "ipam": {"routes": routes}}, UNIT_ENV)
    assert str(err.value) == (
        "failed to assemble Delegate IPAM: failed to read IPAM routes: "
        f"failed to parse ipam.routes: {reason}"
    )


def input_routes(routes: list[object]) -> list[dict[str, object]]:
    delegate = json.loads(delegate_bytes({"name": "n", "ipam": {"routes": routes}}, UNIT_ENV))
    return delegate["ipam"]["routes"][:-1]  # the network's own route comes last


@pytest.mark.parametrize(
    ("route", "written"),
    [
        (None, {"dst": "<nil>"}),  # a null entry is a zero types.Route
        ({}, {"dst": "<nil>"}),
        ({"dst": "10.1.2.3/24"}, {"dst": "10.1.2.3/24"}),  # the address is kept unmasked
        ({"dst": "::ffff:10.0.0.1/120"}, {"dst": "10.0.0.1/24"}),  # net.IPNet.String()
        ({"dst": "::ffff:10.0.0.1/64"}, {"dst": "10.0.0.1/0"}),
        ({"dst": "fd00::1/64"}, {"dst": "fd00::1/64"}),
        ({"dst": "10.0.0.0/8", "gw": ""}, {"dst": "10.0.0.0/8"}),  # an empty net.IP is nil
        ({"dst": "10.0.0.0/8", "gw": "::ffff:10.0.0.1"}, {"dst": "10.0.0.0/8", "gw": "10.0.0.1"}),
        ({"dst": "10.0.0.0/8", "Gw": "fd00::1"}, {"dst": "10.0.0.0/8", "gw": "fd00::1"}),
        # numbers go through float64 and its shortest text in flannel: the largest float64
        # below 2**63 still fits an int, as 9223372036854775000
        (
            {"dst": "10.0.0.0/8", "mtu": 2**63 - 1024},
            {"dst": "10.0.0.0/8", "mtu": 9223372036854775000},
        ),
        ({"dst": "10.0.0.0/8", "scope": 0, "mtu": 0}, {"dst": "10.0.0.0/8", "scope": 0}),
    ],
)
def test_input_routes_as_go_types_route_writes_them(
    route: object, written: dict[str, object]
) -> None:
    assert input_routes([route]) == [written]


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        ("x", "json: cannot unmarshal string into Go value of type types.route"),
        ({"dst": 7}, "json: cannot unmarshal number into Go value of type string"),
        ({"dst": "10.0.0.0/+8"}, "invalid CIDR address: 10.0.0.0/+8"),
        ({"dst": "10.0.0.0/²"}, "invalid CIDR address: 10.0.0.0/²"),
        (
            {"dst": "10.0.0.0/8", "gw": 1},
            "json: cannot unmarshal number into Go struct field route.gw of type net.IP",
        ),
        (
            {"dst": "10.0.0.0/8", "mtu": True},
            "json: cannot unmarshal bool into Go struct field route.mtu of type int",
        ),
        (
            {"dst": "10.0.0.0/8", "table": "1"},
            "json: cannot unmarshal string into Go struct field route.table of type int",
        ),
        (
            {"dst": "10.0.0.0/8", "priority": 2**63},
            "json: cannot unmarshal number 9223372036854776000 into Go struct field "
            "route.priority of type int",
        ),
        (
            {"dst": "10.0.0.0/8", "advmss": -(2**63)},
            "json: cannot unmarshal number -9223372036854776000 into Go struct field "
            "route.advmss of type int",
        ),
    ],
)
def test_input_route_errors(route: object, reason: str) -> None:
    assert_route_error([route], reason)


@pytest.mark.parametrize(
    ("delegate", "message"),
    [
        ({"type": 5}, "'delegate' dictionary, if present, must have (string) 'type' field"),
        ({"type": None}, "'delegate' dictionary, if present, must have (string) 'type' field"),
        (
            {"name": "x"},
            "'delegate' dictionary must not have 'name' field, it'll be set by flannel",
        ),
        ({"ipam": {}}, "'delegate' dictionary must not have 'ipam' field, it'll be set by flannel"),
    ],
)
def test_delegate_validation_messages(delegate: dict[str, object], message: str) -> None:
    with pytest.raises(DelegateError) as err:
        check_delegate(delegate)
    assert str(err.value) == message


def test_non_bridge_delegate_gets_no_is_gateway() -> None:
    delegate = json.loads(delegate_bytes({"name": "n", "delegate": {"type": "macvlan"}}, UNIT_ENV))
    assert "isGateway" not in delegate


# --- Go encoding/json --------------------------------------------------------------------------


def test_marshal_sorts_escapes_html_and_formats_floats_like_go() -> None:
    value = decode(
        b'{"z":1e-7,"b":"<a&b>\\u2028","a":1.0,"y":1e21,"w":0.000015,'
        b'"big":12345678901234567890,"neg":-0.0,"u":"\\ud800x","e":2.5e-10,"k":"\\u00e9"}'
    )
    assert marshal(value) == (
        b'{"a":1,"b":"\\u003ca\\u0026b\\u003e\\u2028","big":12345678901234567000,'
        b'"e":2.5e-10,"k":"\xc3\xa9","neg":-0,"u":"\xef\xbf\xbdx","w":0.000015,"y":1e+21,"z":1e-7}'
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unexpected end of JSON input"),
        (b"   ", "unexpected end of JSON input"),
        (b"{}x", "invalid character 'x' after top-level value"),
        (b"NaN", "invalid character 'N' looking for beginning of value"),
        (b"[1e999]", "json: cannot unmarshal number 1e999 into Go value of type float64"),
    ],
)
def test_decode_errors(data: bytes, message: str) -> None:
    with pytest.raises(GoJSONError) as err:
        decode(data)
    assert str(err.value) == message


def test_netconf_defaults_and_case_insensitive_fields() -> None:
    conf = parse_netconf(b'{"name":"n","SubnetFile":"/s","DATADIR":"/d","delegate":null}')
    assert (conf.subnet_file, conf.data_dir, conf.delegate) == ("/s", "/d", None)
    defaults = parse_netconf(b'{"name":"n"}')
    assert (defaults.subnet_file, defaults.data_dir) == (
        "/run/flannel/subnet.env",
        "/var/lib/cni/flannel",
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"name":"n","delegate":"x"}',
            "failed to load netconf: json: cannot unmarshal string into Go struct field "
            "NetConf.delegate of type map[string]interface {}",
        ),
        (
            b'{"name":"n","subnetFile":1}',
            "failed to load netconf: json: cannot unmarshal number into Go struct field "
            "NetConf.subnetFile of type string",
        ),
        (
            b"[]",
            "failed to load netconf: json: cannot unmarshal array into Go value of type "
            "main.NetConf",
        ),
    ],
)
def test_netconf_type_errors(data: bytes, message: str) -> None:
    with pytest.raises(NetConfError) as err:
        parse_netconf(data)
    assert str(err.value) == message


def test_saved_delegate_type() -> None:
    assert saved_delegate_type(b'{"type":"bridge","name":"x"}') == "bridge"
    with pytest.raises(NetConfError):
        saved_delegate_type(b'{"type":"bridge",')
