"""A peer lease's route in the udp forwarder's own table (pure): udp programs no kernel entry
per peer."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

from pyflannel_runtime.wire.lease import Lease


def udp_peer_route(lease: Lease) -> tuple[IPv4Network, IPv4Address] | None:
    """The udp forwarder's route for a peer: its IPv4 subnet to its public IP (the datagrams
    go to the configured port there); None when the forwarder carries nothing for it."""
    if lease.subnet is None or not lease.enable_ipv4:
        return None
    return lease.subnet, lease.attrs.public_ip
