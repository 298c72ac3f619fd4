"""What `pyflannel status` and the routes module read of a udp host, against the kernel: the
route for the whole network through flannel0, found for every lease, the network's first
subnet included (a Kubernetes podCIDR can be 10.244.0.0/24; its address is the network's)."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network

import pytest

from pyflannel_runtime.backend.udp.inspection import inspect_udp
from pyflannel_runtime.netlink.netns import iproute
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import check_network_config, parse_config

pytestmark = pytest.mark.root

CONFIG = check_network_config(
    parse_config('{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}')
)
ROUTE = "route 10.244.0.0/16 dev flannel0"


def ip(netns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", netns, *args], check=True, capture_output=True)


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"pudpi-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def udp_host(netns: str, subnet: str) -> Lease:
    """flannel0 as the udp backend leaves it: the lease's address/32, up, the network's route."""
    own = Lease(IPv4Network(subnet), None, LeaseAttrs(IPv4Address("192.0.2.10")))
    assert own.subnet is not None
    ip(netns, "tuntap", "add", "flannel0", "mode", "tun")
    ip(netns, "addr", "add", f"{own.subnet.network_address}/32", "dev", "flannel0")
    ip(netns, "link", "set", "flannel0", "up")
    ip(netns, "route", "add", "10.244.0.0/16", "dev", "flannel0", "scope", "global")
    return own


@pytest.mark.parametrize("subnet", ["10.244.0.0/24", "10.244.7.0/24"])
def test_the_network_route_is_found_whichever_subnet_the_host_holds(
    netns: str, subnet: str
) -> None:
    own = udp_host(netns, subnet)
    with iproute(netns) as ipr:
        found = inspect_udp(ipr, CONFIG, own, [own])
    assert ROUTE in found.checked
    assert f"{ROUTE} is missing" not in found.problems

    ip(netns, "route", "del", "10.244.0.0/16", "dev", "flannel0")
    ip(netns, "route", "add", "10.244.0.0/17", "dev", "flannel0")  # not the network's route
    with iproute(netns) as ipr:
        found = inspect_udp(ipr, CONFIG, own, [own])
    assert f"{ROUTE} is missing" in found.problems
