"""The kernel entries one peer lease calls for on the vxlan devices (pure): a neighbour, an FDB
entry and an onlink route per family, or with DirectRouting a plain route."""

from __future__ import annotations

from collections.abc import Mapping

from pyflannel_runtime.backend.peers import PeerSkipped, VxlanDevices, route_via
from pyflannel_runtime.netlink.entries import Entry, Fdb, IPAddress, IPNetwork, Neigh
from pyflannel_runtime.wire.lease import Lease, LeaseError
from pyflannel_runtime.wire.vxlan_data import vtep_mac


def _vtep_mac(raw: str | None) -> str:
    try:
        return vtep_mac(raw)
    except LeaseError as err:
        raise PeerSkipped(f"error decoding subnet lease JSON: {err}") from None


def _describe(lease: Lease) -> str:
    return f"v4Subnet={lease.subnet} v6Subnet={lease.ipv6_subnet}"


def vxlan_peer_entries(
    lease: Lease,
    devices: VxlanDevices,
    direct_oifs: Mapping[IPAddress, int] | None = None,
) -> tuple[Entry, ...]:
    """Neighbour, FDB and onlink route per family, in that order; with DirectRouting, a plain
    route via the peer's public IP when `direct_oifs` says it is on our L2 segment."""
    if lease.attrs.backend_type != "vxlan":
        raise PeerSkipped(f"ignoring non-vxlan {_describe(lease)}: type={lease.attrs.backend_type}")
    direct = direct_oifs or {}
    entries: list[Entry] = []
    families: list[tuple[int | None, bool, IPNetwork | None, IPAddress | None, str | None]] = [
        (
            devices.v4,
            lease.enable_ipv4,
            lease.subnet,
            lease.attrs.public_ip,
            lease.attrs.backend_data,
        ),
        (
            devices.v6,
            lease.enable_ipv6,
            lease.ipv6_subnet,
            lease.attrs.public_ipv6,
            lease.attrs.backend_v6_data,
        ),
    ]
    for dev, enabled, subnet, public_ip, raw in families:
        if dev is None or not enabled or subnet is None or public_ip is None:
            continue
        if public_ip in direct:
            entries.append(route_via(subnet, public_ip, direct[public_ip]))
            continue
        mac = _vtep_mac(raw)
        gateway = subnet.network_address
        entries += [
            Neigh(dev, gateway, mac),
            Fdb(dev, mac, public_ip),
            route_via(subnet, gateway, dev, onlink=True),
        ]
    return tuple(entries)
