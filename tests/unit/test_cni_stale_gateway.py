"""Which bridge addresses the flannel plugin removes when the bridge plugin refuses the node's
new gateway: only the previous gateways inside the flannel Network."""

from __future__ import annotations

from ipaddress import ip_interface

from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.cni.stale_gateway import (
    IPInterface,
    is_stale_gateway_error,
    stale_addresses,
)

NETWORKS = ["10.244.0.0/16", "fd00:10:244::/56"]
SUBNETS = ["10.244.3.128/25", "fd00:10:244:3::/64"]


def addresses(*texts: str) -> list[IPInterface]:
    return [ip_interface(t) for t in texts]


def test_previous_gateways_inside_the_network_go_and_nothing_else() -> None:
    held = addresses(
        "10.244.3.1/24",  # the previous subnet's gateway
        "10.244.3.129/25",  # the gateway now
        "192.168.7.1/24",  # the operator's
        "fd00:10:244:9::1/64",  # a previous IPv6 gateway
        "fd00:10:244:3::1/64",  # the IPv6 gateway now
        "fe80::1/64",  # link-local
    )
    assert stale_addresses(held, NETWORKS, SUBNETS) == addresses(
        "10.244.3.1/24", "fd00:10:244:9::1/64"
    )


def test_the_gateway_with_another_prefix_length_is_stale() -> None:
    held = addresses("10.244.3.129/24")
    assert stale_addresses(held, NETWORKS, SUBNETS) == held


def test_a_single_stack_node_keeps_no_address_of_the_other_family_inside_its_network() -> None:
    held = addresses("10.244.3.1/24", "10.244.3.129/25")
    assert stale_addresses(held, NETWORKS[:1], SUBNETS[:1]) == addresses("10.244.3.1/24")
    assert stale_addresses(held, [], []) == []


def test_only_the_bridge_plugins_refusal_triggers_it() -> None:
    refusal = (
        'failed to set bridge addr: "cni0" already has an IP address different from 10.244.3.129/25'
    )
    assert is_stale_gateway_error(CniError(999, refusal))
    assert not is_stale_gateway_error(CniError(999, "failed to allocate for range 0"))
