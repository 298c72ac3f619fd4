"""The cluster plan's cross-node rules at their edges: pod MTU minimums, pinned subnets (length,
bounds, overlaps in address order), shared public IPs, and unknown node names."""

from __future__ import annotations

from typing import Any

import pytest

from pyflannel_controller.model.cluster import ClusterModelError, load_model
from pyflannel_controller.model.cluster_plan import PlanError, plan_cluster

IPV6 = {"flannel_enable_ipv6": True, "flannel_ipv6_network": "fd00:10:244::/56"}
ETCD = {"flannel_datastore": "etcd", "flannel_etcd_endpoints": ["https://127.0.0.1:2379"]}


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ClusterModelError) as err:
        plan_cluster(load_model(data))
    return err.value.problems


def pod_mtus(data: dict[str, Any]) -> list[int]:
    return [node.mtu for node in plan_cluster(load_model(data)).nodes]


def test_the_pod_mtu_may_be_exactly_the_ipv4_minimum() -> None:
    # vxlan takes 50 bytes: flannel_mtu 118, the smallest the model takes, leaves IPv4's 68.
    assert pod_mtus({"flannel_mtu": 118, "nodes": {"a": None}}) == [68]


def test_the_pod_mtu_may_be_exactly_the_ipv6_minimum_and_not_below() -> None:
    assert pod_mtus({**IPV6, "flannel_mtu": 1330, "nodes": {"a": None}}) == [1280]
    assert problems_of({**IPV6, "flannel_mtu": 1329, "nodes": {"a": None}}) == [
        "nodes.a: the pod MTU would be 1279, below the IPv6 minimum 1280"
    ]


def test_a_pinned_subnet_of_the_wrong_length_names_the_length_setting() -> None:
    assert problems_of(
        {**IPV6, "nodes": {"a": {"subnet": "10.244.1.0/25", "ipv6_subnet": "fd00:10:244:1::/72"}}}
    ) == [
        "nodes.a.subnet: 10.244.1.0/25 must be a /24 (flannel_subnet_len)",
        "nodes.a.ipv6_subnet: fd00:10:244:1::/72 must be a /64 (flannel_ipv6_subnet_len)",
    ]


def test_in_etcd_a_pinned_ipv6_subnet_must_lie_within_its_subnet_min_and_max() -> None:
    pinned = {"subnet": "10.244.1.0/24", "ipv6_subnet": "fd00:10:244::/64"}
    assert problems_of({**ETCD, **IPV6, "nodes": {"a": pinned}}) == [
        "nodes.a.ipv6_subnet: fd00:10:244::/64 is outside SubnetMin..SubnetMax "
        "(fd00:10:244:1::..fd00:10:244:ff::)"
    ]
    # The Kubernetes datastore takes podCIDRs as the controller assigned them: no bounds.
    assert len(pod_mtus({**IPV6, "nodes": {"a": pinned}})) == 1


def test_overlaps_name_the_widest_earlier_pin_even_after_an_equal_one() -> None:
    nodes = {
        "a": {"subnet": "10.244.0.0/23"},
        "b": {"subnet": "10.244.1.0/24"},  # ends where a ends: a stays the widest
        "c": {"subnet": "10.244.1.128/25"},
    }
    assert problems_of({"nodes": nodes}) == [
        "nodes.a.subnet: 10.244.0.0/23 must be a /24 (flannel_subnet_len)",
        "nodes.c.subnet: 10.244.1.128/25 must be a /24 (flannel_subnet_len)",
        "nodes.b.subnet: 10.244.1.0/24 overlaps nodes.a.subnet 10.244.0.0/23",
        "nodes.c.subnet: 10.244.1.128/25 overlaps nodes.a.subnet 10.244.0.0/23",
    ]


def test_a_pin_starting_on_the_last_address_of_another_overlaps_it() -> None:
    nodes = {"a": {"subnet": "10.244.1.0/24"}, "b": {"subnet": "10.244.1.255/32"}}
    assert problems_of({"nodes": nodes})[-1] == (
        "nodes.b.subnet: 10.244.1.255/32 overlaps nodes.a.subnet 10.244.1.0/24"
    )


def test_a_shared_public_ip_is_found_after_nodes_without_one() -> None:
    nodes = {"a": None, "b": {"public_ip": "192.0.2.1"}, "c": {"public_ip": "192.0.2.1"}}
    assert problems_of({"nodes": nodes}) == [
        "nodes.c.public_ip: 192.0.2.1 is also the public_ip of nodes.b"
    ]


def test_a_shared_public_ip_says_where_it_was_inherited_from() -> None:
    assert problems_of({"flannel_public_ip": "192.0.2.1", "nodes": {"a": None, "b": None}}) == [
        "nodes.b.public_ip: 192.0.2.1 (inherited from flannel_public_ip) is also the public_ip "
        "of nodes.a"
    ]


def test_asking_for_an_unknown_node_lists_the_known_ones() -> None:
    with pytest.raises(PlanError) as err:
        plan_cluster(load_model({})).node("x")
    assert err.value.problems == ["nodes.x: not in the cluster model (nodes: none)"]
    with pytest.raises(PlanError) as err:
        plan_cluster(load_model({"nodes": {"b": None, "a": None}})).node("x")
    assert err.value.problems == ["nodes.x: not in the cluster model (nodes: a, b)"]


def test_a_node_takes_its_own_interface_settings_and_public_ips_else_the_models() -> None:
    model = {
        **IPV6,
        "flannel_interface": "eth1",
        "flannel_interface_regexp": "^eth",
        "flannel_interface_can_reach": "192.0.2.254",
        "flannel_public_ip": "192.0.2.1",
        "flannel_public_ipv6": "2001:db8::1",
        "nodes": {
            "a": None,
            "b": {
                "interface": "ens3",
                "interface_regexp": "^ens",
                "interface_can_reach": "198.51.100.254",
                "public_ip": "192.0.2.2",
                "public_ipv6": "2001:db8::2",
            },
        },
    }
    fields = ("interface", "interface_regexp", "interface_can_reach", "public_ip", "public_ipv6")
    a, b = (
        tuple(str(getattr(node, field)) for field in fields)
        for node in plan_cluster(load_model(model)).nodes
    )
    assert a == ("eth1", "^eth", "192.0.2.254", "192.0.2.1", "2001:db8::1")
    assert b == ("ens3", "^ens", "198.51.100.254", "192.0.2.2", "2001:db8::2")
