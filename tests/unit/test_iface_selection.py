"""flannel's interface-selection order, messages and log lines on a fake kernel view
(docs/compatibility.md, "Interface selection")."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from pyflannel_runtime.netdev.candidates import IFA_F_PERMANENT
from pyflannel_runtime.netdev.selection import select_on_view
from pyflannel_runtime.netdev.types import (
    ExternalInterface,
    IfAddr,
    InterfaceError,
    IPAddress,
    IpStack,
    Link,
    NetViewError,
    RouteHop,
)

V4, V6, DUAL = IpStack.V4, IpStack.V6, IpStack.DUAL


def _link(name: str, index: int, *addrs: str, mtu: int = 1500) -> Link:
    return Link(name, index, mtu, tuple(IfAddr(ip_address(a), IFA_F_PERMANENT) for a in addrs))


@dataclass
class FakeView:
    link_list: list[Link]
    default_oifs: dict[int, int] = field(default_factory=dict)
    routes: dict[IPAddress, RouteHop] = field(default_factory=dict)
    route_error: str | None = None

    def links(self) -> Sequence[Link]:
        return self.link_list

    def default_route_oif(self, version: int) -> int | None:
        return self.default_oifs.get(version)

    def route_get(self, ip: IPAddress) -> RouteHop | None:
        if self.route_error:
            raise NetViewError(self.route_error)
        return self.routes.get(ip)


def host(
    default_oifs: dict[int, int] | None = None,
    routes: dict[IPAddress, RouteHop] | None = None,
    route_error: str | None = None,
) -> FakeView:
    links = [
        _link("lo", 1, "127.0.0.1", "::1", mtu=65536),
        _link("eth0", 2, "10.0.0.5", "10.0.0.6", "2001:db8::5", "fe80::5"),
        _link("eth1", 3, "192.0.2.10", "2001:db8:1::10", mtu=9000),
        _link("eth2", 4),
    ]
    return FakeView(links, default_oifs or {}, routes or {}, route_error)


def select(
    view: FakeView,
    ifaces: Sequence[str] = (),
    regexes: Sequence[str] = (),
    can_reach: str = "",
    public_ip: str = "",
    public_ipv6: str = "",
    stack: IpStack = V4,
) -> ExternalInterface:
    return select_on_view(view, ifaces, regexes, can_reach, public_ip, public_ipv6, stack)


def error_of(view: FakeView, **kwargs: object) -> str:
    with pytest.raises(InterfaceError) as info:
        select(view, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


# ---- default route ---------------------------------------------------------------------------


def test_default_route_v4(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(default_oifs={4: 3}))
    assert ext == ExternalInterface(
        name="eth1",
        index=3,
        mtu=9000,
        iface_addr=IPv4Address("192.0.2.10"),
        iface_v6_addr=None,
        ext_addr=IPv4Address("192.0.2.10"),
        ext_v6_addr=None,
    )
    assert [r.getMessage() for r in caplog.records] == [
        "Determining IP address of default interface",
        "Using interface with name eth1 and address 192.0.2.10",
        "Defaulting external address to interface address (192.0.2.10)",
    ]
    assert {r.name for r in caplog.records} == {"pyflannel.iface"}


def test_default_route_v6_only() -> None:
    ext = select(host(default_oifs={6: 2}), stack=V6)
    assert (ext.name, ext.iface_addr, ext.iface_v6_addr) == (
        "eth0",
        None,
        IPv6Address("2001:db8::5"),
    )
    assert (ext.ext_addr, ext.ext_v6_addr) == (None, IPv6Address("2001:db8::5"))


def test_default_route_dual_stack_same_interface() -> None:
    ext = select(host(default_oifs={4: 2, 6: 2}), stack=DUAL)
    assert (ext.iface_addr, ext.iface_v6_addr) == (
        IPv4Address("10.0.0.5"),
        IPv6Address("2001:db8::5"),
    )
    assert (ext.ext_addr, ext.ext_v6_addr) == (ext.iface_addr, ext.iface_v6_addr)


@pytest.mark.parametrize(
    ("oifs", "stack", "message"),
    [
        ({}, V4, "failed to get default interface: unable to find default route"),
        ({4: 0}, V4,
         "failed to get default interface: found default route but could not determine interface"),
        ({4: 2}, V6, "failed to get default v6 interface: unable to find default v6 route"),
        ({6: 0}, V6, "failed to get default v6 interface: "
         "found default v6 route but could not determine interface"),
        ({4: 77}, V4, "failed to get default interface: route ip+net: no such network interface"),
        ({4: 2}, DUAL, "failed to get default v6 interface: unable to find default v6 route"),
        ({4: 2, 6: 3}, DUAL,
         "v6 default route interface eth1 must be the same with v4 default route interface eth0"),
        ({4: 4}, V4, "failed to find IPv4 address for interface eth2"),
        ({4: 1}, V4, "failed to find IPv4 address for interface lo"),
        ({6: 4}, V6, "failed to find IPv6 address for interface eth2"),
    ],
)  # fmt: skip
def test_default_route_errors(oifs: dict[int, int], stack: IpStack, message: str) -> None:
    assert error_of(host(default_oifs=oifs), stack=stack) == (
        f"Failed to find any valid interface to use: {message}"
    )


# ---- --public-ip without --iface ---------------------------------------------------------------


def test_public_ip_is_used_as_interface_ip(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(default_oifs={4: 3}), public_ip="10.0.0.6")
    assert (ext.name, ext.iface_addr, ext.ext_addr) == (
        "eth0",
        IPv4Address("10.0.0.6"),
        IPv4Address("10.0.0.6"),
    )
    assert [r.getMessage() for r in caplog.records] == [
        "Searching for interface using 10.0.0.6",
        "Using interface with name eth0 and address 10.0.0.6",
        "Using 10.0.0.6 as external address",
    ]


def test_public_ip_must_be_local() -> None:
    assert error_of(host(default_oifs={4: 2}), public_ip="203.0.113.9") == (
        "Failed to find any valid interface to use: "
        "error looking up interface 203.0.113.9: no interface with given IP found"
    )


def test_public_ipv6_alone_is_used_as_interface_ip() -> None:
    ext = select(host(), public_ipv6="2001:db8:1::10", stack=V6)
    assert (ext.name, ext.iface_v6_addr, ext.ext_v6_addr) == (
        "eth1",
        IPv6Address("2001:db8:1::10"),
        IPv6Address("2001:db8:1::10"),
    )


def test_public_ipv6_must_be_local_in_v6_stack() -> None:
    assert error_of(host(), public_ipv6="2001:db8:9::1", stack=V6) == (
        "Failed to find any valid interface to use: "
        "error looking up v6 interface 2001:db8:9::1: no interface with given IPv6 found"
    )


def test_dual_stack_public_ips_on_different_interfaces() -> None:
    assert error_of(host(), public_ip="10.0.0.5", public_ipv6="2001:db8:1::10", stack=DUAL) == (
        "Failed to find any valid interface to use: "
        "v6 interface eth1 must be the same with v4 interface eth0"
    )


def test_dual_stack_public_ips_on_one_interface() -> None:
    ext = select(host(), public_ip="10.0.0.6", public_ipv6="2001:db8::5", stack=DUAL)
    assert (ext.name, ext.iface_addr, ext.iface_v6_addr) == (
        "eth0",
        IPv4Address("10.0.0.6"),
        IPv6Address("2001:db8::5"),
    )


def test_dual_stack_v4_iface_ip_looks_up_v6_address_by_preference() -> None:
    ext = select(host(), ifaces=["192.0.2.10"], stack=DUAL)
    assert (ext.iface_addr, ext.iface_v6_addr) == (
        IPv4Address("192.0.2.10"),
        IPv6Address("2001:db8:1::10"),
    )


def test_dual_stack_v6_iface_ip_without_public_ipv6() -> None:
    ext = select(host(), ifaces=["2001:db8:1::10"], stack=DUAL)
    assert (ext.name, ext.iface_addr, ext.iface_v6_addr) == (
        "eth1",
        IPv4Address("192.0.2.10"),
        IPv6Address("2001:db8:1::10"),
    )


# ---- --iface, --iface-regex, --iface-can-reach order -----------------------------------------


def test_iface_by_name_picks_preferred_address() -> None:
    ext = select(host(), ifaces=["eth0"])
    assert (ext.name, ext.index, ext.iface_addr) == ("eth0", 2, IPv4Address("10.0.0.5"))


def test_iface_by_ip_keeps_the_given_address() -> None:
    ext = select(host(), ifaces=["10.0.0.6"])
    assert (ext.name, ext.iface_addr) == ("eth0", IPv4Address("10.0.0.6"))


def test_iface_values_are_tried_in_order(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(), ifaces=["bond0", "203.0.113.1", "eth1", "eth0"])
    assert ext.name == "eth1"
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:3] == [
        "Could not find valid interface matching bond0: "
        "error looking up interface bond0: route ip+net: no such network interface",
        "Searching for interface using 203.0.113.1",
        "Could not find valid interface matching 203.0.113.1: "
        "error looking up interface 203.0.113.1: no interface with given IP found",
    ]


def test_regexes_come_after_all_ifaces() -> None:
    ext = select(host(default_oifs={4: 2}), ifaces=["bond0"], regexes=["^eth1$"])
    assert ext.name == "eth1"


def test_regex_ip_match_beats_earlier_name_match() -> None:
    ext = select(host(), regexes=[r"eth0|^192\.0\.2\."])
    assert (ext.name, ext.iface_addr) == ("eth1", IPv4Address("192.0.2.10"))


def test_regex_failure_message_lists_interfaces(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    message = error_of(host(), regexes=["^bond"])
    assert message == (
        "Failed to find interface to use that matches the interfaces and/or regexes provided"
    )
    assert caplog.records[-1].getMessage() == (
        "Could not find valid interface matching ^bond: could not match pattern ^bond to any of "
        "the available network interfaces (lo:[], eth0:[10.0.0.5 10.0.0.6], eth1:[192.0.2.10], "
        "eth2:[])"
    )


def test_bad_regex_is_reported_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(), regexes=["eth(", "eth1"])
    assert ext.name == "eth1"
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(
            "Could not find valid interface matching eth(: "
            "could not compile the IP address regex 'eth(': "
        )
    )


def test_can_reach_uses_route_interface_and_source(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    route = RouteHop(oif=2, src=IPv4Address("10.0.0.6"))
    view = host(routes={IPv4Address("198.51.100.1"): route})
    ext = select(view, ifaces=["bond0"], regexes=["^bond"], can_reach="198.51.100.1")
    assert (ext.name, ext.iface_addr, ext.ext_addr) == (
        "eth0",
        IPv4Address("10.0.0.6"),
        IPv4Address("10.0.0.6"),
    )
    assert "Determining interface to use based on given ifcanreach: 198.51.100.1" in [
        r.getMessage() for r in caplog.records
    ]


def test_can_reach_without_source_falls_back_to_preferred_address() -> None:
    view = host(routes={IPv4Address("198.51.100.1"): RouteHop(oif=2, src=None)})
    assert select(view, can_reach="198.51.100.1").iface_addr == IPv4Address("10.0.0.5")


@pytest.mark.parametrize(
    ("view", "target", "detail"),
    [
        (host(route_error="network is unreachable"), "198.51.100.1",
         "couldn't lookup route to 198.51.100.1: network is unreachable"),
        (host(), "198.51.100.1", "no interface with given IP found"),
        (host(routes={IPv4Address("198.51.100.1"): RouteHop(oif=99, src=None)}), "198.51.100.1",
         "couldn't lookup interface: route ip+net: no such network interface"),
        (host(), "not-an-ip", "couldn't lookup route to <nil>: invalid argument"),
    ],
)  # fmt: skip
def test_can_reach_errors(
    view: FakeView, target: str, detail: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    assert error_of(view, can_reach=target) == (
        "Failed to find interface to use that matches the interfaces and/or regexes provided"
    )
    assert caplog.records[-1].getMessage() == (
        f"Could not find valid interface matching ifaceCanReach: {target}: "
        f"failed to get ifcanreach based interface: {detail}"
    )


# ---- MTU and external address -----------------------------------------------------------------


def test_zero_mtu_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    view = FakeView([_link("eth0", 2, "10.0.0.5", mtu=0)])
    error_of(view, ifaces=["eth0"])
    assert caplog.records[-1].getMessage() == (
        "Could not find valid interface matching eth0: "
        "failed to determine MTU for 10.0.0.5 interface"
    )


def test_public_ip_with_iface_sets_external_address(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(), ifaces=["eth0"], public_ip="203.0.113.7")
    assert (ext.iface_addr, ext.ext_addr) == (IPv4Address("10.0.0.5"), IPv4Address("203.0.113.7"))
    assert caplog.records[-1].getMessage() == "Using 203.0.113.7 as external address"


@pytest.mark.parametrize(
    ("public_ip", "public_ipv6", "message"),
    [
        ("nope", "", "invalid public IP address: nope"),
        ("2001:db8::1", "", "invalid public IP address: 2001:db8::1"),
        ("", "10.0.0.1", "invalid public IPv6 address: 10.0.0.1"),
        ("", "zz::1", "invalid public IPv6 address: zz::1"),
    ],
)
def test_invalid_public_ip(
    public_ip: str, public_ipv6: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    error_of(host(), ifaces=["eth0"], public_ip=public_ip, public_ipv6=public_ipv6, stack=DUAL)
    assert (
        caplog.records[-1].getMessage()
        == f"Could not find valid interface matching eth0: {message}"
    )


def test_dual_stack_external_addresses(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(host(), ifaces=["eth0"], public_ipv6="2001:db8::5", stack=DUAL)
    assert (ext.ext_addr, ext.ext_v6_addr) == (IPv4Address("10.0.0.5"), IPv6Address("2001:db8::5"))
    assert [r.getMessage() for r in caplog.records][-4:] == [
        "Using interface with name eth0 and address 10.0.0.5",
        "Using interface with name eth0 and v6 address 2001:db8::5",
        "Defaulting external address to interface address (10.0.0.5)",
        "Using 2001:db8::5 as external address",
    ]


def test_no_stack_is_rejected() -> None:
    with pytest.raises(InterfaceError, match=r"^none defined stack$"):
        IpStack.from_flags(False, False)
