"""Following the external address: the address notifications read from the wire, whether the
external interface moved, and the lease's attributes at the new address."""

from __future__ import annotations

import struct
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.agent.address_watch import describe, moved, moved_attrs
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.netlink.monitor import (
    RTM_DELADDR,
    RTM_NEWADDR,
    RTM_NEWLINK,
    AddressChange,
    address_changes,
)
from pyflannel_runtime.wire.lease import LeaseAttrs

NLMSGHDR = struct.Struct("=IHHII")
IFADDRMSG = struct.Struct("=BBBBI")


def message(kind: int, family: int, scope: int, index: int, attrs: bytes = b"") -> bytes:
    body = IFADDRMSG.pack(family, 24, 0, scope, index) + attrs
    length = NLMSGHDR.size + len(body)
    padded = body + b"\0" * (-length % 4)
    return NLMSGHDR.pack(length, kind, 0, 0, 0) + padded


changes = st.lists(
    st.tuples(
        st.sampled_from([RTM_NEWADDR, RTM_DELADDR]),
        st.sampled_from([2, 10]),
        st.sampled_from([0, 200, 253, 254]),
        st.integers(1, 2**31 - 1),
        st.binary(max_size=13),
    ),
    max_size=8,
)


@given(changes)
def test_every_address_notification_in_a_datagram_is_read(
    sent: list[tuple[int, int, int, int, bytes]],
) -> None:
    datagram = b"".join(message(*fields) for fields in sent)
    # Other notifications in the same datagram are left alone.
    datagram += NLMSGHDR.pack(NLMSGHDR.size + 16, RTM_NEWLINK, 0, 0, 0) + b"\0" * 16
    assert address_changes(datagram) == [
        AddressChange(kind == RTM_DELADDR, index, scope) for kind, _, scope, index, _ in sent
    ]


def test_a_truncated_datagram_stops_where_it_breaks() -> None:
    whole = message(RTM_DELADDR, 2, 0, 7)
    assert address_changes(whole + whole[:10]) == [AddressChange(True, 7, 0)]


@pytest.mark.parametrize(
    ("scope", "routable"), [(0, True), (200, True), (253, False), (254, False)]
)
def test_link_and_host_addresses_route_nothing(scope: int, routable: bool) -> None:
    assert AddressChange(True, 1, scope).routable is routable


def ext(**changed: object) -> ExternalInterface:
    base: dict[str, object] = {
        "name": "eth0",
        "index": 2,
        "mtu": 1500,
        "iface_addr": IPv4Address("198.51.100.13"),
        "iface_v6_addr": None,
        "ext_addr": IPv4Address("198.51.100.13"),
        "ext_v6_addr": None,
    }
    return ExternalInterface(**{**base, **changed})  # type: ignore[arg-type]


def test_only_a_new_address_or_interface_is_a_move() -> None:
    here = ext()
    assert not moved(here, ext(mtu=9000))
    assert moved(here, ext(iface_addr=IPv4Address("198.51.100.20")))
    assert moved(here, ext(ext_addr=IPv4Address("198.51.100.20")))
    assert moved(here, ext(index=3))
    assert moved(here, ext(ext_v6_addr=IPv6Address("2001:db8::13")))


def test_the_lease_keeps_its_backend_data_at_the_new_address() -> None:
    data = '{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:00"}'
    attrs = LeaseAttrs(
        public_ip=IPv4Address("198.51.100.13"), backend_type="vxlan", backend_data=data
    )
    new = ext(ext_addr=IPv4Address("198.51.100.20"), ext_v6_addr=IPv6Address("2001:db8::20"))
    assert moved_attrs(attrs, new) == LeaseAttrs(
        public_ip=IPv4Address("198.51.100.20"), backend_type="vxlan", backend_data=data
    )
    dual = LeaseAttrs(
        public_ip=IPv4Address("198.51.100.13"), public_ipv6=IPv6Address("2001:db8::13")
    )
    assert moved_attrs(dual, new).public_ipv6 == IPv6Address("2001:db8::20")
    assert describe(ext(), new) == (
        "the external address moved from 198.51.100.13 (eth0) to 198.51.100.20, 2001:db8::20 (eth0)"
    )
