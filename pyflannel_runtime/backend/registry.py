"""The backends pyflannel runs, one spec each: everything the rest of the runtime asks about a
backend (the agent, ``config check``, the cluster model, the lease stores, ``status``).

Adding a backend means writing its module in this package (the `Backend` from `base`, its
options class in `options`, its per-peer entries in `peers` and host inspection in `host` if it
has any) and one `BackendSpec` below. Backend modules never import this one: the registry sits
on top and imports them only when a backend is built, so ``config check`` and the CNI plugin
stay free of pyroute2 and asyncio.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyflannel_runtime.backend.host import (
    HostDatapath,
    inspect_hostgw,
    inspect_udp,
    inspect_vxlan,
)
from pyflannel_runtime.backend.options import (
    BackendOptions,
    HostGwOptions,
    UdpOptions,
    VxlanOptions,
)
from pyflannel_runtime.backend.peers import (
    PeerSkipped,
    hostgw_peer_entries,
    udp_peer_route,
    vxlan_peer_entries,
)
from pyflannel_runtime.netlink.entries import Entry, IPAddress, IPNetwork
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig
from pyflannel_runtime.wire.vxlan_data import advertised_vtep_mac

if TYPE_CHECKING:
    from pyflannel_runtime.backend.base import Backend, DeviceSettings

PeerEntries = Callable[[Lease, HostDatapath], tuple[Entry, ...]]
# (pyroute2 handle, config, own lease, all leases) -> the host's datapath
InspectHost = Callable[[Any, NetworkConfig, Lease, Sequence[Lease]], HostDatapath]


@dataclass(frozen=True)
class BackendSpec:
    name: str  # net-conf's Backend.Type
    options: type[BackendOptions]  # option schema, decoding, MTU rule
    dual_stack: bool  # carries IPv6 as well as IPv4 (flannel: vxlan, host-gw, wireguard)
    # (netns (None: this one), the agent's device settings) -> the backend
    create: Callable[[str | None, DeviceSettings | None], Backend]
    # A peer's kernel entries on a host, or None when the backend programs none per peer.
    peer_entries: PeerEntries | None = None
    inspect_host: InspectHost | None = None  # reads a host's datapath for `peer_entries`
    # A peer's route in a userspace forwarder (subnet -> public IP), None when it gets none;
    # for backends that forward peers in userspace instead of through kernel entries.
    forwarder_route: Callable[[Lease], tuple[IPNetwork, IPAddress] | None] | None = None
    # The MAC a lease's backend data advertises ("" if none); None: the backend has no MAC.
    advertised_mac: Callable[[str | None], str] | None = None

    def expected_entries(self, lease: Lease, host: HostDatapath) -> tuple[Entry, ...]:
        """The entries the agent programs for a peer; PeerSkipped when it programs none."""
        if self.peer_entries is None:
            raise PeerSkipped(f"the {self.name} backend's datapath is not checked")
        return self.peer_entries(lease, host)


def _vxlan(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.vxlan import VxlanBackend

    return VxlanBackend(netns, settings)


def _hostgw(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.hostgw import HostGwBackend

    return HostGwBackend(netns)


def _udp(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.udp import UdpBackend

    return UdpBackend(netns)


_SPECS = (
    BackendSpec(
        name="vxlan",
        options=VxlanOptions,
        dual_stack=True,
        create=_vxlan,
        peer_entries=lambda lease, host: vxlan_peer_entries(lease, host.devices, host.direct_oifs),
        inspect_host=inspect_vxlan,
        advertised_mac=advertised_vtep_mac,
    ),
    BackendSpec(
        name="host-gw",
        options=HostGwOptions,
        dual_stack=True,
        create=_hostgw,
        peer_entries=lambda lease, host: hostgw_peer_entries(
            lease, host.ext_index, host.ipv4, host.ipv6
        ),
        inspect_host=inspect_hostgw,
    ),
    BackendSpec(
        name="udp",
        options=UdpOptions,
        dual_stack=False,
        create=_udp,
        inspect_host=inspect_udp,
        forwarder_route=udp_peer_route,
    ),
)
BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in _SPECS}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def find(backend_type: str) -> BackendSpec | None:
    return BACKENDS.get(backend_type)


def get(backend_type: str) -> BackendSpec:
    """The spec for net-conf's Backend.Type; ConfigError naming the supported ones."""
    spec = BACKENDS.get(backend_type)
    if spec is None:
        raise ConfigError(
            f"unknown backend type: {backend_type} (pyflannel supports {', '.join(BACKENDS)})"
        )
    return spec


def validate(config: NetworkConfig) -> BackendOptions:
    """The one check of net-conf's Backend: a known type and options it accepts. ConfigError
    otherwise, with flannel's message (for the agent: before anything is created)."""
    return get(config.backend_type).options.of(config)


def stale_devices(link_names: Iterable[str], backend: Mapping[str, Any]) -> list[str]:
    """The links a flannel backend creates that the one net-conf's `backend` object configures
    does not use. The agent creates its own device but never removes another's, so after a
    switch of backend (or of VNI) the old device stays, with its routes, neighbours and FDB
    entries; ConfigError for a backend that does not validate."""
    options = get(backend.get("Type", "")).options.decode(backend)
    return [name for name in flannel_devices(link_names) if not options.uses_device(name)]


def flannel_devices(link_names: Iterable[str]) -> list[str]:
    """The links that some backend creates under some options (flannel.<VNI>,
    flannel-v6.<VNI>, flannel<N>), in the order given."""
    families = [spec.options.DEVICES for spec in _SPECS if spec.options.DEVICES]
    return [name for name in link_names if any(re.fullmatch(f, name) for f in families)]


def create(
    backend_type: str, netns: str | None = None, settings: DeviceSettings | None = None
) -> Backend:
    """The backend for net-conf's Backend.Type; `netns` programs that namespace instead, and
    `settings` are the agent's own for its devices (None: pyflanneld's defaults)."""
    return get(backend_type).create(netns, settings)
