"""The kernel entries one peer lease calls for, per backend (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.netlink.entries import Entry, Fdb, IPAddress, IPNetwork, Neigh, Route
from pyflannel_runtime.wire.lease import Lease, LeaseError
from pyflannel_runtime.wire.vxlan_data import vtep_mac


class PeerSkipped(PyflannelError):
    """The lease is not one this backend programs; str(err) says why (for the log)."""


@dataclass(frozen=True)
class VxlanDevices:
    """Indexes of flannel.<VNI> and flannel-v6.<VNI>; None when that family is off."""

    v4: int | None
    v6: int | None


# The kernel files IPv6 routes added without a metric under 1024; naming it keeps the key
# of what we write equal to what a dump returns.
IPV6_DEFAULT_METRIC = 1024


def _route(dst: IPNetwork, gateway: IPAddress, oif: int, onlink: bool = False) -> Route:
    metric = IPV6_DEFAULT_METRIC if dst.version == 6 else 0
    return Route(dst, gateway, oif, onlink=onlink, priority=metric)


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
            entries.append(_route(subnet, public_ip, direct[public_ip]))
            continue
        mac = _vtep_mac(raw)
        gateway = subnet.network_address
        entries += [
            Neigh(dev, gateway, mac),
            Fdb(dev, mac, public_ip),
            _route(subnet, gateway, dev, onlink=True),
        ]
    return tuple(entries)


def hostgw_peer_entries(lease: Lease, ext_index: int, ipv4: bool, ipv6: bool) -> tuple[Entry, ...]:
    """One route per family: the peer's subnet via its public IP on the external interface."""
    if lease.attrs.backend_type != "host-gw":
        raise PeerSkipped(f"Ignoring non-host-gw subnet: type={lease.attrs.backend_type}")
    entries: list[Entry] = []
    if ipv4 and lease.enable_ipv4 and lease.subnet is not None:
        entries.append(_route(lease.subnet, lease.attrs.public_ip, ext_index))
    if ipv6 and lease.enable_ipv6 and lease.ipv6_subnet and lease.attrs.public_ipv6 is not None:
        entries.append(_route(lease.ipv6_subnet, lease.attrs.public_ipv6, ext_index))
    return tuple(entries)


def udp_peer_route(lease: Lease) -> tuple[IPv4Network, IPv4Address] | None:
    """The udp forwarder's route for a peer: its IPv4 subnet to its public IP (the datagrams
    go to the configured port there); None when the forwarder carries nothing for it."""
    if lease.subnet is None or not lease.enable_ipv4:
        return None
    return lease.subnet, lease.attrs.public_ip
