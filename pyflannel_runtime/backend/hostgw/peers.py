"""The kernel entries one peer lease calls for with host-gw (pure): a route per family."""

from __future__ import annotations

from pyflannel_runtime.backend.peers import PeerSkipped, route_via
from pyflannel_runtime.netlink.entries import Entry
from pyflannel_runtime.wire.lease import Lease


def hostgw_peer_entries(lease: Lease, ext_index: int, ipv4: bool, ipv6: bool) -> tuple[Entry, ...]:
    """One route per family: the peer's subnet via its public IP on the external interface."""
    if lease.attrs.backend_type != "host-gw":
        raise PeerSkipped(f"Ignoring non-host-gw subnet: type={lease.attrs.backend_type}")
    entries: list[Entry] = []
    if ipv4 and lease.enable_ipv4 and lease.subnet is not None:
        entries.append(route_via(lease.subnet, lease.attrs.public_ip, ext_index))
    if ipv6 and lease.enable_ipv6 and lease.ipv6_subnet and lease.attrs.public_ipv6 is not None:
        entries.append(route_via(lease.ipv6_subnet, lease.attrs.public_ipv6, ext_index))
    return tuple(entries)
