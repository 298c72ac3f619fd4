"""What a host's datapath programs peers with, read from its kernel without changing it.

`HostDatapath` holds the devices and lookups `backend.peers` needs to compute a peer's entries
the way the running agent does; the inspectors fill it in for one backend each. They take an
open pyroute2 handle (from `netlink.netns.iproute`), so this module imports no pyroute2 itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyflannel_runtime.backend.options import VxlanOptions
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.model.lease import Lease
from pyflannel_runtime.model.netconf import NetworkConfig
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


def configured_networks(config: NetworkConfig) -> tuple[IPNetwork, ...]:
    """The cluster networks of the enabled families."""
    wanted = (
        config.network if config.enable_ipv4 else None,
        config.ipv6_network if config.enable_ipv6 else None,
    )
    return tuple(n for n in wanted if n is not None)


def direct_oif(ipr: Any, ip: IPAddress) -> int | None:
    """DirectRouting applies when `ip route get <ip>` gives exactly one route, gateway-less."""
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        routes = ipr.route("get", dst=str(ip))
    except NetlinkError:
        return None
    if len(routes) != 1 or routes[0].get("gateway") is not None:
        return None
    oif = routes[0].get("oif")
    return oif if isinstance(oif, int) else None


def link_names(ipr: Any) -> dict[int, str]:
    """ifindex -> name of every link."""
    return {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}


def inspect_vxlan(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """flannel.<VNI> and flannel-v6.<VNI>, and with DirectRouting which peers are direct."""
    opts = VxlanOptions.of(config)
    names = link_names(ipr)
    by_name = {name: index for index, name in names.items()}
    problems = []
    indexes: dict[int, int | None] = {}
    for version, enabled, name, absent in (
        (4, config.enable_ipv4, f"flannel.{opts.vni}", -1),
        (6, config.enable_ipv6, f"flannel-v6.{opts.vni}", -2),
    ):
        if not enabled:
            indexes[version] = None
            continue
        index = by_name.get(name)
        if index is None:
            problems.append(f"device {name} does not exist")
            names[absent] = name
        indexes[version] = index if index is not None else absent
    return HostDatapath(
        backend_type="vxlan",
        devices=VxlanDevices(indexes[4], indexes[6]),
        direct_oifs=_direct_oifs(ipr, config, leases) if opts.direct_routing else {},
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        ownership_devices=frozenset(i for i in indexes.values() if i is not None and i > 0),
        networks=configured_networks(config),
        names=names,
        problems=tuple(problems),
    )


def _direct_oifs(ipr: Any, config: NetworkConfig, leases: Sequence[Lease]) -> dict[IPAddress, int]:
    """The route lookup the agent's DirectRouting makes for each peer's public IPs."""
    ips: set[IPAddress | None] = set()
    for lease in leases:
        ips.add(lease.attrs.public_ip if config.enable_ipv4 else None)
        ips.add(lease.attrs.public_ipv6 if config.enable_ipv6 else None)
    found = {ip: direct_oif(ipr, ip) for ip in ips if ip is not None}
    return {ip: oif for ip, oif in found.items() if oif is not None}


def inspect_hostgw(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """The interface holding the own lease's public IP: host-gw's routes leave through it."""
    names = link_names(ipr)
    public = own.attrs.public_ip if config.enable_ipv4 else own.attrs.public_ipv6
    ext_index = -1
    problems = []
    found = ipr.get_addr(address=str(public)) if public is not None else []
    if found:
        ext_index = found[0]["index"]
    else:
        problems.append(f"no interface holds the public IP {public} of this host's lease")
        names[-1] = f"<interface of {public}>"
    return HostDatapath(
        backend_type=config.backend_type,
        ext_index=ext_index,
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        networks=configured_networks(config),
        names=names,
        problems=tuple(problems),
    )
