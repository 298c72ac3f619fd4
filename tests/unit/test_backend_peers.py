"""Which kernel entries a peer lease calls for (vxlan and host-gw), and what a datapath owns."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.backend.hostgw.peers import hostgw_peer_entries
from pyflannel_runtime.backend.peers import PeerSkipped, VxlanDevices
from pyflannel_runtime.backend.udp.peers import udp_peer_route
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.netlink.dump import Ownership, RouteFacts, owns_route
from pyflannel_runtime.netlink.entries import Fdb, Neigh, Route
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

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


def test_direct_routing_for_one_family_leaves_the_other_tunnelled() -> None:
    lease = vxlan_lease(v6=True)
    entries = vxlan_peer_entries(lease, VxlanDevices(4, 5), {ip_address("192.0.2.12"): 2})
    assert entries == (
        Route(ip_network("10.244.2.0/24"), ip_address("192.0.2.12"), 2),
        Neigh(5, ip_address("fd00:10:244:2::"), "0a:58:00:00:00:02"),
        Fdb(5, "0a:58:00:00:00:02", ip_address("2001:db8::12")),
        Route(ip_network("fd00:10:244:2::/64"), ip_address("fd00:10:244:2::"), 5, True, 1024),
    )
    v6_only_device = vxlan_peer_entries(lease, VxlanDevices(None, 5))
    assert v6_only_device == entries[1:]


# --- every combination of families, devices and DirectRouting ----------------------------------


@st.composite
def peer_leases(draw: st.DrawFn, backend: str) -> Lease:
    """v4-only, v6-only and dual-stack peers, with or without public IPs and per-family data."""
    n = draw(st.integers(1, 250))
    v4, v6 = draw(st.booleans()), draw(st.booleans())
    return Lease(
        subnet=ip_network(f"10.244.{n}.0/24") if v4 else ip_network("0.0.0.0/0"),
        ipv6_subnet=ip_network(f"fd00:10:244:{n:x}::/64") if v6 else None,
        attrs=LeaseAttrs(
            IPv4Address(f"192.0.2.{n}") if v4 else IPv4Address("0.0.0.0"),
            draw(st.sampled_from([None, IPv6Address(f"2001:db8::{n:x}")])),
            backend,
            vxlan_backend_data(1, f"0a:58:0a:f4:{n:02x}:00") if v4 else None,
            vxlan_backend_data(1, f"0a:58:00:00:{n:02x}:06") if v6 else None,
        ),
        enable_ipv4=v4,
        enable_ipv6=v6,
    )


def families(lease: Lease) -> list[tuple[int, Any, Any, str | None]]:
    """(IP version, subnet, public IP, backend data) of each family the lease enables."""
    out = []
    if lease.enable_ipv4:
        out.append((4, lease.subnet, lease.attrs.public_ip, lease.attrs.backend_data))
    if lease.enable_ipv6 and lease.attrs.public_ipv6 is not None:
        out.append((6, lease.ipv6_subnet, lease.attrs.public_ipv6, lease.attrs.backend_v6_data))
    return out


@given(
    peer_leases("vxlan"),
    st.sampled_from([VxlanDevices(4, None), VxlanDevices(None, 5), VxlanDevices(4, 5)]),
    st.sets(st.sampled_from(["v4", "v6"])),
)
def test_vxlan_entries_per_family_in_order(
    lease: Lease, devices: VxlanDevices, direct_families: set[str]
) -> None:
    """Each family the lease and this node both have: neighbour, FDB, onlink route on that
    family's device (IPv6 routes at the kernel's default metric), or with DirectRouting one
    route via the peer's public IP; v4 first. A family either side lacks gets nothing."""
    direct = {ip: 2 for version, _, ip, _ in families(lease) if f"v{version}" in direct_families}
    expected: list[Any] = []
    for version, subnet, public_ip, data in families(lease):
        dev = devices.v4 if version == 4 else devices.v6
        if dev is None:
            continue
        metric = 1024 if version == 6 else 0
        if public_ip in direct:
            expected.append(Route(subnet, public_ip, 2, priority=metric))
            continue
        mac = data[data.index('"VtepMAC":"') + 11 : -2]
        gateway = subnet.network_address
        expected += [
            Neigh(dev, gateway, mac),
            Fdb(dev, mac, public_ip),
            Route(subnet, gateway, dev, onlink=True, priority=metric),
        ]
    assert vxlan_peer_entries(lease, devices, direct) == tuple(expected)


@given(peer_leases("host-gw"), st.booleans(), st.booleans())
def test_hostgw_one_route_per_family_both_sides_have(lease: Lease, ipv4: bool, ipv6: bool) -> None:
    expected = [
        Route(subnet, public_ip, 2, priority=1024 if version == 6 else 0)
        for version, subnet, public_ip, _ in families(lease)
        if (ipv4 if version == 4 else ipv6)
    ]
    assert hostgw_peer_entries(lease, 2, ipv4, ipv6) == tuple(expected)


def test_the_udp_forwarder_routes_a_peers_ipv4_subnet_to_its_public_ip_and_nothing_else() -> None:
    attrs = LeaseAttrs(IPv4Address("192.0.2.12"))
    subnet = ip_network("10.244.2.0/24")
    assert udp_peer_route(Lease(subnet, None, attrs)) == (subnet, IPv4Address("192.0.2.12"))
    # A v6-only peer: its lease carries no IPv4 subnet, or one that its flags disable.
    v6 = ip_network("fd00:10:244:2::/64")
    assert udp_peer_route(Lease(None, v6, attrs, enable_ipv4=False, enable_ipv6=True)) is None
    assert udp_peer_route(Lease(subnet, v6, attrs, enable_ipv4=False, enable_ipv6=True)) is None


# A Lease's flags default to IPv4 on: a lease can say a family is on without a subnet in it, or
# hold a subnet its flags say is off. Only a family that is both on and has a subnet is a route.
V4, V6 = ip_network("10.244.2.0/24"), ip_network("fd00:10:244:2::/64")
BOTH_IPS = (IPv4Address("192.0.2.12"), IPv6Address("2001:db8::12"))


def flagged(backend: str, subnet: Any, ipv6_subnet: Any, **flags: bool) -> Lease:
    data = vxlan_backend_data(1, MAC) if backend == "vxlan" else None
    attrs = LeaseAttrs(*BOTH_IPS, backend, data, data)
    return Lease(subnet, ipv6_subnet, attrs, **flags)


@pytest.mark.parametrize(
    ("subnet", "ipv6_subnet", "flags", "routed"),
    [
        (None, V6, {"enable_ipv6": True}, [V6]),  # IPv4 on (the default) without a subnet
        (V4, None, {"enable_ipv6": True}, [V4]),  # IPv6 on without a subnet
        (V4, V6, {}, [V4]),  # an IPv6 subnet with IPv6 off
        (V4, V6, {"enable_ipv4": False, "enable_ipv6": True}, [V6]),
    ],
)
def test_a_family_is_routed_only_when_the_lease_both_enables_it_and_holds_its_subnet(
    subnet: Any, ipv6_subnet: Any, flags: dict[str, bool], routed: list[Any]
) -> None:
    hostgw = hostgw_peer_entries(flagged("host-gw", subnet, ipv6_subnet, **flags), 2, True, True)
    assert [entry.dst for entry in hostgw] == routed
    vxlan = vxlan_peer_entries(flagged("vxlan", subnet, ipv6_subnet, **flags), VxlanDevices(4, 5))
    assert [entry.dst for entry in vxlan if isinstance(entry, Route)] == routed
    udp = udp_peer_route(flagged("udp", subnet, ipv6_subnet, **flags))
    assert udp == ((V4, BOTH_IPS[0]) if V4 in routed else None)
