"""The cluster model's validation and the per-node plan."""

from __future__ import annotations

import json
import math
import random
import re
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import StrictInt, TypeAdapter, ValidationError

from pyflannel_controller.model.cluster import (
    ClusterModel,
    ClusterModelError,
    _describe,
    _field_names_at,
    load_model,
)
from pyflannel_controller.model.cluster_fields import (
    DELEGATE_EXTRA_MAX_BYTES,
    DELEGATE_EXTRA_MAX_DEPTH,
    _address,
    _bounded_json,
    _network,
    _option_range,
)
from pyflannel_controller.model.cluster_plan import PlanError, plan_cluster
from pyflannel_controller.model.cluster_settings import NodeOverrides
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.backend_spec.options import Option, UdpOptions, VxlanOptions
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ClusterModelError) as err:
        plan_cluster(load_model(data))
    return err.value.problems


# --- settings and their validation -------------------------------------------------------------


def test_defaults_are_the_manifest_settings() -> None:
    model = load_model({})
    assert model.flannel_backend_type == "vxlan"
    assert model.flannel_network == IPv4Network("10.244.0.0/16")
    assert model.flannel_datastore == "kubernetes"
    assert model.flannel_ip_masq is True
    assert model.to_network_config() == NetworkConfig(
        network=IPv4Network("10.244.0.0/16"), backend_type="vxlan", backend={"Type": "vxlan"}
    )


def test_a_misspelt_setting_is_named_with_a_suggestion() -> None:
    assert problems_of({"flannel_vxlan_prot": 4789}) == [
        "flannel_vxlan_prot: unknown setting (did you mean flannel_vxlan_port?)"
    ]


def test_a_misspelt_node_setting_names_the_node() -> None:
    assert problems_of({"nodes": {"worker-1": {"interfce": "eth1"}}}) == [
        "nodes.worker-1.interfce: unknown setting (did you mean interface?)"
    ]


def test_a_node_without_overrides_may_be_null() -> None:
    model = load_model({"nodes": {"worker-1": None}})
    assert [node.name for node in plan_cluster(model).nodes] == ["worker-1"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            {"flannel_network": "10.244.1.5/16"},
            "flannel_network: 10.244.1.5/16 has host bits set (did you mean 10.244.0.0/16?)",
        ),
        ({"flannel_network": "fd00::/48"}, "flannel_network: 'fd00::/48' is not an IPv4 CIDR"),
        ({"flannel_network": "10.244.0.0"}, "flannel_network: '10.244.0.0' is not an IPv4 CIDR"),
        (
            {"nodes": {"n1": {"subnet": "10.244.3.1/24"}}},
            "nodes.n1.subnet: 10.244.3.1/24 has host bits set (did you mean 10.244.3.0/24?)",
        ),
        (
            {"nodes": {"n1": {"public_ip": "fd00::1"}}},
            "nodes.n1.public_ip: 'fd00::1' is not an IPv4 address",
        ),
        ({"flannel_healthz_ip": 5}, "flannel_healthz_ip: 5 is not an IP address"),
        ({"flannel_network": 10}, "flannel_network: 10 is not an IPv4 CIDR"),
        ({"flannel_ip_masq": "yes"}, "flannel_ip_masq: Input should be a valid boolean"),
        ({"flannel_vxlan_port": "8472"}, "flannel_vxlan_port: Input should be a valid integer"),
        (
            {"flannel_backend_type": "wireguard"},
            "flannel_backend_type: Input should be 'vxlan', 'host-gw' or 'udp'",
        ),
        (
            {"flannel_interface_regexp": "eth[0-"},
            "flannel_interface_regexp: 'eth[0-' is not a valid regular expression: "
            "unterminated character set at position 3",
        ),
        (
            {"flannel_subnet_file": "/var/lib/flannel/subnet.env"},
            "flannel_subnet_file: '/var/lib/flannel/subnet.env' must be in a directory below "
            "/run/, e.g. /run/flannel/",
        ),
        (
            {"flannel_net_conf_path": "/etc/kube flannel/net-conf.json"},
            "flannel_net_conf_path: '/etc/kube flannel/net-conf.json' must be a normalized "
            "absolute path of [A-Za-z0-9._@+-/]",
        ),
        ({"flannel_interface": "eth0\nFOO=1"}, "flannel_interface: must be a single line of text"),
    ],
)
def test_field_errors_name_the_field(data: dict[str, Any], problem: str) -> None:
    assert problems_of(data) == [problem]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            {"flannel_enable_ipv6": True},
            "flannel_ipv6_network: please define a correct IPv6Network parameter in the flannel "
            "config",
        ),
        ({"flannel_subnet_len": 31}, "flannel_subnet_len: SubnetLen must be less than /31"),
        (
            {"flannel_subnet_len": 17},
            "flannel_subnet_len: network must be able to accommodate at least four subnets",
        ),
        (
            {"flannel_network": "10.1.2.0/29"},
            "flannel_network: network is too small. Minimum useful network prefix is /28",
        ),
        (
            {"flannel_subnet_min": "10.245.0.0"},
            "flannel_subnet_min: SubnetMin is not in the range of the Network",
        ),
        (
            {"flannel_subnet_max": "10.244.7.128"},
            "flannel_subnet_max: SubnetMax is not on a SubnetLen boundary: 10.244.7.128",
        ),
        (
            {
                "flannel_enable_ipv6": True,
                "flannel_ipv6_network": "fd00::/56",
                "flannel_ipv6_subnet_len": 57,
            },
            "flannel_ipv6_subnet_len: network must be able to accommodate at least four subnets",
        ),
        (
            {"flannel_enable_ipv4": False},
            "flannel_enable_ipv4: none defined stack (enable IPv4, IPv6 or both)",
        ),
    ],
)
def test_network_rules_are_flannels_with_the_field_named(
    data: dict[str, Any], problem: str
) -> None:
    assert problems_of(data) == [problem]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            {"flannel_backend_type": "host-gw", "flannel_vxlan_vni": 2},
            "flannel_vxlan_vni: only used with vxlan (backend is host-gw)",
        ),
        (
            {"flannel_backend_type": "udp", "flannel_mtu": 1400},
            "flannel_mtu: only used with vxlan (backend is udp)",
        ),
        (
            {"flannel_udp_port": 7890},
            "flannel_udp_port: only used with udp (backend is vxlan)",
        ),
        (
            {"flannel_backend_type": "host-gw", "flannel_vxlan_tx_checksum_offload": "off"},
            "flannel_vxlan_tx_checksum_offload: only used with vxlan (backend is host-gw)",
        ),
        (
            {
                "flannel_backend_type": "udp",
                "flannel_enable_ipv6": True,
                "flannel_ipv6_network": "fd00::/48",
            },
            "flannel_enable_ipv6: the udp backend carries IPv4 only",
        ),
        (
            {"flannel_etcd_prefix": "/my/network"},
            "flannel_etcd_prefix: only used with flannel_datastore etcd",
        ),
        (
            {"flannel_datastore": "etcd", "flannel_kubeconfig_file": "/etc/kubernetes/admin.conf"},
            "flannel_kubeconfig_file: only used with flannel_datastore kubernetes",
        ),
        (
            {"flannel_kubeconfig_file": "/root/.kube/config"},
            "flannel_kubeconfig_file: /root/.kube/config is out of the agent's reach: its unit's "
            "ProtectHome=yes hides /root from the service; use another directory, e.g. /etc/pyflannel",
        ),
        (
            {"flannel_net_conf_path": "/tmp/net-conf.json"},
            "flannel_net_conf_path: /tmp/net-conf.json is out of the agent's reach: its unit's "
            "PrivateTmp=yes hides /tmp from the service; use another directory, e.g. /etc/pyflannel",
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_certfile": "/etc/etcd/client.pem"},
            "flannel_etcd_keyfile: required when flannel_etcd_certfile is set",
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_username": "flannel"},
            "flannel_etcd_password: required when flannel_etcd_username is set",
        ),
        (
            {
                "flannel_datastore": "etcd",
                "flannel_etcd_endpoints": ["http://192.0.2.1:2379"],
                "flannel_etcd_cafile": "/etc/etcd/ca.pem",
                "flannel_etcd_certfile": "/etc/etcd/client.pem",
                "flannel_etcd_keyfile": "/etc/etcd/client-key.pem",
            },
            "flannel_etcd_endpoints: TLS files are set but no endpoint is https://",
        ),
        (
            {
                "flannel_datastore": "etcd",
                "flannel_etcd_endpoints": ["https://192.0.2.1:2379"],
                "flannel_etcd_cafile": "/etc/etcd/ca.pem",
            },
            "flannel_etcd_certfile: required when flannel_etcd_cafile is set",
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_endpoints": ["192.0.2.1:2379"]},
            "flannel_etcd_endpoints.0: '192.0.2.1:2379' is not an http:// or https:// URL",
        ),
        (
            {
                "flannel_enable_ipv4": False,
                "flannel_enable_ipv6": True,
                "flannel_ipv6_network": "fd00::/48",
                "flannel_network": "10.1.0.0/16",
            },
            "flannel_network: only used when flannel_enable_ipv4 is true",
        ),
        (
            {"nodes": {"n1": {"ipv6_subnet": "fd00:0:0:1::/64"}}},
            "nodes.n1.ipv6_subnet: only used when flannel_enable_ipv6 is true",
        ),
        (
            {"nodes": {"bad name": {}}},
            "nodes.bad name: node names use letters, digits, '.', '_' and '-' only",
        ),
        (
            {"flannel_cni_delegate_extra": {"hairpinMode": False}},
            "flannel_cni_delegate_extra.hairpinMode: set flannel_hairpin_mode instead",
        ),
    ],
)
def test_cross_field_rules(data: dict[str, Any], problem: str) -> None:
    assert problems_of(data) == [problem]


def test_every_cross_field_problem_is_reported_at_once() -> None:
    problems = problems_of(
        {"flannel_backend_type": "host-gw", "flannel_vxlan_port": 4789, "flannel_subnet_len": 31}
    )
    assert problems == [
        "flannel_vxlan_port: only used with vxlan (backend is host-gw)",
        "flannel_subnet_len: SubnetLen must be less than /31",
    ]


def test_the_etcd_password_never_shows_in_messages() -> None:
    err = problems_of(
        {
            "flannel_datastore": "etcd",
            "flannel_etcd_username": "flannel",
            "flannel_etcd_password": "s3cret\nFLANNELD_IFACE=evil",
        }
    )
    assert err == ["flannel_etcd_password: must be a single line of text"]
    assert "s3cret" not in repr(
        load_model(
            {
                "flannel_datastore": "etcd",
                "flannel_etcd_username": "u",
                "flannel_etcd_password": "s3cret",
            }
        )
    )


def test_the_model_must_be_a_mapping() -> None:
    assert problems_of(["flannel_network"]) == ["the cluster model must be a mapping of settings"]


def test_to_network_config_passes_flannels_check_with_its_defaults() -> None:
    model = load_model({"flannel_network": "10.3.0.0/16"})
    checked = check_network_config(model.to_network_config())
    assert (checked.subnet_len, checked.subnet_min, checked.subnet_max) == (
        24,
        IPv4Address("10.3.1.0"),
        IPv4Address("10.3.255.0"),
    )


# --- the plan: per-node facts ------------------------------------------------------------------


def test_node_overrides_win_over_cluster_settings() -> None:
    model = load_model(
        {
            "flannel_interface": "eth0",
            "flannel_interface_regexp": "^10\\.",
            "nodes": {"a": {"interface": "eth1", "public_ip": "192.0.2.10"}, "b": {}},
        }
    )
    a, b = plan_cluster(model).nodes
    assert (a.name, a.interface, a.interface_regexp, a.public_ip) == (
        "a",
        "eth1",
        "^10\\.",
        IPv4Address("192.0.2.10"),
    )
    assert (b.name, b.interface, b.public_ip) == ("b", "eth0", None)


def test_unknown_node_is_an_error_listing_the_known_ones() -> None:
    cluster = plan_cluster(load_model({"nodes": {"b": {}, "a": {}}}))
    with pytest.raises(PlanError) as err:
        cluster.node("c")
    assert err.value.problems == ["nodes.c: not in the cluster model (nodes: a, b)"]


def test_a_public_ip_shared_by_two_nodes_is_refused() -> None:
    problems = problems_of({"flannel_public_ip": "192.0.2.1", "nodes": {"a": {}, "b": {}}})
    assert problems == [
        "nodes.b.public_ip: 192.0.2.1 (inherited from flannel_public_ip) is also the public_ip "
        "of nodes.a"
    ]


def test_kube_mode_accepts_the_first_subnet_and_etcd_mode_does_not() -> None:
    # The controller manager hands out 10.244.0.0/24 too; flannel's etcd manager never does.
    node = {"nodes": {"n1": {"subnet": "10.244.0.0/24"}}}
    assert plan_cluster(load_model(node)).node("n1").subnet == IPv4Network("10.244.0.0/24")
    assert problems_of({**node, "flannel_datastore": "etcd"}) == [
        "nodes.n1.subnet: 10.244.0.0/24 is outside SubnetMin..SubnetMax (10.244.1.0..10.244.255.0)"
    ]


def test_ipv6_pins_are_checked_like_ipv4_ones() -> None:
    base = {
        "flannel_enable_ipv6": True,
        "flannel_ipv6_network": "fd00:0:0:100::/56",
    }
    ok = load_model(
        {**base, "nodes": {"a": {"subnet": "10.244.1.0/24", "ipv6_subnet": "fd00:0:0:101::/64"}}}
    )
    assert plan_cluster(ok).node("a").ipv6_subnet == IPv6Network("fd00:0:0:101::/64")
    problems = problems_of(
        {
            **base,
            "nodes": {
                "a": {"subnet": "10.244.1.0/24", "ipv6_subnet": "fd00:0:0:200::/64"},
                "b": {"subnet": "10.244.2.0/24"},
            },
        }
    )
    assert problems == [
        "nodes.a.ipv6_subnet: fd00:0:0:200::/64 is not inside the network fd00:0:0:100::/56",
        "nodes.b.ipv6_subnet: required too when nodes.b.subnet is pinned (the lease holds every "
        "enabled family)",
    ]


def test_the_plan_does_not_depend_on_the_order_nodes_are_listed() -> None:
    names = [f"node-{i}" for i in range(8)]
    nodes = {name: {"subnet": f"10.244.{i + 1}.0/24"} for i, name in enumerate(names)}
    shuffled = list(nodes.items())
    random.Random(7).shuffle(shuffled)
    first = plan_cluster(load_model({"nodes": nodes}))
    second = plan_cluster(load_model({"nodes": dict(shuffled)}))
    assert first == second
    assert [n.name for n in first.nodes] == sorted(names)


# --- properties --------------------------------------------------------------------------------

OVERHEAD = {"vxlan": 50, "udp": 28, "host-gw": 0}


@st.composite
def pinned_clusters(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, IPv4Network]]:
    prefix = draw(st.integers(8, 22))
    base = draw(st.integers(0, 2**32 - 1)) >> (32 - prefix) << (32 - prefix)
    network = IPv4Network((base, prefix))
    subnet_len = draw(st.integers(prefix + 2, min(prefix + 6, 30)))
    count = 1 << (subnet_len - prefix)
    pins: dict[str, IPv4Network] = {}
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["inside", "inside", "inside", "wider", "narrower", "outside"]))
        index = draw(st.integers(0, count - 1))
        start = base + index * (1 << (32 - subnet_len))
        if kind == "inside":
            pin = IPv4Network((start, subnet_len))
        elif kind == "wider":
            pin = IPv4Network((start, subnet_len - 1), strict=False)
        elif kind == "narrower":
            pin = IPv4Network((start, subnet_len + 1))
        else:
            outside = (base + network.num_addresses + index * (1 << (32 - subnet_len))) % 2**32
            pin = IPv4Network((outside, subnet_len))
        pins[f"n{i}"] = pin
    data = {
        "flannel_datastore": draw(st.sampled_from(["kubernetes", "etcd"])),
        "flannel_network": str(network),
        "flannel_subnet_len": subnet_len,
        "nodes": {name: {"subnet": str(pin)} for name, pin in pins.items()},
    }
    return data, pins


@settings(max_examples=300, deadline=None)
@given(pinned_clusters())
def test_pinned_subnets_are_refused_exactly_when_they_do_not_fit(
    case: tuple[dict[str, Any], dict[str, IPv4Network]],
) -> None:
    data, pins = case
    network = IPv4Network(data["flannel_network"])
    subnet_len = data["flannel_subnet_len"]
    size = 1 << (32 - subnet_len)
    first = int(network.network_address) + size
    last = int(network.network_address) + network.num_addresses - size

    etcd = data["flannel_datastore"] == "etcd"
    misfits = {
        name
        for name, pin in pins.items()
        if not pin.subnet_of(network)
        or pin.prefixlen != subnet_len
        or (etcd and not first <= int(pin[0]) <= last)
    }
    overlapping = {
        name
        for name, pin in pins.items()
        for other, other_pin in pins.items()
        if other != name and pin.overlaps(other_pin)
    }

    model = load_model(data)
    if not misfits and not overlapping:
        planned = plan_cluster(model)
        assert {n.name: n.subnet for n in planned.nodes} == pins
        return
    with pytest.raises(PlanError) as err:
        plan_cluster(model)
    problems = err.value.problems
    overlap_lines = [p for p in problems if " overlaps " in p]
    named_in_overlaps = {n for line in overlap_lines for n in re.findall(r"nodes\.(n\d)\.", line)}
    assert named_in_overlaps == overlapping
    other_lines = [p for p in problems if " overlaps " not in p]
    assert {re.match(r"nodes\.(n\d)\.subnet: ", p).group(1) for p in other_lines} == misfits  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(
    backend=st.sampled_from(["vxlan", "udp", "host-gw"]),
    interface_mtu=st.none() | st.integers(576, 9216),
    flannel_mtu=st.none() | st.integers(576, 9216),
    ipv6=st.booleans(),
)
def test_expected_mtu_is_the_underlay_mtu_less_the_backend_overhead(
    backend: str, interface_mtu: int | None, flannel_mtu: int | None, ipv6: bool
) -> None:
    if backend != "vxlan":
        flannel_mtu = None
    if backend == "udp":
        ipv6 = False
    data: dict[str, Any] = {"flannel_backend_type": backend, "nodes": {"n": {}}}
    if interface_mtu is not None:
        data["nodes"]["n"]["mtu"] = interface_mtu
    if flannel_mtu is not None:
        data["flannel_mtu"] = flannel_mtu
    if ipv6:
        data |= {"flannel_enable_ipv6": True, "flannel_ipv6_network": "fd00::/48"}

    underlay = flannel_mtu or interface_mtu or 1500
    expected = underlay - OVERHEAD[backend]
    too_big = flannel_mtu is not None and interface_mtu is not None and flannel_mtu > interface_mtu
    too_small = expected < (1280 if ipv6 else 68)
    model = load_model(data)
    if too_big or too_small:
        with pytest.raises(PlanError) as err:
            plan_cluster(model)
        assert all(p.startswith("nodes.n") for p in err.value.problems)
        assert len(err.value.problems) == too_big + too_small
    else:
        node = plan_cluster(model).node("n")
        assert node.mtu == expected
        assert node.interface_mtu == (interface_mtu or 1500)


@settings(max_examples=100, deadline=None)
@given(st.permutations([f"h{i}" for i in range(6)]), st.integers(0, 5))
def test_the_plan_is_deterministic(order: list[str], duplicate: int) -> None:
    subnets = {f"h{i}": f"10.244.{i + 1}.0/24" for i in range(6)}
    subnets["h5"] = subnets[f"h{duplicate}"]  # maybe a clash, maybe h5 itself
    data = {"nodes": {name: {"subnet": subnets[name]} for name in order}}
    reference = {"nodes": {name: {"subnet": subnets[name]} for name in sorted(order)}}
    try:
        expected: Any = plan_cluster(load_model(reference))
    except PlanError as err:
        expected = err.problems
    try:
        actual: Any = plan_cluster(load_model(data))
    except PlanError as err:
        actual = err.problems
    assert actual == expected


# --- what the mutation run showed untested ----------------------------------------------------

V6_ONLY = {"flannel_enable_ipv4": False, "flannel_enable_ipv6": True}
V6_NET = {"flannel_ipv6_network": "fd00::/48"}


@pytest.mark.parametrize(
    ("data", "problems"),
    [
        (
            {"flannel_network": "10.244.0.1/16"},
            ["flannel_network: 10.244.0.1/16 has host bits set (did you mean 10.244.0.0/16?)"],
        ),
        ({"flannel_network": "fd00::/48"}, ["flannel_network: 'fd00::/48' is not an IPv4 CIDR"]),
        ({"flannel_network": 5}, ["flannel_network: 5 is not an IPv4 CIDR"]),
        ({"flannel_network": "10.244.0.0"}, ["flannel_network: '10.244.0.0' is not an IPv4 CIDR"]),
        (
            {"flannel_enable_ipv6": True, "flannel_ipv6_network": "10.0.0.0/8"},
            ["flannel_ipv6_network: '10.0.0.0/8' is not an IPv6 CIDR"],
        ),
        (
            {"nodes": {"n1": {"public_ip": "fd00::1"}}},
            ["nodes.n1.public_ip: 'fd00::1' is not an IPv4 address"],
        ),
        ({"nodes": {"n1": {"public_ip": 5}}}, ["nodes.n1.public_ip: 5 is not an IPv4 address"]),
        (
            {"nodes": {"n1": {"public_ipv6": "192.0.2.1"}}, "flannel_enable_ipv6": True, **V6_NET},
            ["nodes.n1.public_ipv6: '192.0.2.1' is not an IPv6 address"],
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_endpoints": ["ftp://x"]},
            ["flannel_etcd_endpoints.0: 'ftp://x' is not an http:// or https:// URL"],
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_endpoints": ["http://a,http://b"]},
            ["flannel_etcd_endpoints.0: 'http://a,http://b' is not an http:// or https:// URL"],
        ),
        (
            {"flannel_datastore": "etcd", "flannel_etcd_endpoints": ["http://"]},
            ["flannel_etcd_endpoints.0: 'http://' is not an http:// or https:// URL"],
        ),
        (
            {"flannel_subnet_file": "/run/subnet.env"},
            [
                "flannel_subnet_file: '/run/subnet.env' must be in a directory below /run/, "
                "e.g. /run/flannel/"
            ],
        ),
        (
            {"flannel_backend_type": "ipip"},
            ["flannel_backend_type: Input should be 'vxlan', 'host-gw' or 'udp'"],
        ),
        (
            {
                "flannel_cni_delegate_extra": {
                    "name": "x",
                    "cniVersion": "1",
                    "isDefaultGateway": True,
                    "hairpinMode": True,
                    "bridge": "cni1",
                }
            },
            [
                "flannel_cni_delegate_extra.name: the flannel plugin sets it",
                "flannel_cni_delegate_extra.cniVersion: the flannel plugin sets it",
                "flannel_cni_delegate_extra.isDefaultGateway: set flannel_is_default_gateway "
                "instead",
                "flannel_cni_delegate_extra.hairpinMode: set flannel_hairpin_mode instead",
            ],
        ),
        (
            {
                **V6_ONLY,
                **V6_NET,
                "nodes": {"n1": {"subnet": "10.244.1.0/24", "public_ip": "192.0.2.1"}},
            },
            [
                "nodes.n1.subnet: only used when flannel_enable_ipv4 is true",
                "nodes.n1.public_ip: only used when flannel_enable_ipv4 is true",
            ],
        ),
        (
            {"nodes": {"n1": {"ipv6_subnet": "fd00::/64", "public_ipv6": "2001:db8::1"}}},
            [
                "nodes.n1.ipv6_subnet: only used when flannel_enable_ipv6 is true",
                "nodes.n1.public_ipv6: only used when flannel_enable_ipv6 is true",
            ],
        ),
        (
            {**V6_ONLY, **V6_NET, "flannel_network": "10.9.0.0/16", "flannel_subnet_len": 20},
            [
                "flannel_network: only used when flannel_enable_ipv4 is true",
                "flannel_subnet_len: only used when flannel_enable_ipv4 is true",
            ],
        ),
        (
            {"flannel_ipv6_network": "fd00::/48", "flannel_ipv6_subnet_len": 56},
            [
                "flannel_ipv6_network: only used when flannel_enable_ipv6 is true",
                "flannel_ipv6_subnet_len: only used when flannel_enable_ipv6 is true",
            ],
        ),
        (
            {
                "flannel_datastore": "etcd",
                "flannel_etcd_endpoints": ["http://a:2379"],
                "flannel_etcd_certfile": "/etc/c.pem",
                "flannel_etcd_keyfile": "/etc/k.pem",
            },
            ["flannel_etcd_endpoints: TLS files are set but no endpoint is https://"],
        ),
        (
            {"flannel_vxlan_vni": 2**24},
            ["flannel_vxlan_vni: Input should be less than or equal to 16777215"],
        ),
        (
            {"flannel_vxlan_vni": -1},
            ["flannel_vxlan_vni: Input should be greater than or equal to 0"],
        ),
    ],
)
def test_each_problem_is_named_exactly(data: dict[str, Any], problems: list[str]) -> None:
    assert problems_of(data) == problems


def test_the_problems_make_one_message_line_each() -> None:
    with pytest.raises(ClusterModelError) as err:
        plan_cluster(load_model({"flannel_network": 5, "flannel_vxlan_vni": -1}))
    assert str(err.value) == "\n".join(err.value.problems) and len(err.value.problems) == 2


def test_a_v6_only_plan_keeps_the_ipv6_network() -> None:
    model = load_model({**V6_ONLY, **V6_NET})
    assert model.to_network_config().ipv6_network == IPv6Network("fd00::/48")
    assert load_model({}).to_network_config().ipv6_network is None
    assert plan_cluster(model).network_config == check_network_config(model.to_network_config())


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


def compact_size(value: Any) -> int:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


@given(json_values, st.booleans())
def test_delegate_extra_is_measured_as_its_compact_json(value: Any, over: bool) -> None:
    """The bound is exact: padded to DELEGATE_EXTRA_MAX_BYTES of compact JSON it passes, one
    byte more and it is refused."""
    padding = DELEGATE_EXTRA_MAX_BYTES - compact_size([value, ""]) + int(over)
    padded = [value, "x" * padding]
    assert compact_size(padded) == DELEGATE_EXTRA_MAX_BYTES + int(over)
    if over:
        with pytest.raises(ValueError, match=r"^larger than 65536 bytes as JSON$"):
            _bounded_json(padded)
    else:
        assert _bounded_json(padded) is padded
        assert _bounded_json({"k": value}) == {"k": value}


def test_delegate_extra_depth_and_number_limits() -> None:
    def nested(levels: int) -> Any:
        value: Any = 0
        for _ in range(levels):
            value = [value] if levels % 2 else {"a": value}
        return value

    assert _bounded_json(nested(DELEGATE_EXTRA_MAX_DEPTH)) == nested(DELEGATE_EXTRA_MAX_DEPTH)
    for levels in (DELEGATE_EXTRA_MAX_DEPTH + 1, DELEGATE_EXTRA_MAX_DEPTH + 2):
        with pytest.raises(ValueError, match=r"^nests deeper than 16 levels$"):
            _bounded_json(nested(levels))
    assert _bounded_json([2**13999 - 1]) == [2**13999 - 1]  # 13 999 bits
    with pytest.raises(ValueError, match=r"^an integer is too large to write out$"):
        _bounded_json([2**13999])  # 14 000 bits
    for bad in (math.inf, -math.inf):
        with pytest.raises(ValueError, match=rf"^{bad} is not a JSON number$"):
            _bounded_json([bad])
    assert _bounded_json([True, False, None, "é", [], {}]) is not None


# --- the field types' builders, called here (the model's own were made at import time) --------


def model_problems(data: dict[str, Any]) -> list[str]:
    """What load_model alone refuses (plan_cluster, which checks more, is not run)."""
    with pytest.raises(ClusterModelError) as err:
        load_model(data)
    return err.value.problems


def validation_messages(adapter: TypeAdapter[Any], value: Any) -> list[str]:
    with pytest.raises(ValidationError) as err:
        adapter.validate_python(value)
    return [e["msg"] for e in err.value.errors()]


def test_address_validators_take_their_family_only() -> None:
    v4 = TypeAdapter(Annotated[IPv4Address, _address(4)])
    v6 = TypeAdapter(Annotated[IPv6Address, _address(6)])
    either = TypeAdapter(Annotated[IPv4Address | IPv6Address, _address(None)])
    assert v4.validate_python("192.0.2.7") == IPv4Address("192.0.2.7")
    assert v4.validate_python(IPv4Address("192.0.2.8")) == IPv4Address("192.0.2.8")
    assert v6.validate_python("2001:db8::7") == IPv6Address("2001:db8::7")
    assert either.validate_python("2001:db8::8") == IPv6Address("2001:db8::8")
    assert either.validate_python("192.0.2.9") == IPv4Address("192.0.2.9")
    assert validation_messages(v4, "2001:db8::7") == [
        "Value error, '2001:db8::7' is not an IPv4 address"
    ]
    assert validation_messages(v6, "192.0.2.7") == [
        "Value error, '192.0.2.7' is not an IPv6 address"
    ]
    assert validation_messages(either, "192.0.2") == ["Value error, '192.0.2' is not an IP address"]


def test_network_validators_take_their_family_only() -> None:
    v4 = TypeAdapter(Annotated[IPv4Network, _network(4)])
    v6 = TypeAdapter(Annotated[IPv6Network, _network(6)])
    assert v4.validate_python("10.8.0.0/16") == IPv4Network("10.8.0.0/16")
    assert v4.validate_python(IPv4Network("10.9.0.0/16")) == IPv4Network("10.9.0.0/16")
    assert v6.validate_python("fd00:1::/48") == IPv6Network("fd00:1::/48")
    assert validation_messages(v4, "fd00:1::/48") == [
        "Value error, 'fd00:1::/48' is not an IPv4 CIDR"
    ]
    assert validation_messages(v6, "10.8.0.0/16") == [
        "Value error, '10.8.0.0/16' is not an IPv6 CIDR"
    ]
    assert validation_messages(v6, "fd00:1::1/48") == [
        "Value error, fd00:1::1/48 has host bits set (did you mean fd00:1::/48?)"
    ]


@pytest.mark.parametrize(
    ("option", "minimum", "maximum"),
    [
        (VxlanOptions.option("VNI"), 0, 2**24 - 1),
        (VxlanOptions.option("MTU"), 118, 65535),
        (UdpOptions.option("Port"), 1, 65535),
    ],
)
def test_an_option_range_is_the_backends_own(option: Option, minimum: int, maximum: int) -> None:
    adapter = TypeAdapter(Annotated[StrictInt, _option_range(option)])
    assert adapter.validate_python(minimum) == minimum
    assert adapter.validate_python(maximum) == maximum
    assert validation_messages(adapter, minimum - 1) == [
        f"Input should be greater than or equal to {minimum}"
    ]
    assert validation_messages(adapter, maximum + 1) == [
        f"Input should be less than or equal to {maximum}"
    ]


def test_a_text_setting_is_one_line_and_not_blank() -> None:
    assert load_model({"flannel_interface": "X0"}).flannel_interface == "X0"
    for bad in ("eth0\rX", "eth0\x00"):
        assert model_problems({"flannel_interface": bad}) == [
            "flannel_interface: must be a single line of text"
        ]
    for blank in ("", " \t"):
        assert model_problems({"flannel_interface": blank}) == [
            "flannel_interface: must not be empty"
        ]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"flannel_healthz_ip": "192.0.2"}, "flannel_healthz_ip: '192.0.2' is not an IP address"),
        (
            {"flannel_network": "10.244.0.0/33"},
            "flannel_network: '10.244.0.0/33' is not an IPv4 CIDR",
        ),
        ({"flannel_network": "ten/8"}, "flannel_network: 'ten/8' is not an IPv4 CIDR"),
    ],
)
def test_an_unparsable_address_or_cidr_is_a_field_problem(
    data: dict[str, Any], problem: str
) -> None:
    assert model_problems(data) == [problem]


# --- backend names ----------------------------------------------------------------------------


def test_an_unknown_backend_is_a_literal_error_listing_the_backends() -> None:
    with pytest.raises(ValidationError) as err:
        ClusterModel.model_validate({"flannel_backend_type": "ipip"})
    assert [(e["type"], e["loc"], e["msg"]) for e in err.value.errors()] == [
        ("literal_error", ("flannel_backend_type",), "Input should be 'vxlan', 'host-gw' or 'udp'")
    ]


@pytest.mark.parametrize(
    ("known", "message"),
    [
        (("vxlan",), "Input should be 'vxlan'"),
        (("vxlan", "udp"), "Input should be 'vxlan' or 'udp'"),
    ],
)
def test_the_backend_choices_read_well_for_any_number_of_backends(
    monkeypatch: pytest.MonkeyPatch, known: tuple[str, ...], message: str
) -> None:
    monkeypatch.setattr(specs, "BACKENDS", {name: specs.BACKENDS[name] for name in known})
    assert model_problems({"flannel_backend_type": "host-gw"}) == [
        f"flannel_backend_type: {message}"
    ]


# --- cross-field rules ------------------------------------------------------------------------


def test_an_ipv4_problem_is_reported_once_when_ipv6_is_on_too() -> None:
    assert model_problems({"flannel_enable_ipv6": True, **V6_NET, "flannel_subnet_len": 31}) == [
        "flannel_subnet_len: SubnetLen must be less than /31"
    ]


def test_an_ipv6_only_network_is_still_checked() -> None:
    assert model_problems(
        {**V6_ONLY, "flannel_ipv6_network": "fd00::/56", "flannel_ipv6_subnet_len": 57}
    ) == ["flannel_ipv6_subnet_len: network must be able to accommodate at least four subnets"]
    assert model_problems({**V6_ONLY}) == [
        "flannel_ipv6_network: please define a correct IPv6Network parameter in the flannel config"
    ]


def test_each_node_with_ipv4_settings_on_an_ipv6_only_cluster_is_named() -> None:
    assert model_problems(
        {
            **V6_ONLY,
            **V6_NET,
            "nodes": {
                "bad name": {"subnet": "10.244.1.0/24"},
                "n2": {"public_ip": "192.0.2.2"},
            },
        }
    ) == [
        "nodes.bad name: node names use letters, digits, '.', '_' and '-' only",
        "nodes.bad name.subnet: only used when flannel_enable_ipv4 is true",
        "nodes.n2.public_ip: only used when flannel_enable_ipv4 is true",
    ]


def test_a_hidden_directory_itself_is_out_of_reach_but_a_lookalike_is_not() -> None:
    assert model_problems({"flannel_net_conf_path": "/tmp"}) == [
        "flannel_net_conf_path: /tmp is out of the agent's reach: its unit's PrivateTmp=yes "
        "hides /tmp from the service; use another directory, e.g. /etc/pyflannel"
    ]
    model = load_model({"flannel_net_conf_path": "/tmpfs/net-conf.json"})
    assert model.flannel_net_conf_path == "/tmpfs/net-conf.json"


def test_delegate_extra_counts_what_follows_a_container_that_reaches_the_limit() -> None:
    # [[0],"x…"]: the outer list, the string and the inner list's brackets come to exactly
    # DELEGATE_EXTRA_MAX_BYTES; the 0 inside is one byte more.
    padding = "x" * (DELEGATE_EXTRA_MAX_BYTES - 7)
    assert compact_size([[], padding]) == DELEGATE_EXTRA_MAX_BYTES
    assert _bounded_json([[], padding]) == [[], padding]
    assert compact_size([[0], padding]) == DELEGATE_EXTRA_MAX_BYTES + 1
    with pytest.raises(ValueError, match=r"^larger than 65536 bytes as JSON$"):
        _bounded_json([[0], padding])


# --- how errors are described -----------------------------------------------------------------


def test_an_error_without_a_field_path_is_the_message_alone() -> None:
    with pytest.raises(ValidationError) as err:
        ClusterModel.model_validate(5)
    assert [line for e in err.value.errors() for line in _describe(e)] == [
        "Input should be a valid dictionary or instance of ClusterModel"
    ]


def test_settings_are_suggested_only_where_settings_are_named() -> None:
    assert _field_names_at(("flannel_vxlan_prot",)) == list(ClusterModel.model_fields)
    assert _field_names_at(("nodes", "n1", "interfce")) == list(NodeOverrides.model_fields)
    assert _field_names_at(("nodes", "n1")) == []
    assert _field_names_at(("nodes", "n1", "interface", "x")) == []
    assert _field_names_at(("flannel_cni_delegate_extra", "a", "b")) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [("on", "on"), ("off", "off"), ("auto", "auto"), (True, "on"), (False, "off")],
)
def test_the_tx_checksum_offload_takes_yaml_booleans_for_on_and_off(
    value: Any, expected: str
) -> None:
    model = load_model({"flannel_vxlan_tx_checksum_offload": value})
    assert model.flannel_vxlan_tx_checksum_offload == expected


def test_the_default_offload_given_explicitly_is_no_vxlan_choice_under_another_backend() -> None:
    # YAML's bare `on`, e.g. in group_vars shared by clusters of several backends.
    model = load_model({"flannel_backend_type": "udp", "flannel_vxlan_tx_checksum_offload": True})
    assert model.flannel_vxlan_tx_checksum_offload == "on"


def test_the_tx_checksum_offload_is_one_of_the_agents_modes() -> None:
    assert problems_of({"flannel_vxlan_tx_checksum_offload": "sometimes"}) == [
        "flannel_vxlan_tx_checksum_offload: Input should be 'on', 'off' or 'auto'"
    ]
