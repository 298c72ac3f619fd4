"""The pure half of ``leases_info`` (pyflannel_runtime.ops.leases, with subnet.usage): which host a lease belongs
to, the orphans, and how many of the network's subnets the leases take."""

from __future__ import annotations

import json
import math
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_runtime.ops.leases import (
    InventoryHost,
    iso_time,
    leases_report,
    owner,
    report_dict,
    with_owners,
)
from pyflannel_runtime.subnet.allocation import free_blocks
from pyflannel_runtime.subnet.manager import LeaseListing, ListedLease, UnreadableLease
from pyflannel_runtime.subnet.usage import block_count, subnet_usage, used_blocks
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig, parse_config
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

from .test_allocation import scans

# --- counting blocks --------------------------------------------------------------------------


@given(scans())
@settings(max_examples=300)
def test_used_blocks_are_the_blocks_the_allocator_never_offers(
    scan: tuple[int, int, int, list[tuple[int, int]], int],
) -> None:
    first, last, size, taken, _ = scan
    total = block_count(first, last, size)
    assert total == len(range(first, last + 1, size))
    overlapped = [
        start
        for start in range(first, last + 1, size)
        if any(lo <= start + size - 1 and start <= hi for lo, hi in taken)
    ]
    used = used_blocks(first, last, size, taken)
    assert used == len(overlapped)
    assert total - used == len(free_blocks(first, last, size, taken, total + 1))


def test_a_huge_range_is_counted_without_walking_it() -> None:
    size = 1 << 64
    first, last = 0, (1 << 96) - size
    taken = [(5 * size, 7 * size - 1), (6 * size, 6 * size), (last + size, last + 5 * size)]
    assert block_count(first, last, size) == 1 << 32
    assert used_blocks(first, last, size, taken) == 2


# --- utilisation of a network -----------------------------------------------------------------


def lease(
    subnet: str | None,
    ip: str = "192.0.2.1",
    ipv6_subnet: str | None = None,
    ipv6: str | None = None,
    expiration: float | None = None,
) -> Lease:
    return Lease(
        subnet=IPv4Network(subnet) if subnet else None,
        ipv6_subnet=IPv6Network(ipv6_subnet) if ipv6_subnet else None,
        attrs=LeaseAttrs(
            public_ip=IPv4Address(ip),
            public_ipv6=IPv6Address(ipv6) if ipv6 else None,
            backend_type="vxlan",
            backend_data=vxlan_backend_data(1, "0a:58:0a:f4:01:00"),
        ),
        expiration=expiration,
    )


def test_flanneld_defaults_give_the_range_when_the_config_leaves_it_out() -> None:
    config = parse_config('{"Network": "10.244.0.0/16"}')
    leases = [lease("10.244.1.0/24"), lease("10.244.7.0/24"), lease("10.245.0.0/24")]
    (v4,) = subnet_usage(config, leases)
    assert (v4.family, str(v4.network), v4.subnet_len) == ("ipv4", "10.244.0.0/16", 24)
    assert (str(v4.subnet_min), str(v4.subnet_max)) == ("10.244.1.0", "10.244.255.0")
    assert (v4.total, v4.used, v4.free, v4.outside) == (255, 2, 253, 1)


def test_a_lease_wider_than_a_subnet_takes_every_subnet_it_covers() -> None:
    config = parse_config(
        '{"Network": "10.0.0.0/16", "SubnetLen": 26, "SubnetMin": "10.0.1.0", "SubnetMax": "10.0.1.192"}'
    )
    (v4,) = subnet_usage(config, [lease("10.0.1.0/25"), lease("10.0.1.64/26")])
    assert (v4.total, v4.used, v4.free, v4.outside) == (4, 2, 2, 0)


def test_both_families_are_counted_and_ipv6_only_leases_take_no_ipv4_subnet() -> None:
    config = parse_config(
        '{"EnableIPv4": true, "Network": "10.244.0.0/16", "EnableIPv6": true,'
        ' "IPv6Network": "fd00:10::/56"}'
    )
    leases = [
        lease("10.244.1.0/24", ipv6_subnet="fd00:10:0:1::/64", ipv6="2001:db8::1"),
        lease("0.0.0.0/0", ip="0.0.0.0", ipv6_subnet="fd00:10:0:2::/64", ipv6="2001:db8::2"),
    ]
    v4, v6 = subnet_usage(config, leases)
    assert (v4.used, v4.outside) == (1, 0)
    assert (v6.family, v6.subnet_len, v6.total, v6.used, v6.free) == ("ipv6", 64, 255, 2, 253)


@given(
    st.integers(20, 28),
    st.integers(1, 200),
    st.integers(1, 200),
    st.lists(st.tuples(st.integers(0, 511), st.integers(18, 30)), max_size=30),
)
@settings(max_examples=200)
def test_a_lease_is_outside_the_range_when_it_takes_none_of_its_subnets(
    subnet_len: int, low: int, high: int, picks: list[tuple[int, int]]
) -> None:
    """Counted in one pass (a scrape of the agent's metrics counts 5 000 leases): each lease
    still as `used_blocks` alone would count it."""
    size, blocks = 1 << (32 - subnet_len), 1 << (subnet_len - 16)
    low, high = 1 + low % (blocks - 1), 1 + high % (blocks - 1)  # inside 10.0.0.0/16
    base = int(IPv4Address("10.0.0.0"))
    config = parse_config(
        json.dumps(
            {
                "Network": "10.0.0.0/16",
                "SubnetLen": subnet_len,
                "SubnetMin": str(IPv4Address(base + low * size)),
                "SubnetMax": str(IPv4Address(base + max(low, high) * size)),
            }
        )
    )
    subnets = [IPv4Network((base + (n << 8), length), strict=False) for n, length in picks]
    (usage,) = subnet_usage(config, [lease(str(s)) for s in subnets])
    first, last = base + low * size, base + max(low, high) * size
    spans = [(int(s.network_address), int(s.broadcast_address)) for s in subnets]
    assert usage.outside == sum(1 for span in spans if not used_blocks(first, last, size, [span]))


def test_a_network_without_a_range_says_why_it_is_not_counted() -> None:
    config = NetworkConfig(network=IPv4Network("10.0.0.0/30"))
    with pytest.raises(ConfigError):
        subnet_usage(config, [])
    report = leases_report(config, LeaseListing(()), "kube", [])
    assert report.usage == ()
    assert report.notes[0].startswith("subnet utilisation not counted: ")
    assert "controller manager assigns podCIDRs" in report.notes[1]


# --- hosts and orphans ------------------------------------------------------------------------


def inventory(**hosts: list[str]) -> list[InventoryHost]:
    return [InventoryHost(name, frozenset(map(ip_address, a))) for name, a in hosts.items()]


def test_a_lease_belongs_to_the_host_holding_its_public_ip() -> None:
    hosts = inventory(n1=["198.51.100.11"], n2=["198.51.100.12", "2001:db8::12"])
    assert owner(lease("10.244.1.0/24", ip="198.51.100.12"), hosts) == "n2"
    assert owner(lease("10.244.2.0/24", ip="198.51.100.99"), hosts) is None
    # An IPv6-only node announces 0.0.0.0, which no host holds: its IPv6 address names it.
    v6_only = lease(None, ip="0.0.0.0", ipv6_subnet="fd00::/64", ipv6="2001:db8::12")
    assert owner(v6_only, hosts) == "n2"
    assert owner(v6_only, [*inventory(any=["0.0.0.0"]), *hosts]) == "n2"


def test_the_ipv4_address_decides_before_the_ipv6_one_and_the_first_host_wins() -> None:
    hosts = inventory(a=["2001:db8::1"], b=["192.0.2.1"], c=["192.0.2.1"])
    assert owner(lease("10.244.1.0/24", ip="192.0.2.1", ipv6="2001:db8::1"), hosts) == "b"


def test_the_report_names_orphans_reservations_and_unreadable_keys() -> None:
    config = parse_config('{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}')
    rows = (
        ListedLease(lease("10.244.1.0/24", ip="198.51.100.11", expiration=1_800_000_000.0)),
        ListedLease(lease("10.244.2.0/24", ip="198.51.100.99")),
    )
    listing = LeaseListing(rows, (UnreadableLease("10.244.3.0-24", "not JSON"),))
    report = leases_report(config, listing, "etcd", inventory(n1=["198.51.100.11"]))
    assert report.orphans == (rows[1],)
    result = report_dict(report)
    first, second = result["leases"]
    assert first["host"] == "n1" and first["reservation"] is False
    assert first["expires"] == "2027-01-15T08:00:00Z"
    assert (first["backend"], first["vtep_mac"]) == ("vxlan", "0a:58:0a:f4:01:00")
    assert second["host"] is None and second["reservation"] is True
    assert result["orphans"] == [second]
    assert result["utilisation"] == [
        {
            "family": "ipv4",
            "network": "10.244.0.0/16",
            "subnet_len": 24,
            "subnet_min": "10.244.1.0",
            "subnet_max": "10.244.255.0",
            "total": 255,
            "used": 2,
            "free": 253,
            "outside": 0,
        }
    ]
    assert result["unreadable"] == [{"name": "10.244.3.0-24", "reason": "not JSON"}]
    assert result["notes"] == []


def test_a_report_read_without_the_inventory_gets_its_hosts_as_one_read_with_it() -> None:
    config = parse_config('{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}')
    rows = (
        ListedLease(lease("10.244.1.0/24", ip="198.51.100.11")),
        ListedLease(lease(None, ip="0.0.0.0", ipv6_subnet="fd00::/64", ipv6="2001:db8::12")),
        ListedLease(lease("10.244.2.0/24", ip="198.51.100.99")),
    )
    listing = LeaseListing(rows, ())
    hosts = inventory(n1=["198.51.100.11"], n2=["2001:db8::12"])
    unmatched = report_dict(leases_report(config, listing, "etcd", []))
    assert len(unmatched["orphans"]) == 3
    matched = with_owners(unmatched, hosts)
    assert matched == report_dict(leases_report(config, listing, "etcd", hosts))
    # IPv6-only leases come last.
    assert [found["host"] for found in matched["leases"]] == ["n1", None, "n2"]


def test_kubernetes_leases_are_no_reservations() -> None:
    config = parse_config('{"Network": "10.244.0.0/16"}')
    listing = LeaseListing((ListedLease(lease("10.244.1.0/24"), node="node1"),))
    (found,) = report_dict(leases_report(config, listing, "kube", []))["leases"]
    assert (found["node"], found["reservation"], found["expires"]) == ("node1", False, None)


def test_an_expiry_not_looked_up_is_no_time() -> None:
    assert iso_time(math.inf) is None and iso_time(None) is None
    assert iso_time(0.0) == "1970-01-01T00:00:00Z"
