"""The pure half of lease acquisition (flannel-io/flannel pkg/subnet/etcd/local_manager.go:
tryAcquireLease): compatibility, the free-subnet scan, the choice."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_runtime.model.lease import Lease, LeaseAttrs
from pyflannel_runtime.model.netconf import NetworkConfig, check_network_config
from pyflannel_runtime.model.subnet_env import PreviousSubnets
from pyflannel_runtime.subnet.allocation import (
    MAX_CANDIDATES,
    OutOfSubnets,
    choose_new_subnets,
    find_own_lease,
    free_blocks,
    free_ipv4_subnets,
    free_ipv6_subnets,
    lease_fits,
)


def v4_config(network: str, subnet_len: int = 0) -> NetworkConfig:
    return check_network_config(NetworkConfig(network=IPv4Network(network), subnet_len=subnet_len))


def lease(subnet: str | None, ip: str = "192.0.2.1", ipv6_subnet: str | None = None) -> Lease:
    return Lease(
        subnet=IPv4Network(subnet) if subnet else None,
        ipv6_subnet=IPv6Network(ipv6_subnet) if ipv6_subnet else None,
        attrs=LeaseAttrs(public_ip=IPv4Address(ip)),
    )


# --- free_blocks against a brute-force scan ---------------------------------------------------


@st.composite
def scans(draw: st.DrawFn) -> tuple[int, int, int, list[tuple[int, int]], int]:
    size = 1 << draw(st.integers(0, 4))
    first = draw(st.integers(0, 20)) * size
    count = draw(st.integers(0, 150))
    last = first + max(count - 1, 0) * size + draw(st.integers(0, size - 1))
    space = last + 2 * size
    taken = draw(
        st.lists(
            st.tuples(st.integers(0, space), st.integers(0, 3 * size)).map(
                lambda t: (t[0], t[0] + t[1])
            ),
            max_size=40,
        )
    )
    limit = draw(st.integers(1, 120))
    return first, last, size, taken, limit


@given(scans())
@settings(max_examples=300)
def test_free_blocks_are_the_first_free_aligned_blocks(
    scan: tuple[int, int, int, list[tuple[int, int]], int],
) -> None:
    first, last, size, taken, limit = scan
    expected = [
        start
        for start in range(first, last + 1, size)
        if not any(lo <= start + size - 1 and start <= hi for lo, hi in taken)
    ][:limit]
    assert free_blocks(first, last, size, taken, limit) == expected


# --- free subnets of a real config --------------------------------------------------------------


@st.composite
def v4_setups(draw: st.DrawFn) -> tuple[NetworkConfig, list[IPv4Network]]:
    prefix = draw(st.integers(8, 28))
    base = draw(st.integers(0, (1 << prefix) - 1)) << (32 - prefix)
    network = IPv4Network((base, prefix))
    subnet_len = draw(st.integers(prefix + 2, min(prefix + 12, 30)))
    cfg = v4_config(str(network), subnet_len)
    existing = draw(
        st.lists(
            st.tuples(
                st.integers(int(network.network_address), int(network.broadcast_address)),
                st.integers(max(prefix - 2, 0), 32),
            ).map(lambda t: IPv4Network(t, strict=False)),
            max_size=60,
        )
    )
    return cfg, existing


@given(v4_setups())
@settings(max_examples=200)
def test_ipv4_candidates_are_free_aligned_and_in_range(
    setup: tuple[NetworkConfig, list[IPv4Network]],
) -> None:
    cfg, existing = setup
    assert cfg.subnet_min is not None and cfg.subnet_max is not None
    candidates = free_ipv4_subnets(cfg, existing)
    assert len(candidates) <= MAX_CANDIDATES
    assert candidates == sorted(set(candidates))
    for candidate in candidates:
        assert candidate.prefixlen == cfg.subnet_len  # IPv4Network((a, len)) is strict: aligned
        assert cfg.subnet_min <= candidate.network_address <= cfg.subnet_max
        assert not any(candidate.overlaps(taken) for taken in existing)


@given(v4_setups(), st.randoms(use_true_random=False))
@settings(max_examples=100)
def test_chosen_subnet_fits_and_is_free(
    setup: tuple[NetworkConfig, list[IPv4Network]], rng: random.Random
) -> None:
    cfg, existing = setup
    leases = [lease(str(n)) for n in existing]
    try:
        chosen = choose_new_subnets(cfg, leases, PreviousSubnets(), rng)
    except OutOfSubnets:
        assert free_ipv4_subnets(cfg, existing, limit=1) == []
        return
    assert chosen.ipv6_subnet is None
    assert chosen.subnet is not None
    assert lease_fits(lease(str(chosen.subnet)), cfg)
    assert not any(chosen.subnet.overlaps(n) for n in existing)


def test_candidates_stop_at_one_hundred_from_subnet_min() -> None:
    cfg = v4_config("10.0.0.0/8")  # /24 subnets: 65534 of them
    candidates = free_ipv4_subnets(cfg, [IPv4Network("10.0.2.0/24")])
    assert len(candidates) == 100
    assert candidates[0] == IPv4Network("10.0.1.0/24")
    assert IPv4Network("10.0.2.0/24") not in candidates
    assert candidates[-1] == IPv4Network("10.0.101.0/24")


def test_a_huge_taken_range_is_jumped_over() -> None:
    # Stepping through fd00::/17 one /64 at a time would take 2**47 steps.
    cfg = v6_config("fd00::/16", 64)
    candidates = free_ipv6_subnets(cfg, [IPv6Network("fd00::/17")], limit=3)
    assert candidates == [
        IPv6Network("fd00:8000::/64"),
        IPv6Network("fd00:8000:0:1::/64"),
        IPv6Network("fd00:8000:0:2::/64"),
    ]


# --- compatibility, own lease, previous subnet -------------------------------------------------


def v6_config(network: str, subnet_len: int, enable_ipv4: bool = False) -> NetworkConfig:
    return check_network_config(
        NetworkConfig(
            enable_ipv4=enable_ipv4,
            enable_ipv6=True,
            network=IPv4Network("10.244.0.0/16") if enable_ipv4 else None,
            ipv6_network=IPv6Network(network),
            ipv6_subnet_len=subnet_len,
        )
    )


@pytest.mark.parametrize(
    ("subnet", "fits"),
    [
        ("10.244.1.0/24", True),
        ("10.244.255.0/24", True),
        ("10.244.0.0/24", False),  # below the default SubnetMin
        ("10.244.1.0/25", False),  # wrong length
        ("10.245.1.0/24", False),  # outside the network
        (None, False),
    ],
)
def test_lease_fits_v4(subnet: str | None, fits: bool) -> None:
    assert lease_fits(lease(subnet), v4_config("10.244.0.0/16")) is fits


def test_lease_fits_needs_no_v6_when_v6_is_off_and_one_when_on() -> None:
    dual = v6_config("fd00:10::/56", 64, enable_ipv4=True)
    v4_only = v4_config("10.244.0.0/16")
    assert not lease_fits(lease("10.244.1.0/24", ipv6_subnet="fd00:10:0:1::/64"), v4_only)
    assert lease_fits(lease("10.244.1.0/24", ipv6_subnet="fd00:10:0:1::/64"), dual)
    assert not lease_fits(lease("10.244.1.0/24"), dual)
    assert lease_fits(lease(None, ipv6_subnet="fd00:10:0:1::/64"), v6_config("fd00:10::/56", 64))


def test_find_own_lease_by_public_ip() -> None:
    mine = lease("10.244.3.0/24", ip="192.0.2.3")
    leases = [lease("10.244.1.0/24", ip="192.0.2.1"), mine]
    assert find_own_lease(leases, LeaseAttrs(public_ip=IPv4Address("192.0.2.3"))) is mine
    assert find_own_lease(leases, LeaseAttrs(public_ip=IPv4Address("192.0.2.9"))) is None


def test_v6_only_nodes_are_told_apart_by_their_ipv6() -> None:
    a = Lease(None, IPv6Network("fd00::/64"), LeaseAttrs(public_ipv6=IPv6Address("2001:db8::a")))
    b = Lease(
        None, IPv6Network("fd00:0:0:1::/64"), LeaseAttrs(public_ipv6=IPv6Address("2001:db8::b"))
    )
    me = LeaseAttrs(public_ipv6=IPv6Address("2001:db8::b"))
    assert find_own_lease([a, b], me) is b
    assert find_own_lease([a], me) is None


def test_previous_subnet_is_reused_when_free_and_compatible() -> None:
    cfg = v4_config("10.244.0.0/16")
    previous = PreviousSubnets(subnet=IPv4Network("10.244.7.0/24"))
    chosen = choose_new_subnets(cfg, [lease("10.244.1.0/24")], previous, random.Random(1))
    assert chosen.subnet == IPv4Network("10.244.7.0/24")


def test_previous_subnet_is_ignored_when_taken() -> None:
    cfg = v4_config("10.244.0.0/16")
    previous = PreviousSubnets(subnet=IPv4Network("10.244.7.0/24"))
    chosen = choose_new_subnets(cfg, [lease("10.244.7.0/24")], previous, random.Random(1))
    assert chosen.subnet != IPv4Network("10.244.7.0/24")


def test_previous_subnet_is_ignored_when_incompatible(caplog: pytest.LogCaptureFixture) -> None:
    cfg = v4_config("10.244.0.0/16")
    previous = PreviousSubnets(subnet=IPv4Network("10.99.7.0/24"))
    chosen = choose_new_subnets(cfg, [], previous, random.Random(1))
    assert chosen.subnet is not None and chosen.subnet.subnet_of(IPv4Network("10.244.0.0/16"))
    assert (
        "Found previously leased subnet (10.99.7.0/24) that is not compatible with the Etcd "
        "network config, ignoring" in caplog.text
    )


def test_out_of_subnets() -> None:
    cfg = v4_config("10.244.0.0/28", 30)  # SubnetMin .4, SubnetMax .12: three subnets
    leases = [lease(f"10.244.0.{n}/30") for n in (4, 8, 12)]
    with pytest.raises(OutOfSubnets, match=r"^out of subnets$"):
        choose_new_subnets(cfg, leases, PreviousSubnets(), random.Random(1))
    chosen = choose_new_subnets(cfg, leases[:2], PreviousSubnets(), random.Random(1))
    assert chosen.subnet == IPv4Network("10.244.0.12/30")


def test_dual_stack_chooses_each_family_independently() -> None:
    cfg = v6_config("fd00:10::/56", 64, enable_ipv4=True)
    previous = PreviousSubnets(ipv6_subnet=IPv6Network("fd00:10:0:9::/64"))
    chosen = choose_new_subnets(cfg, [], previous, random.Random(1))
    assert chosen.ipv6_subnet == IPv6Network("fd00:10:0:9::/64")
    assert chosen.subnet is not None and lease_fits(
        lease(str(chosen.subnet), ipv6_subnet=str(chosen.ipv6_subnet)), cfg
    )


def test_v6_only_chooses_no_ipv4() -> None:
    cfg = v6_config("fd00:10::/56", 64)
    chosen = choose_new_subnets(cfg, [], PreviousSubnets(), random.Random(1))
    assert chosen.subnet is None
    assert chosen.ipv6_subnet is not None and chosen.ipv6_subnet.prefixlen == 64
