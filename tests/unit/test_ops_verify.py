"""The pure parts of the verify/repair API: subnet.env against the lease, the repair plan."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_address

from pyflannel_runtime.backend.host import HostDatapath
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.netlink.entries import Action, DatapathState, Neigh, Op, Route
from pyflannel_runtime.ops.repair import plan_repair
from pyflannel_runtime.ops.verify import (
    DeviceMtu,
    compare,
    subnet_env_differences,
)
from pyflannel_runtime.subnet.manager import ListedLease
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

DEV = 4
HOST = HostDatapath("vxlan", devices=VxlanDevices(DEV, None), names={DEV: "flannel.1"})
CONFIG = NetworkConfig(network=IPv4Network("10.244.0.0/16"), backend_type="vxlan")
ENV = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\n" \
      "FLANNEL_IPMASQ=true\n"  # fmt: skip


def lease(n: int) -> Lease:
    attrs = LeaseAttrs(IPv4Address(f"192.0.2.1{n}"), None, "vxlan",
                       vxlan_backend_data(1, f"0a:58:0a:f4:0{n}:00"))  # fmt: skip
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, attrs)


def entries(n: int) -> set[Route | Neigh]:
    return set(vxlan_peer_entries(lease(n), VxlanDevices(DEV, None)))  # type: ignore[arg-type]


def test_subnet_env_written_for_the_lease_matches() -> None:
    assert subnet_env_differences(ENV, "s.env", CONFIG, lease(1), 1450) == []
    assert subnet_env_differences(ENV, "s.env", CONFIG, lease(1), None) == []


def test_subnet_env_differences_are_named() -> None:
    assert subnet_env_differences(ENV, "s.env", CONFIG, lease(2), 1400) == [
        "s.env: FLANNEL_SUBNET is 10.244.1.0/24, the lease says 10.244.2.0/24",
        "s.env: FLANNEL_MTU is 1450, expected 1400",
    ]
    other = replace(CONFIG, network=IPv4Network("10.0.0.0/8"))
    assert subnet_env_differences(ENV, "s.env", other, lease(1), 1450) == [
        "s.env: FLANNEL_NETWORK is 10.244.0.0/16, the lease says 10.0.0.0/8"
    ]
    assert subnet_env_differences("FLANNEL_MTU=1450\n", "s.env", CONFIG, lease(1), 1450) == [
        "s.env is missing FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK, FLANNEL_SUBNET, "
        "FLANNEL_IPV6_SUBNET, FLANNEL_IPMASQ"
    ]


def test_subnet_env_of_a_dual_stack_lease() -> None:
    dual = replace(CONFIG, enable_ipv6=True, ipv6_network=IPv6Network("fd00::/48"))
    own = replace(lease(1), ipv6_subnet=IPv6Network("fd00:0:0:1::/64"), enable_ipv6=True)
    assert subnet_env_differences(ENV, "s.env", dual, own, 1450) == [
        "s.env: FLANNEL_IPV6_NETWORK is unset, the lease says fd00::/48",
        "s.env: FLANNEL_IPV6_SUBNET is unset, the lease says fd00:0:0:1::/64",
    ]
    full = ENV + "FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\n"
    assert subnet_env_differences(full, "s.env", dual, own, 1450) == []


def test_the_repair_plan_is_the_reconcile_of_expected_against_found() -> None:
    stale = Neigh(DEV, ip_address("10.244.9.0"), "0a:58:0a:f4:09:00")
    (route3,) = (e for e in entries(3) if isinstance(e, Route))
    actual = DatapathState.of(entries(2) | (entries(3) - {route3}) | {stale})
    report = compare([ListedLease(lease(n)) for n in (1, 2, 3)], lease(1), HOST, actual, "etcd")
    assert plan_repair(report) == [Op(Action.CREATE, route3), Op(Action.DELETE, stale)]
    in_sync = compare(
        [ListedLease(lease(n)) for n in (1, 2, 3)],
        lease(1),
        HOST,
        DatapathState.of(entries(2) | entries(3)),
        "etcd",
    )
    assert in_sync.ok and plan_repair(in_sync) == []


def test_nothing_is_planned_where_the_datapath_was_not_read() -> None:
    listing = compare([ListedLease(lease(n)) for n in (1, 2)], None, None, None, "etcd")
    assert listing.actual is None and plan_repair(listing) == []


def test_mtu_and_subnet_env_findings_make_a_report_fail() -> None:
    report = compare([ListedLease(lease(1))], lease(1), HOST, DatapathState(), "etcd")
    assert report.ok
    assert not replace(report, mtus=(DeviceMtu("flannel.1", 1400, 1450),)).ok
    assert replace(report, mtus=(DeviceMtu("flannel.1", 1450, 1450),)).ok
    assert not replace(report, subnet_env=("s.env: FLANNEL_MTU is 1500, expected 1450",)).ok
