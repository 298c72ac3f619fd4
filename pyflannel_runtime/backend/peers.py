"""What every backend's peer entries share (pure): skipping a lease, the vxlan devices a host
inspection finds, and the route to a peer's subnet. Each backend computes its own entries in its
package's ``peers`` module."""

from __future__ import annotations

from dataclasses import dataclass

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.netlink.entries import IPAddress, IPNetwork, Route


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


def route_via(dst: IPNetwork, gateway: IPAddress, oif: int, onlink: bool = False) -> Route:
    """The route to `dst` via `gateway` on `oif`, with the metric a dump returns it with."""
    metric = IPV6_DEFAULT_METRIC if dst.version == 6 else 0
    return Route(dst, gateway, oif, onlink=onlink, priority=metric)
