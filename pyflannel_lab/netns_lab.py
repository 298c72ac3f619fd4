"""A reusable netns lab: an underlay bridge, N hosts and one pod per host.

    ul            netns with bridge br-ul (the L2 underlay)
    h1..hN        hosts: eth0 192.0.2.(10+N)/24 (+ 2001:db8::(10+N)/64), bridge cni0 10.244.N.1/24
    p1..pN        pods: eth0 10.244.N.10/24 (+ fd00:10:244:N::10/64), default via cni0

Every namespace name starts with `<prefix>-<random>-`, so parallel labs never clash, and
`destroy()` removes them all (deleting a netns removes its links). Use it as a context
manager, or call create()/destroy() yourself. Usable from tests and from bench/.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from types import TracebackType
from typing import Any, Self

from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.base import Network
from pyflannel_runtime.backend.udp.udp import UdpNetwork
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config

# Locally administered; each lab's bridge is alone in its own namespace.
UNDERLAY_BRIDGE_MAC = "02:00:00:00:00:01"


@dataclass(frozen=True)
class LabHost:
    n: int
    ns: str  # the host namespace
    pod_ns: str
    underlay_ip: IPv4Address  # on eth0
    underlay_ip6: IPv6Address
    subnet: IPv4Network  # the pod subnet this host would lease
    subnet6: IPv6Network
    pod_ip: IPv4Address
    pod_ip6: IPv6Address


class Lab(ABC):
    """Made by ``create()`` and removed by ``destroy()``; as a context manager, everything made
    is removed when leaving, or when ``create()`` fails part-way."""

    @abstractmethod
    def create(self) -> None: ...

    @abstractmethod
    def destroy(self) -> None: ...

    def __enter__(self) -> Self:
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


class NetLab(Lab):
    def __init__(
        self,
        prefix: str = "pdp",
        hosts: int = 3,
        pod_mtu: int = 1500,
        underlay_mtu: int = 1500,
        ipv6: bool = False,
        pods: bool = True,
    ) -> None:
        """``pods=False`` leaves out cni0 and the pods, for labs whose pods come from CNI."""
        if not 1 <= hosts <= 99:
            raise ValueError("1 to 99 hosts")
        self.token = f"{prefix}-{secrets.token_hex(3)}"
        self.ul = f"{self.token}-ul"
        self.ipv6 = ipv6
        self.pod_mtu = pod_mtu
        self.underlay_mtu = underlay_mtu
        self.pods = pods
        self.hosts = [
            LabHost(
                n=n,
                ns=f"{self.token}-h{n}",
                pod_ns=f"{self.token}-p{n}",
                underlay_ip=IPv4Address(f"192.0.2.{10 + n}"),
                underlay_ip6=IPv6Address(f"2001:db8::{10 + n}"),
                subnet=IPv4Network(f"10.244.{n}.0/24"),
                subnet6=IPv6Network(f"fd00:10:244:{n}::/64"),
                pod_ip=IPv4Address(f"10.244.{n}.10"),
                pod_ip6=IPv6Address(f"fd00:10:244:{n}::10"),
            )
            for n in range(1, hosts + 1)
        ]
        self._created: list[str] = []

    # --- lifecycle -----------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        per_host = [(h.ns, h.pod_ns) if self.pods else (h.ns,) for h in self.hosts]
        return [self.ul] + [name for names in per_host for name in names]

    def create(self) -> None:
        for ns in self.namespaces():
            sh("ip", "netns", "add", ns)
            self._created.append(ns)
            self.ip(ns, "link", "set", "lo", "up")
            if self.ipv6:
                self.sysctl(ns, "net.ipv6.conf.all.accept_dad", "0")
                self.sysctl(ns, "net.ipv6.conf.default.accept_dad", "0")
        # A bridge without an address of its own takes its ports' lowest, so a port added later
        # (an outsider, a late host) could change it under the hosts' neighbour entries for the
        # address on it (etcd's, the Node API's), which then point nowhere.
        self.ip(self.ul, "link", "add", "br-ul", "address", UNDERLAY_BRIDGE_MAC,
                "mtu", str(self.underlay_mtu), "type", "bridge")  # fmt: skip
        self.ip(self.ul, "link", "set", "br-ul", "up")
        for h in self.hosts:
            self._create_host(h)

    def _create_host(self, h: LabHost) -> None:
        mtu = str(self.underlay_mtu)
        port = f"vh{h.n}"
        self._veth_to_eth0(self.ul, port, h.ns, mtu)
        self.ip(self.ul, "link", "set", port, "master", "br-ul", "up")
        self.ip(h.ns, "addr", "add", f"{h.underlay_ip}/24", "dev", "eth0")
        self.ip(h.ns, "link", "set", "eth0", "up")
        self.sysctl(h.ns, "net.ipv4.ip_forward", "1")
        if self.ipv6:
            self.sysctl(h.ns, "net.ipv6.conf.all.forwarding", "1")
            self.ip(h.ns, "addr", "add", f"{h.underlay_ip6}/64", "dev", "eth0", "nodad")
        if self.pods:
            self._create_pod(h)

    def _create_pod(self, h: LabHost) -> None:
        pod_mtu = str(self.pod_mtu)
        self.ip(h.ns, "link", "add", "cni0", "mtu", pod_mtu, "type", "bridge")
        self.ip(h.ns, "addr", "add", f"{h.subnet.network_address + 1}/24", "dev", "cni0")
        self.ip(h.ns, "link", "set", "cni0", "up")
        self._veth_to_eth0(h.ns, f"veth{h.n}", h.pod_ns, pod_mtu)
        self.ip(h.ns, "link", "set", f"veth{h.n}", "master", "cni0", "up")
        self.ip(h.pod_ns, "addr", "add", f"{h.pod_ip}/24", "dev", "eth0")
        self.ip(h.pod_ns, "link", "set", "eth0", "up")
        self.ip(h.pod_ns, "route", "add", "default", "via", str(h.subnet.network_address + 1))
        if self.ipv6:
            self.ip(
                h.ns, "addr", "add", f"{h.subnet6.network_address + 1}/64", "dev", "cni0", "nodad"
            )
            self.ip(h.pod_ns, "addr", "add", f"{h.pod_ip6}/64", "dev", "eth0", "nodad")
            self.ip(h.pod_ns, "route", "add", "default", "via", str(h.subnet6.network_address + 1))

    def _veth_to_eth0(self, ns: str, name: str, peer_ns: str, mtu: str) -> None:
        """A veth pair: ``name`` in ``ns``, its peer ``eth0`` in ``peer_ns``, both at ``mtu``."""
        self.ip(ns, "link", "add", name, "mtu", mtu, "type", "veth",
                "peer", "name", "eth0", "mtu", mtu, "netns", peer_ns)  # fmt: skip

    def adopt(self, ns: str) -> None:
        """Take a namespace made elsewhere into the lab, so destroy() removes it too."""
        self._created.append(ns)

    def destroy(self) -> None:
        while self._created:
            subprocess.run(["ip", "netns", "del", self._created.pop()], check=False)

    # --- helpers -------------------------------------------------------------------------------

    def ip(self, ns: str, *args: str) -> str:
        return sh("ip", "-n", ns, *args)

    def bridge(self, ns: str, *args: str) -> str:
        return sh("bridge", "-n", ns, *args)

    def run(self, ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside a namespace."""
        return subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=check
        )

    def sysctl(self, ns: str, key: str, value: str) -> None:
        self.run(ns, "sysctl", "-qw", f"{key}={value}")

    def ifindex(self, ns: str, name: str) -> int:
        return int(self.ip(ns, "-o", "link", "show", "dev", name).split(":", 1)[0])

    def ping(
        self,
        ns: str,
        dst: IPv4Address | IPv6Address | str,
        *,
        count: int = 1,
        size: int | None = None,
        dont_fragment: bool = False,
        timeout: float = 2.0,
    ) -> bool:
        """True when every echo got its reply."""
        argv = ["ping", "-n", "-q", "-c", str(count), "-W", str(timeout), "-i", "0.2"]
        if size is not None:
            argv += ["-s", str(size)]
        if dont_fragment:
            argv += ["-M", "do"]
        argv.append(str(ip_address(str(dst))))
        return self.run(ns, *argv, check=False).returncode == 0


def sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


# --- driving pyflannel backends in the lab (synthetic leases, no etcd) -------------------------


def external_interface(lab: NetLab, host: LabHost, mtu: int | None = None) -> ExternalInterface:
    """What interface selection would pick on the host: eth0 and its underlay addresses."""
    return ExternalInterface(
        name="eth0",
        index=lab.ifindex(host.ns, "eth0"),
        mtu=mtu or lab.underlay_mtu,
        iface_addr=host.underlay_ip,
        iface_v6_addr=host.underlay_ip6 if lab.ipv6 else None,
        ext_addr=host.underlay_ip,
        ext_v6_addr=host.underlay_ip6 if lab.ipv6 else None,
    )


def lab_config(backend: dict[str, Any], ipv6: bool = False) -> NetworkConfig:
    cfg = NetworkConfig(
        network=IPv4Network("10.244.0.0/16"),
        enable_ipv6=ipv6,
        ipv6_network=IPv6Network("fd00:10:244::/48") if ipv6 else None,
        backend_type=str(backend["Type"]),
        backend=backend,
    )
    return check_network_config(cfg)


def lease_acquirer(host: LabHost, ipv6: bool = False) -> Callable[[LeaseAttrs], Awaitable[Lease]]:
    """An AcquireLease that hands the host its lab subnet(s), as a subnet manager would."""

    async def acquire(attrs: LeaseAttrs) -> Lease:
        return Lease(
            subnet=host.subnet,
            ipv6_subnet=host.subnet6 if ipv6 else None,
            attrs=attrs,
            enable_ipv4=True,
            enable_ipv6=ipv6,
        )

    return acquire


def host_lease(host: LabHost) -> Lease:
    """The host's lab subnet as a bare lease: what a peer needs to know of it (udp)."""
    return Lease(subnet=host.subnet, ipv6_subnet=None, attrs=LeaseAttrs(public_ip=host.underlay_ip))


def added(leases: Iterable[Lease]) -> list[LeaseEvent]:
    return [LeaseEvent(EventType.ADDED, lease) for lease in leases]


async def register_backend(lab: NetLab, n: int, backend: Mapping[str, Any]) -> Network:
    """Host n's network for net-conf's Backend, with the host's lab subnet as its lease."""
    host = lab.hosts[n - 1]
    return await registry.create(str(backend["Type"]), netns=host.ns).register_network(
        lab_config(dict(backend), ipv6=lab.ipv6),
        external_interface(lab, host),
        lease_acquirer(host, ipv6=lab.ipv6),
    )


async def mesh(networks: list[Network]) -> None:
    """Tell every host about every other one."""
    for own in networks:
        await own.handle_events(added(n.lease for n in networks if n is not own))


async def close_all(networks: list[Network]) -> None:
    for network in networks:
        await network.close()


def close_udp_network(network: UdpNetwork) -> None:
    """Close a udp network; its worker processes are killed by PID even if close() fails."""
    pids = network.worker_pids
    try:
        asyncio.run(network.close())
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
