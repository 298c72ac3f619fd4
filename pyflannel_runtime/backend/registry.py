"""The backends' runtime hooks, one each: building the backend for the agent, a peer's kernel
entries and reading a host's datapath for verify and `status`, and the lab's namespaces. What a
backend is (its name, options, dual stack, devices) is `backend_spec.specs`, which this module
looks a type up in.

Backend modules never import this one: the registry sits on top and imports them only when a
backend is built, so ``config check`` and the CNI plugin stay free of pyroute2 and asyncio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyflannel_runtime.backend.host import HostDatapath
from pyflannel_runtime.backend.hostgw.inspection import inspect_hostgw
from pyflannel_runtime.backend.hostgw.peers import hostgw_peer_entries
from pyflannel_runtime.backend.peers import PeerSkipped
from pyflannel_runtime.backend.udp.inspection import inspect_udp
from pyflannel_runtime.backend.udp.peers import udp_peer_route
from pyflannel_runtime.backend.vxlan.inspection import inspect_vxlan
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.backend_spec.specs import BackendSpec
from pyflannel_runtime.netlink.entries import Entry, IPAddress, IPNetwork
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig

if TYPE_CHECKING:
    from pyflannel_runtime.backend.base import Backend, DeviceSettings

PeerEntries = Callable[[Lease, HostDatapath], tuple[Entry, ...]]
# (pyroute2 handle, config, own lease, all leases) -> the host's datapath
InspectHost = Callable[[Any, NetworkConfig, Lease, Sequence[Lease]], HostDatapath]


@dataclass(frozen=True)
class BackendRuntime:
    spec: BackendSpec
    # (netns (None: this one), the agent's device settings) -> the backend
    create: Callable[[str | None, DeviceSettings | None], Backend]
    # A peer's kernel entries on a host, or None when the backend programs none per peer.
    peer_entries: PeerEntries | None = None
    inspect_host: InspectHost | None = None  # reads a host's datapath for `peer_entries`
    # A peer's route in a userspace forwarder (subnet -> public IP), None when it gets none;
    # for backends that forward peers in userspace instead of through kernel entries.
    forwarder_route: Callable[[Lease], tuple[IPNetwork, IPAddress] | None] | None = None

    def expected_entries(self, lease: Lease, host: HostDatapath) -> tuple[Entry, ...]:
        """The entries the agent programs for a peer; PeerSkipped when it programs none."""
        if self.peer_entries is None:
            raise PeerSkipped(f"the {self.spec.name} backend's datapath is not checked")
        return self.peer_entries(lease, host)


def _vxlan(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.vxlan.vxlan import VxlanBackend

    return VxlanBackend(netns, settings)


def _hostgw(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.hostgw.hostgw import HostGwBackend

    return HostGwBackend(netns)


def _udp(netns: str | None, settings: DeviceSettings | None) -> Backend:
    from pyflannel_runtime.backend.udp.udp import UdpBackend

    return UdpBackend(netns)


_RUNTIMES = (
    BackendRuntime(
        spec=specs.get("vxlan"),
        create=_vxlan,
        peer_entries=lambda lease, host: vxlan_peer_entries(lease, host.devices, host.direct_oifs),
        inspect_host=inspect_vxlan,
    ),
    BackendRuntime(
        spec=specs.get("host-gw"),
        create=_hostgw,
        peer_entries=lambda lease, host: hostgw_peer_entries(
            lease, host.ext_index, host.ipv4, host.ipv6
        ),
        inspect_host=inspect_hostgw,
    ),
    BackendRuntime(
        spec=specs.get("udp"), create=_udp, inspect_host=inspect_udp, forwarder_route=udp_peer_route
    ),
)
RUNTIMES: dict[str, BackendRuntime] = {runtime.spec.name: runtime for runtime in _RUNTIMES}


def get(backend_type: str) -> BackendRuntime:
    """The runtime hooks for net-conf's Backend.Type; ConfigError naming the supported ones."""
    return RUNTIMES[specs.get(backend_type).name]


def create(
    backend_type: str, netns: str | None = None, settings: DeviceSettings | None = None
) -> Backend:
    """The backend for net-conf's Backend.Type; `netns` programs that namespace instead, and
    `settings` are the agent's own for its devices (None: pyflanneld's defaults)."""
    return get(backend_type).create(netns, settings)
