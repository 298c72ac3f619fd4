"""The backend specs: one per backend, one validation of its options, its MTU rule and its lease
data, asked by everything else; and the registry's runtime hooks beside them."""

from __future__ import annotations

import json
from ipaddress import IPv4Address, IPv4Network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.model.cluster import ClusterModel
from pyflannel_controller.model.cluster_settings import BACKEND_SETTINGS
from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.host import HostDatapath
from pyflannel_runtime.backend.peers import PeerSkipped, VxlanDevices
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.backend_spec.options import HostGwOptions, UdpOptions, VxlanOptions
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs, LeaseError
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig, parse_config
from pyflannel_runtime.wire.vxlan_data import (
    advertised_vtep_mac,
    parse_vxlan_backend_data,
    vtep_mac,
    vxlan_backend_data,
)

NETWORK = IPv4Network("10.244.0.0/16")


def config(backend: dict[str, Any]) -> NetworkConfig:
    return parse_config(json.dumps({"Network": str(NETWORK), "Backend": backend}))


def test_the_supported_backends() -> None:
    assert specs.names() == ("vxlan", "host-gw", "udp")
    assert specs.find("wireguard") is None
    with pytest.raises(ConfigError) as err:
        specs.get("wireguard")
    assert (
        str(err.value) == "unknown backend type: wireguard (pyflannel supports vxlan, host-gw, udp)"
    )


def test_dual_stack_support() -> None:
    assert [specs.get(n).dual_stack for n in specs.names()] == [True, True, False]


# --- one validation of the options ----------------------------------------------------------

VXLAN_ERROR = "error decoding VXLAN backend config: "
UDP_ERROR = "error decoding UDP backend config: "


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ({"Port": 70000}, VXLAN_ERROR + "Port must be between 0 and 65535, got 70000"),
        ({"Port": -1}, VXLAN_ERROR + "Port must be between 0 and 65535, got -1"),
        ({"VNI": -5}, VXLAN_ERROR + "VNI must be between 0 and 16777215, got -5"),
        ({"VNI": 2**24}, VXLAN_ERROR + "VNI must be between 0 and 16777215, got 16777216"),
        (
            {"VNI": 99999999999999999999999},
            VXLAN_ERROR + "json: cannot unmarshal number 99999999999999999999999 into Go struct "
            "field .VNI of type int",
        ),
        (
            {"VNI": "1"},
            VXLAN_ERROR + "json: cannot unmarshal string into Go struct field .VNI of type int",
        ),
        (
            {"Port": "abc"},
            VXLAN_ERROR + "json: cannot unmarshal string into Go struct field .Port of type int",
        ),
        (
            {"vni": 1.5},
            VXLAN_ERROR + "json: cannot unmarshal number 1.5 into Go struct field .VNI of type int",
        ),
        (
            {"VNI": True},
            VXLAN_ERROR + "json: cannot unmarshal bool into Go struct field .VNI of type int",
        ),
        (
            {"GBP": "true"},
            VXLAN_ERROR + "json: cannot unmarshal string into Go struct field .GBP of type bool",
        ),
        (
            {"DirectRouting": 1},
            VXLAN_ERROR
            + "json: cannot unmarshal number into Go struct field .DirectRouting of type bool",
        ),
        (
            {"MTU": 117},
            VXLAN_ERROR + "MTU must be 0 (the interface's MTU) or between 118 and 65535, got 117",
        ),
        (
            {"MTU": 65536},
            VXLAN_ERROR + "MTU must be 0 (the interface's MTU) or between 118 and 65535, got 65536",
        ),
    ],
)
def test_bad_vxlan_options_fail_with_one_message(backend: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        specs.validate(config({"Type": "vxlan", **backend}))
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ({"Port": 0}, UDP_ERROR + "Port must be between 1 and 65535, got 0"),
        ({"Port": 65536}, UDP_ERROR + "Port must be between 1 and 65535, got 65536"),
        (
            {"Port": "8285"},
            UDP_ERROR + "json: cannot unmarshal string into Go struct field .Port of type int",
        ),
        ({"Queues": 0}, UDP_ERROR + "Queues must be between 1 and 256, got 0"),
        (
            {"SuperPackets": 1},
            UDP_ERROR
            + "json: cannot unmarshal number into Go struct field .SuperPackets of type bool",
        ),
    ],
)
def test_bad_udp_options_fail_with_one_message(backend: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        specs.validate(config({"Type": "udp", **backend}))
    assert str(err.value) == message


def test_good_options_decode_as_go_would() -> None:
    opts = specs.validate(
        config(
            {
                "type": "vxlan",
                "vni": 16777215,
                "PORT": 65535,
                "Port": 0,  # Go: the exact name wins over a case-folded one only by position
                "MTU": 118,
                "gbp": True,
                "Learning": None,  # null leaves the default
                "Unknown": "ignored",
            }
        )
    )
    assert opts == VxlanOptions(vni=16777215, port=0, mtu=118, gbp=True)
    assert specs.validate(config({"Type": "udp"})) == UdpOptions(port=8285, queues=1)
    assert specs.validate(config({"Type": "udp", "superpackets": True})) == UdpOptions(
        super_packets=True
    )
    assert specs.validate(config({"Type": "host-gw", "Port": "x"})) == HostGwOptions()


@given(st.integers(-(2**70), 2**70))
def test_every_integer_vni_is_either_accepted_as_is_or_refused(vni: int) -> None:
    try:
        opts = VxlanOptions.decode({"VNI": vni})
    except ConfigError:
        assert not 0 <= vni < 2**24
    else:
        assert opts.vni == vni and 0 <= vni < 2**24


# --- MTU -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "iface_mtu", "expected"),
    [
        ({"Type": "vxlan"}, 1500, 1450),
        ({"Type": "vxlan"}, 9000, 8950),
        ({"Type": "vxlan", "MTU": 1400}, 1500, 1350),  # Backend.MTU replaces the interface's
        ({"Type": "udp"}, 1500, 1472),
        ({"Type": "udp", "MTU": 1400}, 1500, 1472),  # udp has no MTU option
        ({"Type": "host-gw"}, 1400, 1400),
        ({"Type": "host-gw", "MTU": 9000}, 1400, 1400),
    ],
)
def test_backend_mtu(backend: dict[str, Any], iface_mtu: int, expected: int) -> None:
    assert specs.validate(config(backend)).device_mtu(iface_mtu) == expected


# --- the cluster model's settings are the backend's options ---------------------------------


def test_cluster_settings_take_their_ranges_from_the_backend_options() -> None:
    schema = ClusterModel.model_json_schema()["properties"]
    for setting, (backend, name) in BACKEND_SETTINGS.items():
        option = specs.get(backend).options.option(name)
        (bounds,) = [s for s in schema[setting]["anyOf"] if s["type"] != "null"]
        if option.kind is bool:
            assert bounds == {"type": "boolean"}, setting
        else:
            assert (bounds["minimum"], bounds["maximum"]) == (option.minimum, option.maximum)
    assert schema["flannel_backend_type"]["enum"] == list(specs.names())


# --- per-peer entries ---------------------------------------------------------------------


def test_expected_entries_come_from_the_backend_runtime() -> None:
    lease = Lease(
        IPv4Network("10.244.2.0/24"),
        None,
        LeaseAttrs(
            IPv4Address("192.0.2.12"), None, "vxlan", vxlan_backend_data(1, "0a:00:00:00:00:02")
        ),
    )
    host = HostDatapath("vxlan", devices=VxlanDevices(4, None))
    assert len(registry.get("vxlan").expected_entries(lease, host)) == 3
    with pytest.raises(PeerSkipped, match="the udp backend's datapath is not checked"):
        registry.get("udp").expected_entries(lease, HostDatapath("udp"))


# --- vxlan lease data: one parser -----------------------------------------------------------


def test_vxlan_backend_data_parse() -> None:
    data = parse_vxlan_backend_data('{"VNI":1,"VtepMAC":"C6:D2:32:6F:8F:44"}')
    assert (data.vni, data.vtep_mac) == (1, "c6:d2:32:6f:8f:44")
    assert parse_vxlan_backend_data(vxlan_backend_data(7, "0A:58:0A:F4:01:00")) == type(data)(
        7, "0a:58:0a:f4:01:00"
    )
    for bad in (None, "null", '{"VNI":1}', '{"VNI":1,"VtepMAC":"zz"}', "{", '{"VNI":"1"}'):
        with pytest.raises(LeaseError):
            parse_vxlan_backend_data(bad)


@pytest.mark.parametrize(
    ("data", "mac"),
    [
        ('{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}', "12:c6:65:89:b4:e3"),
        ('{"VtepMAC":"12:C6:65:89:B4:E3","VNI":1}', "12:c6:65:89:b4:e3"),
        ('{"PublicKey":"abc=","Port":51820}', ""),
        ("null", ""),
        ("", ""),
        (None, ""),
        ("{broken", ""),
        ('{"VNI":1,"VtepMAC":"not-a-mac"}', ""),
    ],
)
def test_advertised_vtep_mac(data: str | None, mac: str) -> None:
    assert advertised_vtep_mac(data) == mac


@given(st.integers(0, 2**24 - 1), st.binary(min_size=6, max_size=6))
def test_the_fast_path_and_the_decoder_agree(vni: int, raw_mac: bytes) -> None:
    mac = ":".join(f"{b:02x}" for b in raw_mac)
    canonical = vxlan_backend_data(vni, mac)
    spaced = json.dumps({"VNI": vni, "VtepMAC": mac.upper()})
    assert vtep_mac(canonical) == vtep_mac(spaced) == mac
    assert parse_vxlan_backend_data(canonical) == parse_vxlan_backend_data(spaced)


@pytest.mark.parametrize(
    ("backend", "stale"),
    [
        ({"Type": "vxlan"}, ["flannel-v6.7", "flannel.7", "flannel0"]),
        ({"Type": "vxlan", "VNI": 7}, ["flannel.1", "flannel-v6.1", "flannel0"]),
        (
            {"Type": "host-gw"},
            ["flannel.1", "flannel-v6.1", "flannel-v6.7", "flannel.7", "flannel0"],
        ),
        ({"Type": "udp"}, ["flannel.1", "flannel-v6.1", "flannel-v6.7", "flannel.7"]),
    ],
)
def test_stale_devices_are_other_backends_and_other_vnis(
    backend: dict[str, Any], stale: list[str]
) -> None:
    links = ["lo", "eth0", "cni0", "flannel.1", "flannel-v6.1", "flannel-v6.7", "flannel.7"]
    links += ["flannel0", "flannel.x", "flannel", "flannel10a", "vxlan0"]
    assert specs.stale_devices(links, backend) == [n for n in links if n in stale]


def test_stale_devices_of_udp_spare_every_tun_the_kernel_may_have_numbered() -> None:
    assert specs.stale_devices(["flannel0", "flannel3"], {"Type": "udp"}) == []
    assert specs.stale_devices(["flannel3"], {"Type": "vxlan"}) == ["flannel3"]


def test_stale_devices_refuse_a_backend_that_does_not_validate() -> None:
    with pytest.raises(ConfigError, match="unknown backend type"):
        specs.stale_devices(["flannel.1"], {"Type": "wireguard"})
    with pytest.raises(ConfigError, match="VNI must be"):
        specs.stale_devices(["flannel.1"], {"Type": "vxlan", "VNI": -5})


def test_the_vxlan_backend_names_its_devices_as_flannel_does() -> None:
    assert [VxlanOptions(vni=9).device_name(v) for v in (4, 6)] == ["flannel.9", "flannel-v6.9"]


def test_flannel_devices_are_those_of_any_backend_and_any_options() -> None:
    links = ["lo", "eth0", "cni0", "flannel.1", "flannel-v6.42", "flannel3", "flannel", "flannelx"]
    assert specs.flannel_devices(links) == ["flannel.1", "flannel-v6.42", "flannel3"]
