"""The vxlan datapath as a host's kernel holds it: its devices, and with DirectRouting which
peers are reached directly (for verify and `pyflannel status`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyflannel_runtime.backend.host import HostDatapath, link_names
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend_spec.options import VxlanOptions
from pyflannel_runtime.netlink.entries import IPAddress
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig


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


def inspect_vxlan(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """flannel.<VNI> and flannel-v6.<VNI>, and with DirectRouting which peers are direct."""
    opts = VxlanOptions.of(config)
    names = link_names(ipr)
    by_name = {name: index for index, name in names.items()}
    problems = []
    indexes: dict[int, int | None] = {}
    for version, enabled, absent in ((4, config.enable_ipv4, -1), (6, config.enable_ipv6, -2)):
        if not enabled:
            indexes[version] = None
            continue
        name = opts.device_name(version)
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
        networks=config.enabled_networks,
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
