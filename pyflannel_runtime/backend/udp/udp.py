"""The udp backend: flannel0 (TUN) plus userspace forwarding over UDP port 8285
(flannel-io/flannel pkg/backend/udp/udp_network_amd64.go, proxy_amd64.c).

Wire format is flannel's: each UDP datagram carries one bare inner IPv4 packet, sent from and
to the configured port. The datapath lives in worker processes (`worker`), one per queue of
a multiqueue flannel0 and direction, so forwarding is not bound to one core or to the agent's
event loop. The agent drives them like flannel drives its C proxy: route commands over a
SOCK_SEQPACKET socketpair, and CMD_STOP on close. Like flannel, forwarding stops with the agent.

Beyond flannel: datagrams whose source is not a peer's public IP are dropped and counted (by a
socket filter in the kernel, `socket_filter`, and by the forwarder for any that get by), the TUN
queue is long enough (txqueuelen 10000) that bursts are not dropped, and with numpy present
flannel0 uses TSO plus UDP GSO/GRO (see `offload`) while staying wire-compatible. With the
`SuperPackets` option, nodes that both advertise it in their leases send TCP super-packets whole
(`superpacket`); every other peer keeps flannel's framing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import importlib.util
import logging
import mmap
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import TYPE_CHECKING

from pyroute2.netlink.exceptions import NetlinkError

from pyflannel_runtime.backend.base import AcquireLease, BackendError
from pyflannel_runtime.backend.udp import socket_filter
from pyflannel_runtime.backend.udp.inspection import UDP_WORKER_MODULE, UDP_WORKER_ROLES
from pyflannel_runtime.backend.udp.packet import Command, CommandMessage, Peer, encode_command
from pyflannel_runtime.backend.udp.peers import udp_peer_route
from pyflannel_runtime.backend.udp.superpacket import advertises, backend_data
from pyflannel_runtime.backend.udp.worker import COUNTERS_PER_WORKER, READY, UDP_GRO, Counter
from pyflannel_runtime.backend_spec.options import UdpOptions
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.netlink.netns import iproute, run_in_netns, write_sysctl
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import NetworkConfig

if TYPE_CHECKING:
    from pyflannel_runtime.backend.drift import KernelSurvey

log = logging.getLogger("pyflannel.backend.udp")

TUN_NAME_TEMPLATE = "flannel%d"
TUN_TXQUEUELEN = 10000  # the default 500 drops TCP bursts in the TUN queue
SOCKET_BUFFER = 4 << 20
_READY_TIMEOUT = 30.0
_STOP_TIMEOUT = 2.0

_TUNSETIFF = 0x400454CA
_TUNSETOFFLOAD = 0x400454D0
_IFF_TUN = 0x0001
_IFF_NO_PI = 0x1000
_IFF_MULTI_QUEUE = 0x0100
_IFF_NAPI = 0x0010
_IFF_VNET_HDR = 0x4000
_TUN_F_CSUM = 0x01
_TUN_F_TSO4 = 0x02
_IFREQ = struct.Struct("16sH22x")
_RTPROT_BOOT = 3  # what netlink route adds default to in flannel (and `ip route add`)
_SO_SNDBUFFORCE = 32  # root may exceed net.core.[rw]mem_max
_SO_RCVBUFFORCE = 33


def offload_available() -> bool:
    """The offload path sums payloads with numpy; without it, Python is too slow to gain."""
    return importlib.util.find_spec("numpy") is not None


@dataclass
class _Worker:
    role: str
    queue: int
    slot: int
    process: subprocess.Popen[bytes]
    control: socket.socket

    def send(self, message: bytes) -> bool:
        try:
            self.control.send(message)
        except OSError:
            return False
        return True


# A route: the peer's socket address, and whether it takes super-packets.
Route = tuple[Peer, bool]


@dataclass
class _Datapath:
    """Open file descriptors of flannel0's queues and the UDP sockets, plus the workers."""

    tun_name: str
    tun_addr: IPv4Address
    mtu: int
    queues: list[int]
    sockets: list[socket.socket]
    offload: bool
    counters_fd: int
    counters: mmap.mmap
    workers: list[_Worker] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.queues:
            os.close(fd)
        for sock in self.sockets:
            sock.close()
        self.counters.close()
        os.close(self.counters_fd)


def _open_queues(count: int, offload: bool) -> tuple[str, list[int]]:
    """flannel0's queues; the first TUNSETIFF lets the kernel pick the name from the template.

    With IFF_NAPI each queue hands what the receiver writes to the stack through its own NAPI
    context, in order: plain writes go to the backlog of whichever CPU the writer runs on
    at the moment, and two CPUs' backlogs can pass each other's packets (TCP then sees
    reordering, and retransmits). Kernels without it (before 4.15) get plain writes."""
    flags = _IFF_TUN | _IFF_NO_PI | _IFF_MULTI_QUEUE | (_IFF_VNET_HDR if offload else 0)
    name = TUN_NAME_TEMPLATE
    fds: list[int] = []
    try:
        for _ in range(count):
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
            fds.append(fd)
            try:
                answer = fcntl.ioctl(fd, _TUNSETIFF, _IFREQ.pack(name.encode(), flags | _IFF_NAPI))
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                answer = fcntl.ioctl(fd, _TUNSETIFF, _IFREQ.pack(name.encode(), flags))
            name = _IFREQ.unpack(answer)[0].rstrip(b"\0").decode()
        if offload:
            fcntl.ioctl(fds[0], _TUNSETOFFLOAD, _TUN_F_CSUM | _TUN_F_TSO4)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return name, fds


def _open_sockets(
    count: int, address: IPv4Address, port: int, offload: bool
) -> list[socket.socket]:
    """One socket per queue on IfaceAddr:port (flannel binds the interface address)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            for option in (_SO_RCVBUFFORCE, _SO_SNDBUFFORCE):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
            if offload:
                sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
            sock.bind((str(address), port))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _configure_tun(
    netns: str | None, name: str, address: IPv4Address, network: IPv4Network, mtu: int
) -> None:
    """Address <lease IP>/32, MTU, txqueuelen, up, and the route for the whole network."""
    # Our ICMP errors come from flannel0's own address; without accept_local the kernel drops
    # them as martians (so flannel's own never reach the pod).
    write_sysctl(netns, f"net/ipv4/conf/{name}/accept_local", "1")
    # flannel0 carries IPv4 alone. With IPv6 on, the kernel sends its router solicitations and
    # MLD reports into the tunnel, which the forwarders could only drop (as not IPv4).
    with contextlib.suppress(FileNotFoundError):  # a kernel without IPv6 sends none
        write_sysctl(netns, f"net/ipv6/conf/{name}/disable_ipv6", "1")
    with iproute(netns) as ipr:
        index = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=index, mtu=mtu, txqlen=TUN_TXQUEUELEN)
        try:
            ipr.addr("add", index=index, address=str(address), prefixlen=32)
        except NetlinkError as err:
            if err.code != errno.EEXIST:
                raise
        ipr.link("set", index=index, state="up")
        try:
            ipr.route("add", dst=str(network), oif=index, scope=0, proto=_RTPROT_BOOT)
        except NetlinkError as err:
            if err.code != errno.EEXIST:
                raise


def _worker_env() -> dict[str, str]:
    """The workers import this package from wherever the agent imported it."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _set_route(subnet: IPv4Network, route: Route) -> CommandMessage:
    peer, super_packets = route
    command = Command.SET_ROUTE_SUPER_PACKETS if super_packets else Command.SET_ROUTE
    return CommandMessage(command, subnet, peer)


def _spawn(
    datapath: _Datapath, role: str, queue: int, slot: int, routes: dict[IPv4Network, Route]
) -> _Worker:
    """Start a worker; `routes` are queued before it starts, so it forwards with them."""
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for subnet, route in routes.items():
        parent_end.send(encode_command(_set_route(subnet, route)))
    tun = datapath.queues[queue]
    sock = datapath.sockets[queue].fileno()
    argv = [
        sys.executable,
        "-m",
        UDP_WORKER_MODULE,
        role,
        f"--tun-fd={tun}",
        f"--sock-fd={sock}",
        f"--ctl-fd={child_end.fileno()}",
        f"--stats-fd={datapath.counters_fd}",
        f"--slot={slot}",
        f"--tun-addr={datapath.tun_addr}",
        f"--datagram-size={datapath.mtu}",  # flannel0's MTU: what fits the underlay whole
    ]
    if datapath.offload:
        argv.append("--offload")
    with child_end:
        process = subprocess.Popen(
            argv,
            pass_fds=(tun, sock, child_end.fileno(), datapath.counters_fd),
            env=_worker_env(),
            stdin=subprocess.DEVNULL,
        )
    worker = _Worker(role, queue, slot, process, parent_end)
    parent_end.settimeout(_READY_TIMEOUT)
    try:
        hello = parent_end.recv(len(READY))
    except OSError:
        hello = b""
    parent_end.settimeout(None)
    if hello != READY:
        _stop(worker)
        raise BackendError(f"udp {role} worker for {datapath.tun_name} queue {queue} did not start")
    return worker


def _stop(worker: _Worker) -> None:
    worker.send(encode_command(CommandMessage(Command.STOP)))
    try:
        worker.process.wait(_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
    worker.control.close()


class UdpNetwork:
    """The running udp datapath; the route table mirrors the peer leases."""

    def __init__(
        self, lease: Lease, mtu: int, port: int, datapath: _Datapath, super_packets: bool = False
    ) -> None:
        self.lease = lease
        self.mtu = mtu
        self.port = port
        self.super_packets = super_packets  # this node advertised them
        self._datapath = datapath
        self._routes: dict[IPv4Network, Route] = {}
        self._lock = asyncio.Lock()
        self._refilter()  # no peers yet: nothing gets through

    @property
    def tun_name(self) -> str:
        return self._datapath.tun_name

    @property
    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._datapath.workers]

    def published(self) -> dict[str, object]:
        """The forwarder's device, routes (peer subnet -> "public IP:port"), the subnets that
        super-packets go to, and counters (what it dropped, e.g. datagrams from non-peers) for
        /statusz."""
        routes = {str(s): f"{peer.host}:{peer.port}" for s, (peer, _) in self._routes.items()}
        whole = [str(subnet) for subnet in self.super_packet_subnets()]
        return {
            "udp": {
                "device": self.tun_name,
                "routes": routes,
                "super_packets": whole,
                "counters": self.counters(),
            }
        }

    def programmed_peers(self) -> int:
        """The peers the forwarder has a route to."""
        return len(self._routes)

    def repairs(self) -> Mapping[str, int]:
        """None: the forwarder's routes live in its own table, replayed whole to a worker
        restarted after it died; the kernel holds no entry per peer."""
        return {}

    def super_packet_subnets(self) -> list[IPv4Network]:
        """The peers' subnets that super-packets go to (both ends advertised them)."""
        return sorted(subnet for subnet, (_, whole) in self._routes.items() if whole)

    def counters(self) -> dict[str, int]:
        """Counter name (lower case) -> sum over all workers, and socket_drops: the datagrams
        the kernel dropped at the sockets (not from a peer, or a full buffer)."""
        words = memoryview(self._datapath.counters).cast("Q")
        try:
            counted = {
                counter.name.lower(): sum(
                    words[w.slot * COUNTERS_PER_WORKER + counter] for w in self._datapath.workers
                )
                for counter in Counter
            }
        finally:
            words.release()
        counted["socket_drops"] = sum(socket_filter.dropped(s) for s in self._datapath.sockets)
        return counted

    async def handle_events(self, events: Sequence[LeaseEvent]) -> None:
        async with self._lock:
            for event in events:
                entry = self._route_of(event.lease)
                if entry is None:
                    continue
                subnet, route = entry
                if event.type is EventType.ADDED:
                    peer = route[0]
                    log.info("Adding route to %s via %s:%d", subnet, peer.host, peer.port)
                    self._set(subnet, route)
                else:
                    log.info("Removing route to %s", subnet)
                    self._delete(subnet)
            self._refilter()

    async def reconcile(self, peers: Sequence[Lease]) -> int:
        async with self._lock:
            writes = await asyncio.to_thread(self._revive_workers)
            wanted = dict(e for e in map(self._route_of, peers) if e is not None)
            for subnet in [s for s in self._routes if s not in wanted]:
                self._delete(subnet)
                writes += 1
            for subnet, route in wanted.items():
                if self._routes.get(subnet) != route:
                    self._set(subnet, route)
                    writes += 1
            if writes:
                self._refilter()
            return writes

    async def survey(self) -> None:
        """Nothing to read ahead: the routes are the forwarder's own table."""

    async def recheck(self, peers: Sequence[Lease], survey: KernelSurvey | None = None) -> int:
        """Dead workers are noticed only by looking: every check is a reconcile (cheap)."""
        return await self.reconcile(peers)

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._shutdown)

    def _route_of(self, lease: Lease) -> tuple[IPv4Network, Route] | None:
        route = udp_peer_route(lease)
        if route is None or route[0] == self.lease.subnet:
            return None
        super_packets = self.super_packets and advertises(lease.attrs.backend_data)
        return route[0], (Peer(str(route[1]), self.port), super_packets)

    def _set(self, subnet: IPv4Network, route: Route) -> None:
        self._routes[subnet] = route
        self._broadcast(_set_route(subnet, route))

    def _delete(self, subnet: IPv4Network) -> None:
        self._routes.pop(subnet, None)
        self._broadcast(CommandMessage(Command.DEL_ROUTE, subnet))

    def _refilter(self) -> None:
        """Let through to the sockets the datagrams of the peers the routes name, only."""
        program = socket_filter.peer_filter(
            IPv4Address(peer.host) for peer, _ in self._routes.values()
        )
        for sock in self._datapath.sockets:
            socket_filter.attach(sock, program)

    def _broadcast(self, message: CommandMessage) -> None:
        data = encode_command(message)
        for worker in self._datapath.workers:
            if not worker.send(data):
                log.warning("udp %s worker %d is gone", worker.role, worker.process.pid)

    def _revive_workers(self) -> int:
        """Restart workers that died (their table is replayed); returns how many."""
        revived = 0
        workers = self._datapath.workers
        for i, worker in enumerate(workers):
            if worker.process.poll() is None:
                continue
            log.warning(
                "udp %s worker %d exited with %s; restarting it",
                worker.role,
                worker.process.pid,
                worker.process.returncode,
            )
            worker.control.close()
            workers[i] = _spawn(
                self._datapath, worker.role, worker.queue, worker.slot, self._routes
            )
            revived += 1
        return revived

    def _shutdown(self) -> None:
        try:
            while self._datapath.workers:
                worker = self._datapath.workers.pop()
                try:
                    _stop(worker)
                finally:
                    if worker.process.poll() is None:  # _stop itself failed
                        worker.process.kill()
                        worker.process.wait()
        finally:
            self._datapath.close()


class UdpBackend:
    backend_type = "udp"

    def __init__(
        self, netns: str | None = None, *, queues: int | None = None, offload: bool | None = None
    ) -> None:
        self.netns = netns
        self.queues = queues
        self.offload = offload_available() if offload is None else offload

    async def register_network(
        self,
        config: NetworkConfig,
        ext: ExternalInterface,
        acquire: AcquireLease,
        stored_macs: tuple[str, str] = ("", ""),
    ) -> UdpNetwork:
        if config.network is None or not config.enable_ipv4:
            raise BackendError("the udp backend supports IPv4 networks only")
        if ext.iface_addr is None or ext.ext_addr is None:
            raise BackendError(f"interface {ext.name} has no IPv4 address for the udp backend")
        opts = UdpOptions.of(config)
        port = opts.port
        queues = self.queues or opts.queues
        # Only a forwarder with flannel0's virtio_net_hdr can write super-packets whole.
        super_packets = opts.super_packets and self.offload
        data = backend_data() if super_packets else None
        lease = await acquire(LeaseAttrs(public_ip=ext.ext_addr, backend_data=data))
        if lease.subnet is None:
            raise BackendError("failed to configure interface flannel0: the lease has no IPv4")
        mtu = opts.device_mtu(ext.mtu)
        # the tunnel's subnet is the whole overlay (e.g. /16), not this host's /24
        network = IPv4Network((lease.subnet.network_address, config.network.prefixlen), False)
        datapath = await asyncio.to_thread(
            self._start, ext.iface_addr, port, queues, lease.subnet.network_address, network, mtu
        )
        log.info(
            "udp backend: %s mtu %d, %d queue(s), offload %s, super-packets %s, port %d",
            datapath.tun_name,
            mtu,
            queues,
            "on" if datapath.offload else "off",
            "on" if super_packets else "off",
            port,
        )
        return UdpNetwork(lease, mtu, port, datapath, super_packets)

    def _start(
        self,
        iface_addr: IPv4Address,
        port: int,
        queues: int,
        tun_addr: IPv4Address,
        network: IPv4Network,
        mtu: int,
    ) -> _Datapath:
        offload = self.offload
        try:
            name, fds = run_in_netns(self.netns, lambda: _open_queues(queues, offload))
        except OSError as err:
            raise BackendError(f"failed to open TUN device: {err}") from err
        try:
            sockets = run_in_netns(
                self.netns, lambda: _open_sockets(queues, iface_addr, port, offload)
            )
        except OSError as err:
            for fd in fds:
                os.close(fd)
            raise BackendError(f"failed to bind UDP socket to {iface_addr}:{port}: {err}") from err
        counters_fd = os.memfd_create("pyflannel-udp-counters")
        os.ftruncate(counters_fd, 2 * queues * COUNTERS_PER_WORKER * 8)
        datapath = _Datapath(
            name,
            tun_addr,
            mtu,
            fds,
            sockets,
            offload,
            counters_fd,
            mmap.mmap(counters_fd, 0),
        )
        try:
            _configure_tun(self.netns, name, tun_addr, network, mtu)
            for queue in range(queues):
                for role in UDP_WORKER_ROLES:
                    slot = len(datapath.workers)
                    datapath.workers.append(_spawn(datapath, role, queue, slot, {}))
        except BaseException as err:
            while datapath.workers:
                _stop(datapath.workers.pop())
            datapath.close()
            if isinstance(err, (OSError, NetlinkError)):
                raise BackendError(f"failed to configure interface {name}: {err}") from err
            raise
        return datapath
