"""What a host's datapath programs peers with, read from its kernel without changing it.

`HostDatapath` holds the devices and lookups the backends' peer entries need, to compute a
peer's entries the way the running agent does; each backend's inspection (its package's
``inspection`` module) fills it in. They take an open pyroute2 handle (from
`netlink.netns.iproute`), so no inspection imports pyroute2 at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.netlink.entries import IPAddress, IPNetwork


@dataclass(frozen=True)
class HostDatapath:
    """What this host's backend programs a peer with, as far as its kernel tells.

    A device the backend needs but the kernel lacks gets a negative index, which no kernel
    entry has: every entry on it then shows as missing, which is what the host lacks.
    """

    backend_type: str
    devices: VxlanDevices = field(default_factory=lambda: VxlanDevices(None, None))
    direct_oifs: Mapping[IPAddress, int] = field(default_factory=dict)
    ext_index: int = -1
    ipv4: bool = True
    ipv6: bool = False
    ownership_devices: frozenset[int] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    names: Mapping[int, str] = field(default_factory=dict)  # ifindex -> device name
    problems: tuple[str, ...] = ()
    # Devices whose MTU is checked although the datapath owns no entries on them (flannel0).
    mtu_devices: frozenset[int] = frozenset()
    checked: tuple[str, ...] = ()  # what was found right, beyond the entries (for the report)
    # A userspace forwarder's routes, peer subnet -> public IP, as the agent publishes them
    # (the udp backend's); None: not published, so the peers cannot be checked.
    forwarder: Mapping[IPNetwork, IPAddress] | None = None


def link_names(ipr: Any) -> dict[int, str]:
    """ifindex -> name of every link."""
    return {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
