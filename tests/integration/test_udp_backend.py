"""The udp backend in a 3-host netns lab: flannel0, peers over UDP 8285, a socat foreign peer."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address
from pathlib import Path

import pytest

from pyflannel_lab.flood import inner_packet
from pyflannel_lab.netns_lab import (
    LabHost,
    NetLab,
    close_udp_network,
    external_interface,
    host_lease,
)
from pyflannel_runtime.backend.udp import socket_filter
from pyflannel_runtime.backend.udp.udp import UdpBackend, UdpNetwork
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import check_network_config, parse_config

pytestmark = pytest.mark.root

POD_MTU = 1472  # FLANNEL_MTU for a 1500-byte underlay
IP_RECVERR = 11
NET_CONF = '{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}'
SUPER_PACKETS_CONF = (
    '{"Network": "10.244.0.0/16", "Backend": {"Type": "udp", "SuperPackets": true}}'
)


async def start_network(
    lab: NetLab, host: LabHost, peers: list[LabHost], **options: bool | int
) -> UdpNetwork:
    config = check_network_config(parse_config(NET_CONF))
    seen: list[LeaseAttrs] = []

    async def acquire(attrs: LeaseAttrs) -> Lease:
        seen.append(attrs)
        return host_lease(host)

    backend = UdpBackend(host.ns, **options)  # type: ignore[arg-type]
    network = await backend.register_network(config, external_interface(lab, host), acquire)
    assert seen == [LeaseAttrs(public_ip=host.underlay_ip)]
    await network.reconcile([host_lease(p) for p in peers])
    return network


async def start_advertising(lab: NetLab, host: LabHost) -> UdpNetwork:
    """A network with the SuperPackets option: its lease carries what it advertised."""
    config = check_network_config(parse_config(SUPER_PACKETS_CONF))

    async def acquire(attrs: LeaseAttrs) -> Lease:
        return Lease(host.subnet, None, attrs)

    backend = UdpBackend(host.ns, offload=True)
    return await backend.register_network(config, external_interface(lab, host), acquire)


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with NetLab(prefix="pudp", hosts=3, pod_mtu=POD_MTU) as net:
        yield net


@pytest.fixture
def networks() -> Iterator[list[UdpNetwork]]:
    """Networks to close at the end; their worker PIDs are killed if close() fails."""
    started: list[UdpNetwork] = []
    yield started
    for network in started:
        close_udp_network(network)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def cluster(lab: NetLab, networks: list[UdpNetwork]) -> list[UdpNetwork]:
    for host in lab.hosts:
        others = [h for h in lab.hosts if h is not host]
        networks.append(asyncio.run(start_network(lab, host, others)))
    return networks


def test_flannel0_is_configured_like_flannel(lab: NetLab, cluster: list[UdpNetwork]) -> None:
    host = lab.hosts[0]
    network = cluster[0]
    assert network.tun_name == "flannel0"
    assert network.mtu == 1500 - 28 == POD_MTU
    link = lab.ip(host.ns, "-d", "link", "show", "flannel0")
    assert "mtu 1472" in link and "qlen 10000" in link and "tun" in link
    assert "inet 10.244.1.0/32" in lab.ip(host.ns, "-4", "addr", "show", "dev", "flannel0")
    assert "10.244.0.0/16 dev flannel0" in lab.ip(host.ns, "route", "show")
    # IPv4 alone: no IPv6 address, so no router solicitations or MLD reports into the tunnel.
    ipv6 = lab.run(host.ns, "sysctl", "-n", "net.ipv6.conf.flannel0.disable_ipv6").stdout
    assert ipv6.strip() == "1"
    assert "inet6" not in lab.ip(host.ns, "addr", "show", "dev", "flannel0")


def test_pods_ping_each_other_both_ways(lab: NetLab, cluster: list[UdpNetwork]) -> None:
    for src in lab.hosts:
        for dst in lab.hosts:
            if src is not dst:
                assert lab.ping(src.pod_ns, dst.pod_ip, count=2), f"{src.pod_ns} -> {dst.pod_ip}"
    assert [network.counters()["malformed"] for network in cluster] == [0] * len(cluster)


def test_df_ping_of_pod_mtu_crosses_and_one_more_byte_is_refused(
    lab: NetLab, cluster: list[UdpNetwork]
) -> None:
    p1, p2 = lab.hosts[0], lab.hosts[1]
    assert lab.ping(p1.pod_ns, p2.pod_ip, size=POD_MTU - 28, dont_fragment=True)
    assert not lab.ping(p1.pod_ns, p2.pod_ip, size=POD_MTU - 28 + 1, dont_fragment=True)
    # the pod is not the only guard: flannel0 itself refuses a larger DF packet
    out = lab.run(
        lab.hosts[0].ns, "ping", "-c1", "-W2", "-M", "do", "-s", "1445", "10.244.2.10", check=False
    )
    assert out.returncode != 0 and re.search(r"mtu ?= ?1472|too long", out.stdout + out.stderr)


def udp_probe_error(ns: str, destination: IPv4Address | str) -> int:
    """Send one UDP datagram from `ns`; the errno an ICMP error turned into (0: none came)."""

    def probe() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            # net unreachable is a soft error, reported to UDP sockets only with IP_RECVERR
            sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
            # A hang guard: the error comes as soon as the forwarder answers, later on a busy
            # machine.
            sock.settimeout(30)
            sock.connect((str(destination), 9))
            sock.send(b"anyone?")
            try:
                sock.recv(100)
            except TimeoutError:
                return 0
            except OSError as err:
                return err.errno or 0
            return 0

    return run_in_netns(ns, probe)


def test_unknown_destination_gets_icmp_net_unreachable(
    lab: NetLab, cluster: list[UdpNetwork]
) -> None:
    assert udp_probe_error(lab.hosts[0].pod_ns, "10.244.9.10") == errno.ENETUNREACH
    assert cluster[0].counters()["no_route"] == 1


def test_no_icmp_error_is_sent_about_icmp(lab: NetLab, cluster: list[UdpNetwork]) -> None:
    out = lab.run(lab.hosts[0].pod_ns, "ping", "-n", "-c1", "-W1", "10.244.9.10", check=False)
    assert out.returncode != 0 and "Unreachable" not in out.stdout
    assert cluster[0].counters()["no_route"] == 1


def _tun_rx_packets(lab: NetLab, ns: str) -> int:
    stats = lab.ip(ns, "-s", "-j", "link", "show", "flannel0")
    match = re.search(r'"rx":\{"bytes":\d+,"packets":(\d+)', stats)
    assert match, stats
    return int(match.group(1))


def test_datagram_from_a_non_peer_is_dropped_and_counted(
    lab: NetLab, cluster: list[UdpNetwork], monkeypatch: pytest.MonkeyPatch
) -> None:
    host = lab.hosts[0]
    stranger = "192.0.2.99"
    lab.ip(lab.ul, "addr", "add", f"{stranger}/24", "dev", "br-ul")
    inner = inner_packet(IPv4Address("10.244.2.10"), host.pod_ip, b"not from a peer")
    before = _tun_rx_packets(lab, host.ns)

    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind((stranger, 8285))
            for _ in range(3):
                sock.sendto(inner, (str(host.underlay_ip), 8285))

    # The socket filter drops them in the kernel, which counts them at the socket.
    run_in_netns(lab.ul, send)
    wait_for(lambda: cluster[0].counters()["socket_drops"] >= 3)
    assert cluster[0].counters()["socket_drops"] == 3
    assert cluster[0].counters()["foreign_source"] == 0
    assert _tun_rx_packets(lab, host.ns) == before
    # Too many peers for the filter: the forwarder drops and counts them itself.
    monkeypatch.setattr(socket_filter, "MAX_FILTERED_PEERS", 0)
    peers = [host_lease(h) for h in lab.hosts[1:]]
    assert asyncio.run(cluster[0].reconcile(peers[1:])) == 1  # a change refilters
    assert asyncio.run(cluster[0].reconcile(peers)) == 1
    run_in_netns(lab.ul, send)
    wait_for(lambda: cluster[0].counters()["foreign_source"] >= 3)
    assert cluster[0].counters()["foreign_source"] == 3
    assert cluster[0].counters()["socket_drops"] == 3
    assert _tun_rx_packets(lab, host.ns) == before
    # the same packet from a real peer's address is delivered
    peer = lab.hosts[1]
    run_in_netns(peer.ns, lambda: _send_from(str(peer.underlay_ip), inner, host))
    wait_for(lambda: _tun_rx_packets(lab, host.ns) > before)


def _send_from(source: str, data: bytes, host: LabHost) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((source, 0))
        sock.sendto(data, (str(host.underlay_ip), 8285))


def test_removed_peer_is_unreachable_and_readded_peer_works(
    lab: NetLab, cluster: list[UdpNetwork]
) -> None:
    p1, p2, p3 = lab.hosts
    assert asyncio.run(cluster[0].reconcile([host_lease(p3)])) == 1
    assert asyncio.run(cluster[0].reconcile([host_lease(p3)])) == 0
    assert udp_probe_error(p1.pod_ns, p2.pod_ip) == errno.ENETUNREACH
    assert asyncio.run(cluster[0].reconcile([host_lease(p2), host_lease(p3)])) == 1
    assert lab.ping(p1.pod_ns, p2.pod_ip, count=2)


def test_a_killed_worker_is_restarted_by_reconcile(lab: NetLab, cluster: list[UdpNetwork]) -> None:
    network = cluster[0]
    victim = network.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    peers = [host_lease(h) for h in lab.hosts[1:]]
    # reconcile revives a worker once it can be reaped (its threads may still be exiting)
    wait_for(lambda: asyncio.run(network.reconcile(peers)) == 1)
    assert asyncio.run(network.reconcile(peers)) == 0
    assert victim not in network.worker_pids
    assert lab.ping(lab.hosts[0].pod_ns, lab.hosts[1].pod_ip, count=2)


def _is_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_close_stops_forwarding_and_removes_flannel0(
    lab: NetLab, networks: list[UdpNetwork]
) -> None:
    h1, h2, _ = lab.hosts
    networks.append(asyncio.run(start_network(lab, h1, [h2])))
    networks.append(asyncio.run(start_network(lab, h2, [h1])))
    assert lab.ping(h1.pod_ns, h2.pod_ip)
    pids = networks[0].worker_pids
    asyncio.run(networks[0].close())
    assert all(_is_gone(pid) for pid in pids)
    assert "flannel0" not in lab.ip(h1.ns, "link", "show")
    assert not lab.ping(h1.pod_ns, h2.pod_ip, timeout=1)
    networks.pop(0)


@pytest.mark.parametrize(
    ("offload", "queues"),
    [(False, 1), (True, 1), (False, 2)],
    ids=["plain", "offload", "plain-2-queues"],
)
def test_tcp_stream_crosses_intact(
    lab: NetLab,
    networks: list[UdpNetwork],
    processes: list[subprocess.Popen[bytes]],
    offload: bool,
    queues: int,
    tmp_path: Path,
) -> None:
    """A bulk TCP transfer (TSO super-packets when offloading) arrives byte for byte."""
    h1, h2, _ = lab.hosts
    networks.append(asyncio.run(start_network(lab, h1, [h2], offload=offload, queues=queues)))
    networks.append(asyncio.run(start_network(lab, h2, [h1], offload=offload, queues=queues)))
    assert len(networks[0].worker_pids) == 2 * queues
    blob = os.urandom(4 << 20)
    send_stream(lab, h1, h2, processes, blob, tmp_path / "received")
    assert (tmp_path / "received").read_bytes() == blob


def test_mixed_cluster_with_a_socat_peer(
    lab: NetLab, networks: list[UdpNetwork], processes: list[subprocess.Popen[bytes]]
) -> None:
    """h3 runs socat as its udp forwarder (flannel's framing, one packet per datagram)."""
    h1, _, h3 = lab.hosts
    networks.append(asyncio.run(start_network(lab, h1, [h3])))
    start_socat_peer(lab, h3, h1, processes)
    assert lab.ping(h1.pod_ns, h3.pod_ip, count=2)
    assert lab.ping(h3.pod_ns, h1.pod_ip, count=2)
    assert lab.ping(h1.pod_ns, h3.pod_ip, size=POD_MTU - 28, dont_fragment=True)


def start_socat_peer(
    lab: NetLab, host: LabHost, peer: LabHost, processes: list[subprocess.Popen[bytes]]
) -> None:
    """socat as `host`'s udp forwarder to `peer` (flannel's framing, one packet per datagram)."""
    socat = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            host.ns,
            "socat",
            f"UDP:{peer.underlay_ip}:8285,bind={host.underlay_ip}:8285",
            f"TUN:{host.subnet.network_address}/16,tun-name=flannel0,tun-type=tun,iff-no-pi,iff-up",
        ],
        stderr=subprocess.PIPE,
    )
    processes.append(socat)
    wait_for(lambda: "flannel0" in lab.ip(host.ns, "link", "show"))
    lab.ip(host.ns, "link", "set", "flannel0", "mtu", str(POD_MTU))


def send_stream(
    lab: NetLab,
    source: LabHost,
    sink_host: LabHost,
    processes: list[subprocess.Popen[bytes]],
    blob: bytes,
    sink: Path,
) -> None:
    """`blob` over TCP from `source`'s pod to `sink_host`'s pod, into the file `sink`."""
    listen = ["socat", "-u", "TCP-LISTEN:5001,reuseaddr", f"CREATE:{sink}"]
    server = subprocess.Popen(["ip", "netns", "exec", sink_host.pod_ns, *listen])
    processes.append(server)
    wait_for(lambda: ":5001" in lab.run(sink_host.pod_ns, "ss", "-ltn").stdout)
    connect = ["socat", "-u", "STDIN", f"TCP:{sink_host.pod_ip}:5001"]
    subprocess.run(
        ["ip", "netns", "exec", source.pod_ns, *connect], input=blob, timeout=60, check=True
    )
    assert server.wait(timeout=60) == 0


class UdpCapture:
    """The first payload byte of every UDP datagram to port 8285 that `ns`'s eth0 receives
    (AF_PACKET: GSO packets are seen whole, before any segmentation)."""

    def __init__(self, ns: str) -> None:
        def create() -> socket.socket:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
            sock.bind(("eth0", 0x0800))
            return sock

        self._sock = run_in_netns(ns, create)
        self._sock.setblocking(False)

    def first_bytes(self) -> set[int]:
        seen: set[int] = set()
        while True:
            try:
                data, (_, _, kind, *_) = self._sock.recvfrom(128)
            except BlockingIOError:
                return seen
            ihl = (data[0] & 0x0F) * 4
            incoming_udp = kind != socket.PACKET_OUTGOING and data[9] == 17
            if incoming_udp and struct.unpack_from("!H", data, ihl + 2)[0] == 8285:
                seen.add(data[ihl + 8])

    def close(self) -> None:
        self._sock.close()


def test_super_packets_are_negotiated_per_peer(
    lab: NetLab,
    networks: list[UdpNetwork],
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """h1 and h2 advertise super-packets and send each other TCP super-packets whole; h3 is a
    socat peer whose lease advertises nothing, so h1 keeps flannel's framing towards it. Bulk
    TCP arrives byte for byte both ways, and the wire shows which framing each pair uses."""
    h1, h2, h3 = lab.hosts
    one = asyncio.run(start_advertising(lab, h1))
    networks.append(one)
    two = asyncio.run(start_advertising(lab, h2))
    networks.append(two)
    assert one.lease.attrs.backend_data == '{"SuperPackets":1}'
    asyncio.run(one.reconcile([two.lease, host_lease(h3)]))
    asyncio.run(two.reconcile([one.lease]))
    start_socat_peer(lab, h3, h1, processes)
    assert one.super_packet_subnets() == [h2.subnet]
    assert two.super_packet_subnets() == [h1.subnet]
    # /statusz shows them beside the routes and the drop counters
    shown = one.published()["udp"]
    assert isinstance(shown, dict)
    assert shown["super_packets"] == [str(h2.subnet)]
    assert set(shown["routes"]) == {str(h2.subnet), str(h3.subnet)}
    assert {"socket_drops", "super_packets_dropped"} <= set(shown["counters"])

    blob = os.urandom(8 << 20)
    at_two, at_three = UdpCapture(h2.ns), UdpCapture(h3.ns)
    try:
        send_stream(lab, h1, h2, processes, blob, tmp_path / "h2")
        send_stream(lab, h2, h1, processes, blob[::-1], tmp_path / "h1")
        send_stream(lab, h1, h3, processes, blob[: 1 << 20], tmp_path / "h3")
        to_two, to_three = at_two.first_bytes(), at_three.first_bytes()
    finally:
        at_two.close()
        at_three.close()
    assert (tmp_path / "h2").read_bytes() == blob
    assert (tmp_path / "h1").read_bytes() == blob[::-1]
    assert (tmp_path / "h3").read_bytes() == blob[: 1 << 20]
    assert any(b >> 4 == 0xF for b in to_two), "no super-packet reached h2"
    assert to_three == {0x45}, "h3 got something other than plain IPv4 packets"
    assert one.counters()["super_packets_dropped"] == two.counters()["super_packets_dropped"] == 0

    # h2 stops advertising (restarted without the option): h1 falls back for h2 alone.
    asyncio.run(one.reconcile([host_lease(h2), host_lease(h3)]))
    assert one.super_packet_subnets() == []
    assert lab.ping(h1.pod_ns, h2.pod_ip, count=2)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)
