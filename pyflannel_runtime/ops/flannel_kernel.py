"""flannel's part of a host's kernel, as the diagnostics bundle holds it: its devices (each
backend's, ``flannel.<VNI>``, ``flannel-v6.<VNI>``, ``flannel0``, and the CNI bridge), their
addresses, neighbours and FDB entries, the routes through them, and the routes to the pod
network through any device (host-gw's go through the external interface).

Read with pyroute2 in this network namespace, as ``ops.verify`` reads it; each netlink message
becomes a plain JSON object: its header fields, then its attributes by name (nested ones
likewise), without the kernel's per-protocol settings and counters of IPv6 and the attributes
pyroute2 does not name.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Any

from pyflannel_runtime.backend_spec.specs import flannel_devices

IPNetwork = IPv4Network | IPv6Network
DEFAULT_BRIDGE = "cni0"
# Left out of a device: the per-protocol settings and the 32-bit copy of its counters.
_LEFT_OUT = frozenset({"UNKNOWN", "IFLA_AF_SPEC", "IFLA_MAP", "IFLA_STATS"})
_HEADER = frozenset({"header", "event", "__pad", "attrs"})
_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def plain(message: Mapping[str, Any]) -> dict[str, Any]:
    """A netlink message as pyroute2's ``dump()`` gives it, as a plain JSON object."""
    found = {key: _value(value) for key, value in message.items() if key not in _HEADER}
    for name, value in message.get("attrs", ()):
        if name not in _LEFT_OUT:
            found[name] = _value(value)
    return found


def _value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return plain(value) if "attrs" in value else {k: _value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_value(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _attr(message: Mapping[str, Any], name: str) -> Any:
    return next((value for key, value in message.get("attrs", ()) if key == name), None)


def route_to_network(route: Mapping[str, Any], networks: Sequence[IPNetwork]) -> bool:
    """The route's destination lies in one of the networks (a default route does not)."""
    dst = _attr(route, "RTA_DST")
    if dst is None or not route.get("dst_len"):
        return False
    destination = ip_network(f"{dst}/{route['dst_len']}", strict=False)
    return any(_inside(destination, network) for network in networks)


def _inside(subnet: IPNetwork, network: IPNetwork) -> bool:
    if isinstance(subnet, IPv4Network) and isinstance(network, IPv4Network):
        return subnet.subnet_of(network)
    if isinstance(subnet, IPv6Network) and isinstance(network, IPv6Network):
        return subnet.subnet_of(network)
    return False


def flannel_kernel(
    networks: Sequence[IPNetwork], bridges: Iterable[str] = (DEFAULT_BRIDGE,)
) -> dict[str, list[dict[str, Any]]]:
    """flannel's devices, addresses, routes, neighbours and FDB entries, by kind (OSError when
    netlink cannot be read)."""
    from pyflannel_runtime.netlink.netns import iproute

    with iproute(None) as ipr:
        links = [link.dump() for link in ipr.get_links()]
        names = {link["index"]: _attr(link, "IFLA_IFNAME") for link in links}
        wanted = set(flannel_devices(names.values())) | set(bridges)
        ours = {index for index, name in names.items() if name in wanted}
        addresses = [a.dump() for a in ipr.get_addr() if a["index"] in ours]
        routes = [
            route
            for family in _FAMILIES
            for route in (r.dump() for r in ipr.get_routes(family=family))
            if _attr(route, "RTA_OIF") in ours or route_to_network(route, networks)
        ]
        neighbours = [
            n.dump()
            for family in _FAMILIES
            for n in ipr.get_neighbours(family=family)
            if n["ifindex"] in ours
        ]
        fdb = [
            f.dump()
            for f in ipr.get_neighbours(family=socket.AF_BRIDGE)
            if f["ifindex"] in ours or f.get_attr("NDA_MASTER") in ours
        ]
    return {
        "devices": [plain(link) for link in links if link["index"] in ours],
        "addresses": [plain(a) for a in addresses],
        "routes": [plain(r) for r in routes],
        "neighbours": [plain(n) for n in neighbours],
        "fdb": [plain(f) for f in fdb],
    }
