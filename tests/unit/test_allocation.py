"""The pure half of lease acquisition (flannel-io/flannel pkg/subnet/etcd/local_manager.go:
tryAcquireLease): compatibility, the free-subnet scan, the choice."""

from __future__ import annotations

import logging
import random
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_runtime.subnet.allocation import (
    MAX_CANDIDATES,
    OutOfSubnets,
    choose_new_subnets,
    find_own_lease,
    free_blocks,
    free_ipv4_subnets,
    free_ipv6_subnets,
    ipv6_subnet_fits,
    lease_fits,
    subnet_fits,
)
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config
from pyflannel_runtime.wire.subnet_env import PreviousSubnets


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


Net = IPv4Network | IPv6Network


def family_config(network: Net, subnet_len: int) -> NetworkConfig:
    if network.version == 4:
        return v4_config(str(network), subnet_len)
    return v6_config(str(network), subnet_len)


def free_subnets(cfg: NetworkConfig, version: int, taken: list[Net], limit: int = 100) -> list[Net]:
    if version == 4:
        return list(free_ipv4_subnets(cfg, [n for n in taken if n.version == 4], limit))
    return list(free_ipv6_subnets(cfg, [n for n in taken if n.version == 6], limit))


def subnet_range(cfg: NetworkConfig, version: int) -> tuple[int, int, int]:
    """(SubnetMin, SubnetMax, SubnetLen) of one family, as integers."""
    if version == 4:
        assert cfg.subnet_min is not None and cfg.subnet_max is not None
        return int(cfg.subnet_min), int(cfg.subnet_max), cfg.subnet_len
    assert cfg.ipv6_subnet_min is not None and cfg.ipv6_subnet_max is not None
    return int(cfg.ipv6_subnet_min), int(cfg.ipv6_subnet_max), cfg.ipv6_subnet_len


@st.composite
def networks(draw: st.DrawFn, version: int) -> tuple[Net, int]:
    """A Network of one family and a SubnetLen that flannel accepts for it."""
    bits = 32 if version == 4 else 128
    prefix = draw(st.integers(8, bits - 4))
    base = draw(st.integers(0, (1 << prefix) - 1)) << (bits - prefix)
    network = (IPv4Network if version == 4 else IPv6Network)((base, prefix))
    return network, draw(st.integers(prefix + 2, min(prefix + 12, bits - 2)))


def subnets_in(network: Net) -> st.SearchStrategy[Net]:
    """Networks of any length at addresses inside ``network`` (overlapping it or not)."""
    return st.tuples(
        st.integers(int(network.network_address), int(network.broadcast_address)),
        st.integers(max(network.prefixlen - 2, 0), network.max_prefixlen),
    ).map(lambda t: type(network)(t, strict=False))


@st.composite
def setups(draw: st.DrawFn, version: int) -> tuple[NetworkConfig, list[Net]]:
    network, subnet_len = draw(networks(version))
    return family_config(network, subnet_len), draw(st.lists(subnets_in(network), max_size=60))


both_families = st.sampled_from((4, 6))


@given(both_families.flatmap(lambda v: st.tuples(st.just(v), setups(v))))
@settings(max_examples=200)
def test_candidates_are_free_aligned_and_in_range(
    drawn: tuple[int, tuple[NetworkConfig, list[Net]]],
) -> None:
    version, (cfg, existing) = drawn
    low, high, length = subnet_range(cfg, version)
    candidates = free_subnets(cfg, version, existing, limit=MAX_CANDIDATES)
    assert len(candidates) <= MAX_CANDIDATES
    assert candidates == sorted(set(candidates))
    for candidate in candidates:
        assert candidate.prefixlen == length  # ip_network((a, len)) is strict: aligned
        assert low <= int(candidate.network_address) <= high
        assert not any(candidate.overlaps(taken) for taken in existing)  # type: ignore[arg-type]


def lease_with(subnet: Net | None, ipv6_subnet: Net | None = None, ip: str = "192.0.2.1") -> Lease:
    assert subnet is None or isinstance(subnet, IPv4Network)
    assert ipv6_subnet is None or isinstance(ipv6_subnet, IPv6Network)
    return Lease(subnet, ipv6_subnet, LeaseAttrs(public_ip=IPv4Address(ip)))


def family_lease(subnet: Net) -> Lease:
    """A peer's lease holding ``subnet`` in its family (a v6-only peer's IPv4 is 0.0.0.0/0)."""
    if isinstance(subnet, IPv4Network):
        return lease_with(subnet)
    return lease_with(IPv4Network("0.0.0.0/0"), subnet)


@given(
    both_families.flatmap(lambda v: st.tuples(st.just(v), setups(v))),
    st.randoms(use_true_random=False),
)
@settings(max_examples=100)
def test_chosen_subnet_fits_and_is_free(
    drawn: tuple[int, tuple[NetworkConfig, list[Net]]], rng: random.Random
) -> None:
    version, (cfg, existing) = drawn
    leases = [family_lease(n) for n in existing]
    try:
        chosen = choose_new_subnets(cfg, leases, PreviousSubnets(), rng)
    except OutOfSubnets:
        assert free_subnets(cfg, version, existing, limit=1) == []
        return
    mine = chosen.subnet if version == 4 else chosen.ipv6_subnet
    other = chosen.ipv6_subnet if version == 4 else chosen.subnet
    assert other is None
    assert mine is not None
    assert lease_fits(family_lease(mine), cfg)
    assert not any(mine.overlaps(n) for n in existing)  # type: ignore[arg-type]


@given(
    both_families.flatmap(lambda v: st.tuples(st.just(v), setups(v))),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=100)
def test_the_choice_is_uniform_over_the_candidates(
    drawn: tuple[int, tuple[NetworkConfig, list[Net]]], seed: int
) -> None:
    """flannel picks at random among the first hundred free subnets, so that nodes starting
    together rarely race for the same one."""
    version, (cfg, existing) = drawn
    candidates = free_subnets(cfg, version, existing, limit=MAX_CANDIDATES)
    if not candidates:
        return
    chosen = choose_new_subnets(
        cfg, [family_lease(n) for n in existing], PreviousSubnets(), random.Random(seed)
    )
    assert (chosen.subnet or chosen.ipv6_subnet) == random.Random(seed).choice(candidates)


@st.composite
def dual_setups(
    draw: st.DrawFn,
) -> tuple[NetworkConfig, list[Lease], PreviousSubnets]:
    """A dual-stack network, leases of dual-stack, v4-only and v6-only peers, and previous
    subnets that may fit, overlap a lease, or lie outside the network."""
    net4, len4 = draw(networks(4))
    net6, len6 = draw(networks(6))
    cfg = check_network_config(
        NetworkConfig(
            enable_ipv6=True,
            network=net4,  # type: ignore[arg-type]
            subnet_len=len4,
            ipv6_network=net6,  # type: ignore[arg-type]
            ipv6_subnet_len=len6,
        )
    )
    no_v4 = st.sampled_from([None, IPv4Network("0.0.0.0/0")])
    leases = draw(
        st.lists(
            st.tuples(st.one_of(no_v4, subnets_in(net4)), st.one_of(st.none(), subnets_in(net6))),
            max_size=30,
        ).map(lambda pairs: [lease_with(a, b) for a, b in pairs])
    )
    anywhere4 = st.builds(lambda a: IPv4Network((a, len4), strict=False), st.integers(0, 2**32 - 1))
    anywhere6 = st.builds(
        lambda a: IPv6Network((a, len6), strict=False), st.integers(0, 2**128 - 1)
    )
    held4 = [x.subnet for x in leases if x.subnet and x.subnet.prefixlen]
    held6 = [x.ipv6_subnet for x in leases if x.ipv6_subnet]
    previous = PreviousSubnets(
        subnet=draw(st.one_of(st.none(), anywhere4, st.sampled_from(held4 or [None]))),
        ipv6_subnet=draw(st.one_of(st.none(), anywhere6, st.sampled_from(held6 or [None]))),
    )
    return cfg, leases, previous


def still_free(subnet: Net | None, held: list[Net | None], fits: bool) -> bool:
    return (
        subnet is not None
        and fits
        and not any(
            h is not None and h.prefixlen and subnet.overlaps(h)  # type: ignore[arg-type]
            for h in held
        )
    )


@given(dual_setups(), st.randoms(use_true_random=False))
@settings(max_examples=200)
def test_dual_stack_keeps_each_previous_subnet_exactly_when_it_fits_and_overlaps_no_lease(
    setup: tuple[NetworkConfig, list[Lease], PreviousSubnets], rng: random.Random
) -> None:
    cfg, leases, previous = setup
    held4: list[Net | None] = [x.subnet for x in leases]
    held6: list[Net | None] = [x.ipv6_subnet for x in leases]
    try:
        chosen = choose_new_subnets(cfg, leases, previous, rng)
    except OutOfSubnets:
        assert free_subnets(cfg, 4, [h for h in held4 if h], 1) == [] or (
            free_subnets(cfg, 6, [h for h in held6 if h], 1) == []
        )
        return
    assert chosen.subnet is not None and chosen.ipv6_subnet is not None
    assert lease_fits(lease_with(chosen.subnet, chosen.ipv6_subnet), cfg)
    keep4 = still_free(previous.subnet, held4, subnet_fits(previous.subnet, cfg))
    keep6 = still_free(previous.ipv6_subnet, held6, ipv6_subnet_fits(previous.ipv6_subnet, cfg))
    assert (chosen.subnet == previous.subnet) is keep4
    assert (chosen.ipv6_subnet == previous.ipv6_subnet) is keep6
    assert not any(h and h.prefixlen and chosen.subnet.overlaps(h) for h in held4)
    assert not any(h and chosen.ipv6_subnet.overlaps(h) for h in held6)


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


def test_previous_subnet_is_refused_when_it_overlaps_a_lease() -> None:
    """flannel refuses a previous subnet only when a lease holds exactly it; a lease that
    covers it (a peer with another SubnetLen) must not end up sharing addresses with us."""
    cfg = v4_config("10.244.0.0/16")
    previous = PreviousSubnets(subnet=IPv4Network("10.244.7.0/24"))
    for holder in ("10.244.6.0/23", "10.244.7.128/25"):
        chosen = choose_new_subnets(cfg, [lease(holder)], previous, random.Random(1))
        assert chosen.subnet is not None and not chosen.subnet.overlaps(IPv4Network(holder))


@pytest.mark.parametrize("holder", ["fd00:10:0:9::/64", "fd00:10:0:8::/63", "fd00:10:0:9::/80"])
def test_previous_ipv6_subnet_is_refused_when_a_lease_overlaps_it(holder: str) -> None:
    cfg = v6_config("fd00:10::/56", 64)
    previous = PreviousSubnets(ipv6_subnet=IPv6Network("fd00:10:0:9::/64"))
    chosen = choose_new_subnets(cfg, [lease(None, ipv6_subnet=holder)], previous, random.Random(1))
    assert chosen.ipv6_subnet is not None
    assert not chosen.ipv6_subnet.overlaps(IPv6Network(holder))


def test_v6_only_network_refuses_a_lease_holding_an_ipv4_subnet() -> None:
    cfg = v6_config("fd00:10::/56", 64)
    assert lease_fits(lease("0.0.0.0/0", ipv6_subnet="fd00:10:0:1::/64"), cfg)
    assert not lease_fits(lease("10.244.1.0/24", ipv6_subnet="fd00:10:0:1::/64"), cfg)


def test_v6_only_peers_leave_every_ipv4_subnet_free() -> None:
    """v6-only peers write 0.0.0.0/0 as their IPv4 subnet; that takes no IPv4 address."""
    cfg = v6_config("fd00:10::/56", 64, enable_ipv4=True)
    peers = [lease("0.0.0.0/0", ipv6_subnet="fd00:10:0:1::/64"), lease(None, ipv6_subnet=None)]
    previous = PreviousSubnets(subnet=IPv4Network("10.244.7.0/24"))
    chosen = choose_new_subnets(cfg, peers, previous, random.Random(1))
    assert chosen.subnet == IPv4Network("10.244.7.0/24")
    fresh = choose_new_subnets(cfg, peers, PreviousSubnets(), random.Random(1))
    assert fresh.subnet is not None and fresh.subnet.subnet_of(IPv4Network("10.244.0.0/16"))


def test_a_node_without_any_public_ip_owns_no_lease() -> None:
    nobody = LeaseAttrs()
    v6_only = Lease(None, IPv6Network("fd00::/64"), LeaseAttrs(public_ipv6=IPv6Address("::1")))
    assert find_own_lease([lease("10.244.1.0/24", ip="0.0.0.0"), v6_only], nobody) is None
    assert find_own_lease([Lease(None, IPv6Network("fd00::/64"), LeaseAttrs())], nobody) is None


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


def test_reuse_and_refusal_are_logged_per_family(caplog: pytest.LogCaptureFixture) -> None:
    cfg = v6_config("fd00:10::/56", 64, enable_ipv4=True)
    with caplog.at_level(logging.INFO):
        choose_new_subnets(
            cfg,
            [],
            PreviousSubnets(
                subnet=IPv4Network("10.244.7.0/24"), ipv6_subnet=IPv6Network("fd00:10:0:9::/64")
            ),
            random.Random(1),
        )
        choose_new_subnets(
            cfg, [], PreviousSubnets(ipv6_subnet=IPv6Network("fd99::/64")), random.Random(1)
        )
    assert caplog.messages == [
        "Found previously leased subnet (10.244.7.0/24), reusing",
        "Found previously leased ipv6 subnet (fd00:10:0:9::/64), reusing",
        "Found previously leased ipv6 subnet (fd99::/64) that is not compatible with the Etcd "
        "network config, ignoring",
    ]


def test_no_previous_subnet_is_no_news(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        choose_new_subnets(
            v6_config("fd00:10::/56", 64, enable_ipv4=True), [], PreviousSubnets(), random.Random(1)
        )
    assert caplog.messages == []


@pytest.mark.parametrize(
    ("subnet", "fits"),
    [
        ("fd00:10:0:ff::/64", True),  # SubnetMax itself
        ("fd00:10:0:1::/64", True),  # SubnetMin itself
        ("fd00:10::/64", False),  # below SubnetMin
        ("fd00:10:0:1::/80", False),  # in range, wrong length
        ("fd00:11::/64", False),  # outside the network
    ],
)
def test_ipv6_subnet_fits_bounds_and_length(subnet: str, fits: bool) -> None:
    assert ipv6_subnet_fits(IPv6Network(subnet), v6_config("fd00:10::/56", 64)) is fits


def test_an_unchecked_config_without_bounds_fits_nothing() -> None:
    half4 = NetworkConfig(network=IPv4Network("10.0.0.0/8"), subnet_max=IPv4Address("10.9.0.0"))
    assert not subnet_fits(IPv4Network("10.1.0.0/24"), half4)
    half6 = NetworkConfig(ipv6_subnet_max=IPv6Address("fd00::"), ipv6_subnet_len=64)
    assert not ipv6_subnet_fits(IPv6Network("fd00::/64"), half6)
