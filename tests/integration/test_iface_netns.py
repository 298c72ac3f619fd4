"""Interface selection against a real kernel: a network namespace with veth links
(docs/compatibility.md, "Interface selection")."""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv6Address

import pytest

from pyflannel_runtime.netdev.kernel import select_external_interface
from pyflannel_runtime.netdev.types import InterfaceError

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces"),
]


def ip(ns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "-n", ns, *args], check=True, capture_output=True, text=True
    ).stdout


SETUP = [
    "link set lo up",
    "link add eth0 type veth peer name peer0",
    "link add eth1 type veth peer name peer1",
    "link set eth0 mtu 1400",
    "link set peer0 mtu 1400",
    *(f"link set {dev} up" for dev in ("eth0", "peer0", "eth1", "peer1")),
    "addr add 192.0.2.10/24 dev eth0",
    "addr add 192.0.2.11/24 dev eth0",  # secondary
    # v6 on eth0: the permanent global one must win over later dynamic/deprecated/link-local ones
    "addr add 2001:db8:1::10/64 dev eth0 nodad",
    "addr add 2001:db8:1::1/64 dev eth0 nodad preferred_lft 0",
    "addr add 2001:db8:1::99/64 dev eth0 nodad valid_lft 3600 preferred_lft 3600",
    "addr add fe80::10/64 dev eth0 nodad",
    "addr add 198.51.100.10/24 dev eth1",
    "addr add 2001:db8:2::10/64 dev eth1 nodad",
    "route add default via 192.0.2.1 dev eth0",
    "-6 route add default via 2001:db8:2::1 dev eth1",
]


@pytest.fixture(scope="module")
def ns() -> Iterator[str]:
    name = f"pif-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for command in SETUP:
            ip(name, *command.split())
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def ifindex(ns: str, dev: str) -> int:
    index: int = json.loads(ip(ns, "-j", "link", "show", "dev", dev))[0]["ifindex"]
    return index


def select(ns: str, **kwargs: object) -> object:
    args: dict[str, object] = {
        "ifaces": [],
        "iface_regexes": [],
        "can_reach": "",
        "public_ip": "",
        "public_ipv6": "",
        "ipv4": True,
        "ipv6": False,
    }
    args.update(kwargs)
    return select_external_interface(**args, netns=ns)  # type: ignore[arg-type]


def error_of(ns: str, **kwargs: object) -> str:
    with pytest.raises(InterfaceError) as info:
        select(ns, **kwargs)
    return str(info.value)


def test_default_route_interface_with_kernel_mtu(ns: str) -> None:
    ext = select(ns)
    assert ext == select_external_interface([], [], "", "", "", True, False, netns=ns)
    assert (ext.name, ext.index, ext.mtu) == ("eth0", ifindex(ns, "eth0"), 1400)  # type: ignore[attr-defined]
    # the primary address, not the secondary
    assert (ext.iface_addr, ext.ext_addr) == (IPv4Address("192.0.2.10"),) * 2  # type: ignore[attr-defined]


def test_mtu_is_read_at_selection_time(ns: str) -> None:
    ip(ns, "link", "set", "eth0", "mtu", "1280")
    try:
        assert select(ns).mtu == 1280  # type: ignore[attr-defined]
    finally:
        ip(ns, "link", "set", "eth0", "mtu", "1400")


def test_v6_address_preference_from_kernel_flags(ns: str) -> None:
    ext = select(ns, ifaces=["eth0"], ipv4=False, ipv6=True)
    assert (ext.iface_addr, ext.iface_v6_addr, ext.ext_v6_addr) == (  # type: ignore[attr-defined]
        None,
        IPv6Address("2001:db8:1::10"),
        IPv6Address("2001:db8:1::10"),
    )


def test_v6_default_route(ns: str) -> None:
    ext = select(ns, ipv4=False, ipv6=True)
    assert (ext.name, ext.iface_v6_addr) == ("eth1", IPv6Address("2001:db8:2::10"))  # type: ignore[attr-defined]


def test_iface_by_name(ns: str) -> None:
    ext = select(ns, ifaces=["eth1"])
    assert (ext.name, ext.iface_addr, ext.mtu) == ("eth1", IPv4Address("198.51.100.10"), 1500)  # type: ignore[attr-defined]


def test_iface_by_ip_keeps_that_address(ns: str) -> None:
    ext = select(ns, ifaces=["bond7", "192.0.2.11"])
    assert (ext.name, ext.iface_addr) == ("eth0", IPv4Address("192.0.2.11"))  # type: ignore[attr-defined]


def test_regex_matches_ip_before_name(ns: str) -> None:
    ext = select(ns, iface_regexes=[r"eth0|^198\.51\.100\."])
    assert (ext.name, ext.iface_addr) == ("eth1", IPv4Address("198.51.100.10"))  # type: ignore[attr-defined]


def test_regex_failure_lists_kernel_interfaces(ns: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    assert error_of(ns, iface_regexes=["^bond"]) == (
        "Failed to find interface to use that matches the interfaces and/or regexes provided"
    )
    v4 = {"eth0": "192.0.2.10 192.0.2.11", "eth1": "198.51.100.10"}
    links = sorted(json.loads(ip(ns, "-j", "link", "show")), key=lambda link: link["ifindex"])
    listing = ", ".join(f"{link['ifname']}:[{v4.get(link['ifname'], '')}]" for link in links)
    assert caplog.records[-1].getMessage() == (
        "Could not find valid interface matching ^bond: could not match pattern ^bond to any "
        f"of the available network interfaces ({listing})"
    )


@pytest.mark.parametrize(
    ("target", "name", "addr"),
    [("198.51.100.77", "eth1", "198.51.100.10"), ("203.0.113.5", "eth0", "192.0.2.10")],
)
def test_can_reach(ns: str, target: str, name: str, addr: str) -> None:
    ext = select(ns, can_reach=target)
    assert (ext.name, ext.iface_addr) == (name, IPv4Address(addr))  # type: ignore[attr-defined]


def test_can_reach_v6_then_unreachable(ns: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pyflannel.iface")
    ext = select(ns, can_reach="2001:db8:99::1", ipv4=False, ipv6=True)
    assert (ext.name, ext.iface_v6_addr) == ("eth1", IPv6Address("2001:db8:2::10"))  # type: ignore[attr-defined]
    ip(ns, "-6", "route", "del", "default")
    try:
        error_of(ns, can_reach="2001:db8:99::1", ipv4=False, ipv6=True)
    finally:
        ip(ns, "-6", "route", "add", "default", "via", "2001:db8:2::1", "dev", "eth1")
    assert caplog.records[-1].getMessage() == (
        "Could not find valid interface matching ifaceCanReach: 2001:db8:99::1: "
        "failed to get ifcanreach based interface: "
        "couldn't lookup route to 2001:db8:99::1: network is unreachable"
    )


def test_public_ip_that_is_not_local(ns: str) -> None:
    assert error_of(ns, public_ip="203.0.113.9") == (
        "Failed to find any valid interface to use: "
        "error looking up interface 203.0.113.9: no interface with given IP found"
    )


def test_public_ip_is_used_as_interface(ns: str) -> None:
    ext = select(ns, public_ip="198.51.100.10")
    assert (ext.name, ext.iface_addr, ext.ext_addr) == (  # type: ignore[attr-defined]
        "eth1",
        IPv4Address("198.51.100.10"),
        IPv4Address("198.51.100.10"),
    )


def test_public_ip_with_iface_is_only_the_external_address(ns: str) -> None:
    ext = select(ns, ifaces=["eth0"], public_ip="203.0.113.9")
    assert (ext.iface_addr, ext.ext_addr) == (  # type: ignore[attr-defined]
        IPv4Address("192.0.2.10"),
        IPv4Address("203.0.113.9"),
    )


def test_dual_stack_default_routes_on_different_interfaces(ns: str) -> None:
    assert error_of(ns, ipv6=True) == (
        "Failed to find any valid interface to use: "
        "v6 default route interface eth1 must be the same with v4 default route interface eth0"
    )


def test_dual_stack_public_ips_on_different_interfaces(ns: str) -> None:
    assert error_of(ns, public_ip="192.0.2.10", public_ipv6="2001:db8:2::10", ipv6=True) == (
        "Failed to find any valid interface to use: "
        "v6 interface eth1 must be the same with v4 interface eth0"
    )


def test_dual_stack_by_name(ns: str) -> None:
    ext = select(ns, ifaces=["eth0"], ipv6=True)
    assert (ext.iface_addr, ext.iface_v6_addr) == (  # type: ignore[attr-defined]
        IPv4Address("192.0.2.10"),
        IPv6Address("2001:db8:1::10"),
    )
    assert (ext.ext_addr, ext.ext_v6_addr) == (ext.iface_addr, ext.iface_v6_addr)  # type: ignore[attr-defined]


def test_missing_namespace_is_not_created() -> None:
    name = f"pif-{secrets.token_hex(4)}"
    with pytest.raises(InterfaceError, match=f"cannot open network namespace {name}"):
        select_external_interface([], [], "", "", "", True, False, netns=name)
    assert not os.path.exists(f"/run/netns/{name}")
