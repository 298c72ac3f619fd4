"""The host-gw backend: one route per peer, via its public IP on the external interface
(flannel-io/flannel pkg/backend/hostgw/hostgw.go: RegisterNetwork; pkg/backend/route_network.go).

flannel's 10 s route check only re-adds routes it remembers; here the agent's periodic
reconcile also fixes wrong ones and removes stale ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Address

from pyflannel_runtime.backend.base import AcquireLease, BackendError
from pyflannel_runtime.backend.hostgw.peers import hostgw_peer_entries
from pyflannel_runtime.backend.programmer import PeerProgrammer
from pyflannel_runtime.backend_spec.options import HostGwOptions
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.netlink.dump import Ownership
from pyflannel_runtime.netlink.entries import Entry
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig

NAT_MESSAGE = (
    "your PublicIP differs from interface IP, meaning that probably you're on a NAT, "
    "which is not supported by host-gw backend"
)


class HostGwBackend:
    backend_type = "host-gw"

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    async def register_network(
        self,
        config: NetworkConfig,
        ext: ExternalInterface,
        acquire: AcquireLease,
        stored_macs: tuple[str, str] = ("", ""),
    ) -> HostGwNetwork:
        if config.enable_ipv4 and ext.ext_addr != ext.iface_addr:
            raise BackendError(NAT_MESSAGE)
        if config.enable_ipv6 and ext.ext_v6_addr != ext.iface_v6_addr:
            raise BackendError(NAT_MESSAGE)
        attrs = LeaseAttrs(
            public_ip=ext.ext_addr or IPv4Address("0.0.0.0"),
            public_ipv6=ext.ext_v6_addr if config.enable_ipv6 else None,
            backend_type=self.backend_type,
        )
        lease = await acquire(attrs)
        network = HostGwNetwork(self.netns, config, ext, lease)
        network.start_watching()
        return network


class HostGwNetwork(PeerProgrammer):
    def __init__(
        self, netns: str | None, config: NetworkConfig, ext: ExternalInterface, lease: Lease
    ) -> None:
        super().__init__(netns)
        self.lease = lease
        self.mtu = HostGwOptions.of(config).device_mtu(ext.mtu)
        self._config = config
        self._ext_index = ext.index

    def peer_entries(self, lease: Lease) -> tuple[Entry, ...]:
        return hostgw_peer_entries(
            lease, self._ext_index, self._config.enable_ipv4, self._config.enable_ipv6
        )

    async def prepare(self, leases: Sequence[Lease]) -> None:
        """host-gw needs no kernel lookups per peer."""

    def ownership(self) -> Ownership:
        return Ownership(networks=self._config.enabled_networks)

    async def close(self) -> None:
        await self.close_kernel()
