"""The vxlan backend: flannel.<VNI> devices plus neighbour, FDB and route per peer
(flannel-io/flannel pkg/backend/vxlan/vxlan.go: RegisterNetwork; vxlan_network.go:
handleSubnetEvents).

Beyond flannel: startup and periodic reconcile remove stale entries, and a device deleted
under us is recreated with all peers replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from ipaddress import IPv4Address

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pyflannel_runtime.backend.base import AcquireLease, BackendError, DeviceSettings
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend.programmer import PeerProgrammer
from pyflannel_runtime.backend.vxlan.device import (
    Device,
    VxlanDeviceSpec,
    apply_tx_checksum_offload,
    configure_device,
    ensure_vxlan_device,
    random_vtep_mac,
    verify_mac,
)
from pyflannel_runtime.backend.vxlan.inspection import direct_oif
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.backend_spec.options import VxlanOptions
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.netlink.dump import Ownership
from pyflannel_runtime.netlink.entries import Entry, IPAddress, IPNetwork
from pyflannel_runtime.netlink.monitor import LinkEvent
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

log = logging.getLogger("pyflannel.backend.vxlan")

_RECREATE_FIRST_DELAY = 1.0
_RECREATE_MAX_DELAY = 30.0


@dataclass(frozen=True)
class _Family:
    """One vxlan device and what configures it."""

    spec: VxlanDeviceSpec
    network: IPNetwork | None
    label: str  # "IPv4" / "IPv6", for flannel's message


class VxlanBackend:
    backend_type = "vxlan"

    def __init__(self, netns: str | None = None, settings: DeviceSettings | None = None) -> None:
        self.netns = netns
        self.settings = settings or DeviceSettings()

    async def register_network(
        self,
        config: NetworkConfig,
        ext: ExternalInterface,
        acquire: AcquireLease,
        stored_macs: tuple[str, str] = ("", ""),
    ) -> VxlanNetwork:
        opts = VxlanOptions.of(config)
        mtu = opts.device_mtu(ext.mtu)
        families: dict[int, _Family] = {}
        if config.enable_ipv4:
            if ext.ext_addr is None:
                raise BackendError("failed to create VXLAN device: no IPv4 public address")
            spec = _spec(opts.device_name(4), opts, stored_macs[0], mtu, ext.index, ext.ext_addr)
            families[4] = _Family(spec, config.network, "IPv4")
        if config.enable_ipv6:
            if ext.ext_v6_addr is None:
                raise BackendError("failed to create VXLAN v6 device: no IPv6 public address")
            spec = _spec(opts.device_name(6), opts, stored_macs[1], mtu, ext.index, ext.ext_v6_addr)
            families[6] = _Family(spec, config.ipv6_network, "IPv6")
        network = VxlanNetwork(self.netns, families, opts, mtu, self.settings)
        try:
            await network.create_devices()
            lease = await acquire(network.lease_attrs(ext))
            network.lease = lease
            await network.configure_devices()
        except BaseException:
            await network.close()
            raise
        network.start_watching()
        return network


def _spec(
    name: str, opts: VxlanOptions, mac: str, mtu: int, link_index: int, local: IPAddress
) -> VxlanDeviceSpec:
    return VxlanDeviceSpec(
        name=name,
        vni=opts.vni,
        mac=(mac or random_vtep_mac()).lower(),
        mtu=mtu,
        link_index=link_index,
        local=local,
        port=opts.port,
        gbp=opts.gbp,
        learning=opts.learning,
    )


class VxlanNetwork(PeerProgrammer):
    lease: Lease

    def __init__(
        self,
        netns: str | None,
        families: dict[int, _Family],
        opts: VxlanOptions,
        mtu: int,
        settings: DeviceSettings | None = None,
    ) -> None:
        super().__init__(netns)
        self.mtu = mtu
        self._families = families
        self._opts = opts
        self._settings = settings or DeviceSettings()
        self._devices: dict[int, Device] = {}
        self._direct: dict[IPAddress, int] = {}
        self._healer: asyncio.Task[None] | None = None
        self._heal_again = False
        self.repaired["device"] = 0

    # --- devices ---------------------------------------------------------------------------

    async def create_devices(self) -> None:
        for version, family in self._families.items():
            spec = family.spec
            try:
                device = await self._ensure_device(spec)
            except (OSError, NetlinkError) as err:
                raise BackendError(f"failed to create VXLAN device {spec.name}: {err}") from err
            self._devices[version] = device

    async def _ensure_device(self, spec: VxlanDeviceSpec) -> Device:
        """Create or find the device (at start, and after it was deleted), with the tx checksum
        offload the agent's settings ask for."""
        offload = self._settings.vxlan_tx_checksum_offload
        verdict_file = self._settings.auto_verdict_file

        def ensure(ipr: IPRoute) -> Device:
            device = ensure_vxlan_device(ipr, spec, self.netns)
            apply_tx_checksum_offload(spec.name, offload, verdict_file, self.netns)
            return device

        return await self.kernel(ensure)

    def lease_attrs(self, ext: ExternalInterface) -> LeaseAttrs:
        v4, v6 = self._devices.get(4), self._devices.get(6)
        return LeaseAttrs(
            public_ip=ext.ext_addr or IPv4Address("0.0.0.0"),
            public_ipv6=ext.ext_v6_addr if v6 is not None else None,
            backend_type="vxlan",
            backend_data=vxlan_backend_data(self._opts.vni, v4.mac) if v4 else None,
            backend_v6_data=vxlan_backend_data(self._opts.vni, v6.mac) if v6 else None,
        )

    async def configure_devices(self) -> None:
        subnets: dict[int, IPNetwork | None] = {4: self.lease.subnet, 6: self.lease.ipv6_subnet}
        for version, family in self._families.items():
            name = family.spec.name
            subnet = subnets[version]
            if subnet is None:
                raise BackendError(
                    f"failed to configure interface {name}: "
                    f"{family.label} is enabled but the lease has no {family.label}"
                )
            device = self._devices[version]

            def configure(
                ipr: IPRoute,
                f: _Family = family,
                d: Device = device,
                ip: IPAddress = subnet.network_address,
            ) -> None:
                configure_device(ipr, f.spec.name, d.index, ip, f.network)
                verify_mac(ipr, f.spec.name, d.index, d.mac)

            try:
                await self.kernel(configure)
            except (OSError, NetlinkError) as err:
                raise BackendError(f"failed to configure interface {name}: {err}") from err

    # --- peers -----------------------------------------------------------------------------

    def peer_entries(self, lease: Lease) -> tuple[Entry, ...]:
        v4, v6 = self._devices.get(4), self._devices.get(6)
        devices = VxlanDevices(v4.index if v4 else None, v6.index if v6 else None)
        return vxlan_peer_entries(lease, devices, self._direct)

    def ownership(self) -> Ownership:
        return Ownership(
            devices=frozenset(d.index for d in self._devices.values()),
            networks=tuple(f.network for f in self._families.values() if f.network is not None),
        )

    def entries_are_stable(self) -> bool:
        # DirectRouting picks each peer's entries from a route lookup that can change.
        return not self._opts.direct_routing

    async def prepare(self, leases: Sequence[Lease]) -> None:
        if not self._opts.direct_routing:
            return
        ips: set[IPAddress | None] = set()
        for lease in leases:
            ips.add(lease.attrs.public_ip if 4 in self._devices else None)
            ips.add(lease.attrs.public_ipv6 if 6 in self._devices else None)
        wanted = [ip for ip in ips if ip is not None]

        def resolve(ipr: IPRoute) -> dict[IPAddress, int | None]:
            return {ip: direct_oif(ipr, ip) for ip in wanted}

        for ip, oif in (await self.kernel(resolve)).items():
            if oif is None:
                self._direct.pop(ip, None)
            else:
                self._direct[ip] = oif

    # --- device watcher --------------------------------------------------------------------

    def on_link_events(self, events: list[LinkEvent]) -> None:
        names = {f.spec.name for f in self._families.values()}
        for event in events:
            if event.deleted and event.name in names:
                log.warning("Device %s was deleted; recreating it", event.name)
                self._schedule_heal()

    def devices_lost(self) -> bool:
        return self._heal_again or (self._healer is not None and not self._healer.done())

    def on_notifications_lost(self) -> None:
        self._schedule_heal()  # a device deletion may be among them

    def _schedule_heal(self) -> None:
        # A delete seen while healing may have hit the device just recreated: heal again.
        self._heal_again = True
        if self._healer is None or self._healer.done():
            self._healer = asyncio.create_task(self._heal(), name="vxlan-heal")

    async def _heal(self) -> None:
        delay = _RECREATE_FIRST_DELAY
        while self._heal_again:
            self._heal_again = False
            try:
                async with self._lock:
                    await self._recreate_missing()
                    self.forget_entries()  # they name the old device's ifindex
                    peers = list(self._peers.values())
                    writes = await self._reconcile(peers, repairing=True)
                log.info(
                    "VXLAN devices restored; replayed %d peers (%d writes)",
                    len(self._peers),
                    writes,
                )
            except (OSError, NetlinkError, BackendError) as err:
                log.error("Failed to recreate VXLAN device: %s; retrying in %.0fs", err, delay)
                self._heal_again = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECREATE_MAX_DELAY)

    async def _recreate_missing(self) -> None:
        for version, family in self._families.items():
            # Recreate with the advertised MAC so peers need no update.
            old = self._devices[version]
            spec = replace(family.spec, mac=old.mac)
            device = await self._ensure_device(spec)
            self._devices[version] = device
            if device.index != old.index:
                self.repaired["device"] += 1
        await self.configure_devices()

    async def close(self) -> None:
        self.stop_watching()
        if self._healer is not None:
            self._healer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._healer
        await self.close_kernel()
