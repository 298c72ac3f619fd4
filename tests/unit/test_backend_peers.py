"""Which kernel entries a peer lease calls for (vxlan and host-gw), and what a datapath owns."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from pyflannel_runtime.backend.peers import (
    PeerSkipped,
    VxlanDevices,
    hostgw_peer_entries,
    vxlan_peer_entries,
)
from pyflannel_runtime.backend.vxlan_data import vxlan_backend_data
from pyflannel_runtime.model.lease import Lease, LeaseAttrs
from pyflannel_runtime.netlink.dump import Ownership, RouteFacts, owns_route
from pyflannel_runtime.netlink.entries import Fdb, Neigh, Route

MAC = "0a:58:0a:f4:02:00"


def vxlan_lease(v6: bool = False) -> Lease:
    return Lease(
        subnet=ip_network("10.244.2.0/24"),
        ipv6_subnet=ip_network("fd00:10:244:2::/64") if v6 else None,
        attrs=LeaseAttrs(
            IPv4Address("192.0.2.12"),
            IPv6Address("2001:db8::12") if v6 else None,
            "vxlan",
            vxlan_backend_data(1, MAC),
            vxlan_backend_data(1, "0a:58:00:00:00:02") if v6 else None,
        ),
        enable_ipv6=v6,
    )


def test_vxlan_neighbour_fdb_then_onlink_route() -> None:
    assert vxlan_peer_entries(vxlan_lease(), VxlanDevices(4, None)) == (
        Neigh(4, ip_address("10.244.2.0"), MAC),
        Fdb(4, MAC, ip_address("192.0.2.12")),
        Route(ip_network("10.244.2.0/24"), ip_address("10.244.2.0"), 4, onlink=True),
    )


def test_vxlan_dual_stack_uses_the_v6_device_data_and_metric() -> None:
    entries = vxlan_peer_entries(vxlan_lease(v6=True), VxlanDevices(4, 5))
    assert entries[3:] == (
        Neigh(5, ip_address("fd00:10:244:2::"), "0a:58:00:00:00:02"),
        Fdb(5, "0a:58:00:00:00:02", ip_address("2001:db8::12")),
        Route(ip_network("fd00:10:244:2::/64"), ip_address("fd00:10:244:2::"), 5, True, 1024),
    )


def test_vxlan_direct_routing_replaces_all_three_with_a_route() -> None:
    entries = vxlan_peer_entries(
        vxlan_lease(), VxlanDevices(4, None), {ip_address("192.0.2.12"): 2}
    )
    assert entries == (Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.12"), 2),)


def test_vxlan_skips_other_backends_and_bad_data() -> None:
    lease = vxlan_lease()
    other = Lease(lease.subnet, None, LeaseAttrs(IPv4Address("192.0.2.12"), None, "host-gw"))
    with pytest.raises(PeerSkipped, match="ignoring non-vxlan"):
        vxlan_peer_entries(other, VxlanDevices(4, None))
    broken = Lease(lease.subnet, None, LeaseAttrs(IPv4Address("192.0.2.12"), None, "vxlan", "[]"))
    with pytest.raises(PeerSkipped, match="error decoding"):
        vxlan_peer_entries(broken, VxlanDevices(4, None))


def test_hostgw_route_per_family_via_public_ip() -> None:
    lease = Lease(
        ip_network("10.244.2.0/24"),
        ip_network("fd00:10:244:2::/64"),
        LeaseAttrs(IPv4Address("192.0.2.12"), IPv6Address("2001:db8::12"), "host-gw"),
        enable_ipv6=True,
    )
    assert hostgw_peer_entries(lease, 2, True, True) == (
        Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.12"), 2),
        Route(ip_network("fd00:10:244:2::/64"), ip_address("2001:db8::12"), 2, priority=1024),
    )
    assert len(hostgw_peer_entries(lease, 2, True, False)) == 1
    with pytest.raises(PeerSkipped, match="Ignoring non-host-gw"):
        hostgw_peer_entries(vxlan_lease(), 2, True, False)


OWN = Ownership(devices=frozenset({4}), networks=(ip_network("10.244.0.0/16"),))


@pytest.mark.parametrize(
    ("dst", "gateway", "oif", "table", "proto", "owned"),
    [
        ("10.244.2.0/24", "10.244.2.0", 4, 254, 3, True),  # vxlan peer route
        ("10.244.2.0/24", None, 4, 254, 4, True),  # anything non-kernel on flannel.1
        ("10.244.2.0/24", "192.0.2.12", 2, 254, 3, True),  # host-gw / DirectRouting
        ("10.244.2.0/24", "192.0.2.12", 2, 254, 4, False),  # static: an admin's
        ("10.244.1.0/24", None, 3, 254, 2, False),  # cni0's own subnet
        ("198.51.100.0/24", "192.0.2.99", 2, 254, 3, False),  # outside the network
        ("10.244.2.0/24", "10.244.2.0", 4, 100, 3, False),  # another table
    ],
)
def test_route_ownership(
    dst: str, gateway: str | None, oif: int, table: int, proto: int, owned: bool
) -> None:
    route = Route(ip_network(dst), ip_address(gateway) if gateway else None, oif)
    assert owns_route(RouteFacts(route, table, proto, 1), OWN) is owned


@pytest.mark.parametrize(
    "raw",
    [
        '{"VNI":1,"VtepMAC":"0a:58:0a:f4:02:00"}',
        '{"VNI":1,"VtepMAC":"0A:58:0A:F4:02:00"}',
        '{ "vtepmac": "0a:58:0a:f4:02:00", "vni": 1 }',
    ],
)
def test_vtep_mac_fast_path_agrees_with_the_decoder(raw: str) -> None:
    lease = vxlan_lease()
    lease = Lease(lease.subnet, None, LeaseAttrs(IPv4Address("192.0.2.12"), None, "vxlan", raw))
    assert vxlan_peer_entries(lease, VxlanDevices(4, None))[0] == Neigh(
        4, ip_address("10.244.2.0"), MAC
    )
