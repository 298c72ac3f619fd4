"""The lab underlay takes a TEST-NET slot the root namespace does not route, or fails clearly."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyflannel_lab import underlay
from pyflannel_lab.errors import LabError
from pyflannel_lab.underlay import (
    CANDIDATE_RANGES,
    MAX_HOSTS,
    SLOT_PREFIX,
    free_slot,
    gateway,
    host_address,
    host_mac,
    host_number,
)

SLOTS = [slot for r in CANDIDATE_RANGES for slot in r.subnets(new_prefix=SLOT_PREFIX)]


def test_first_slot_beside_the_machines_own_test_net() -> None:
    routes = [IPv4Network("0.0.0.0/0"), IPv4Network("192.0.2.0/24"), IPv4Network("192.0.2.2/32")]
    assert free_slot(routes) == IPv4Network("198.51.100.0/26")


def test_a_lab_already_up_pushes_the_next_one_along() -> None:
    assert free_slot([IPv4Network("198.51.100.0/26")]) == IPv4Network("198.51.100.64/26")
    assert free_slot([IPv4Network("198.51.100.0/24")]) == IPv4Network("203.0.113.0/26")


def test_none_when_everything_is_routed() -> None:
    assert free_slot([IPv4Network("198.51.100.0/23"), IPv4Network("203.0.113.0/24")]) is None
    assert free_slot([IPv4Network("198.0.0.0/8"), IPv4Network("203.0.113.128/25")]) == (
        IPv4Network("203.0.113.0/26")
    )


def test_a_slot_holding_an_address_the_machine_must_reach_is_passed_over() -> None:
    mirror = IPv4Address("203.0.113.80")  # a package proxy on TEST-NET-3, as sandboxes have
    taken = [IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/26")]
    assert free_slot(taken) == IPv4Network("203.0.113.64/26")
    assert free_slot(taken, [mirror]) == IPv4Network("203.0.113.128/26")
    assert free_slot([], [IPv4Address("198.51.100.1")]) == IPv4Network("198.51.100.64/26")


routes = st.lists(
    st.builds(
        lambda slot, prefix: slot.supernet(new_prefix=prefix),
        st.sampled_from([*SLOTS, IPv4Network("192.0.2.0/26")]),
        st.integers(min_value=8, max_value=SLOT_PREFIX),
    )
    | st.builds(
        lambda slot, n: IPv4Network(f"{slot.network_address + n}/32"),
        st.sampled_from(SLOTS),
        st.integers(min_value=0, max_value=63),
    ),
    max_size=12,
)


needed = st.lists(
    st.builds(lambda slot, n: slot.network_address + n, st.sampled_from(SLOTS), st.integers(0, 63)),
    max_size=4,
)


@given(routes, needed)
@settings(max_examples=300)
def test_the_slot_is_the_first_candidate_no_route_touches_holding_no_needed_address(
    given_routes: list[IPv4Network], given_needed: list[IPv4Address]
) -> None:
    slot = free_slot([IPv4Network("0.0.0.0/0"), *given_routes], given_needed)
    untouched = [
        s
        for s in SLOTS
        if not any(s.overlaps(r) for r in given_routes) and not any(a in s for a in given_needed)
    ]
    assert slot == (untouched[0] if untouched else None)


def test_addresses_in_a_slot() -> None:
    slot = IPv4Network("203.0.113.64/26")
    assert gateway(slot) == IPv4Address("203.0.113.65")
    assert host_address(slot, 1) == IPv4Address("203.0.113.75")
    assert host_address(slot, MAX_HOSTS) in slot
    assert host_address(slot, MAX_HOSTS) != slot.broadcast_address
    with pytest.raises(ValueError):
        host_address(slot, MAX_HOSTS + 1)


@given(st.sampled_from(SLOTS), st.integers(1, MAX_HOSTS))
def test_a_hosts_number_comes_back_from_its_address(slot: IPv4Network, n: int) -> None:
    """A grown lab numbers its next host after the highest address in use."""
    assert host_number(slot, host_address(slot, n)) == n


def test_mac_is_locally_administered_unicast_and_follows_the_address() -> None:
    mac = host_mac(IPv4Address("198.51.100.11"))
    assert mac == "02:00:c6:33:64:0b"
    first_octet = int(mac[:2], 16)
    assert first_octet & 0b10 and not first_octet & 0b01


def test_a_link_gone_between_the_look_and_the_delete_is_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel removes a veth pair in the background once the namespace of its other end is
    deleted: `ip link del` can then find no device, which is what was wanted."""
    looks = iter([True, False])
    monkeypatch.setattr(underlay, "link_exists", lambda name: next(looks))
    underlay.delete_link("plab000000o")  # `ip link del` of a name no machine has: it fails


def test_a_link_that_stays_after_a_failed_delete_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(underlay, "link_exists", lambda name: True)
    with pytest.raises(LabError, match="ip link del plab000000o"):
        underlay.delete_link("plab000000o")
