"""Many agents against one etcd: what etcd sends and spends, and when every agent has programmed.

An AgentLab of vxlan hosts without lab pods (etcd allocates every subnet), the agents' periodic
reconcile slowed to flanneld's resync period so that it does not add its own load. A host has
programmed when its kernel routes every peer's subnet through flannel.1. What etcd sends is
counted three times: on the wire (br-ul's transmit counter in the underlay, where etcd's address
sits; everything etcd sends to the hosts leaves through it), as the payload of its answers
(`EtcdTap.sent_bytes`: each byte once, without the TCP/IP headers and retransmissions that vary
with the machine's load) and by etcd itself (etcd_network_client_grpc_sent_bytes_total, what its
gRPC server hands its HTTP gateway, the protobuf before JSON). etcd's CPU is its utime + stime
from /proc.

An etcd outage (`etcd_outage`): etcd stopped (SIGTERM) and started again on the same data
directory and port, as a restart of its service would. What the agents ask of it meanwhile and
once it is back is seen on br-ul by `EtcdTap`, timestamped by the kernel: their connection
attempts, their HTTP requests and etcd's answers, each by agent. etcd's own counters cannot say
when within a second a request came; its grpc_server_started_total (every gateway request is
one gRPC call, counted from its start) checks the tap's total.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

from pyflannel_lab.netns_agents import AGENT_PROGRAM, PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.subnet.etcd.resume import STATE_FILE_NAME
from pyflannel_runtime.wire.lease import LeaseAttrs, make_subnet_key

RECONCILE_INTERVAL = 30  # flanneld's resync period: the reconcile is not what is measured
GRPC_SENT = "etcd_network_client_grpc_sent_bytes_total"
GRPC_STARTED = "grpc_server_started_total"


def fanout_lab(agents: int, prefix: str = "pfo") -> AgentLab:
    return AgentLab({"Type": "vxlan"}, hosts=agents, prefix=prefix, ip_masq=False, lab_pods=False)


@dataclass(frozen=True)
class EtcdCost:
    wire_bytes: int
    grpc_bytes: int
    cpu_seconds: float

    def __sub__(self, other: EtcdCost) -> EtcdCost:
        return EtcdCost(
            self.wire_bytes - other.wire_bytes,
            self.grpc_bytes - other.grpc_bytes,
            self.cpu_seconds - other.cpu_seconds,
        )


def cpu_seconds(pid: int) -> float:
    """The process's utime + stime so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14 and 15


def etcd_metric(lab: AgentLab, name: str) -> float:
    """The sum of a metric of etcd's over all its labels."""
    assert lab.etcd is not None
    url = f"http://{lab.etcd.host}:{lab.etcd.client_port}/metrics"
    metrics = run_in_netns(lab.net.ul, lambda: urllib.request.urlopen(url, timeout=10).read())
    return sum(
        float(line.split()[-1]) for line in metrics.decode().splitlines() if line.startswith(name)
    )


def etcd_cost(lab: AgentLab) -> EtcdCost:
    """What etcd has sent and spent so far."""
    assert lab.etcd is not None and lab.etcd.process is not None
    shown = json.loads(lab.net.ip(lab.net.ul, "-j", "-s", "link", "show", "br-ul"))
    wire = int(shown[0]["stats64"]["tx"]["bytes"])
    grpc = etcd_metric(lab, GRPC_SENT)
    return EtcdCost(wire, int(grpc), cpu_seconds(lab.etcd.process.pid))


def peer_routes(lab: AgentLab, host: LabHost) -> set[IPv4Network]:
    """The subnets `host`'s kernel routes through flannel.1."""
    shown = lab.net.run(host.ns, "ip", "-4", "route", "show", "dev", "flannel.1", check=False)
    return {IPv4Network(line.split()[0]) for line in shown.stdout.splitlines() if " via " in line}


def wait_programmed(lab: AgentLab, peers: int, timeout: float) -> dict[str, float]:
    """Poll every host until its kernel routes `peers` subnets through flannel.1; when each host
    was first seen so (monotonic). Raises on timeout, naming the hosts that were not."""
    pending = {host.ns: host for host in lab.net.hosts}
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for ns, host in list(pending.items()):
            if len(peer_routes(lab, host)) >= peers:
                done[ns] = time.monotonic()
                del pending[ns]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"not programmed after {timeout} s: {sorted(pending)}")
        time.sleep(0.1)
    return done


def start_agents(
    lab: AgentLab,
    spread: float = 0.0,
    program: Sequence[str] = AGENT_PROGRAM,
    cwd: Path | None = None,
) -> None:
    """Start every host's agent (`program` in `cwd`, as AgentLab.start_agent runs it), all at
    once or evenly over `spread` seconds."""
    gap = spread / len(lab.net.hosts)
    for host in lab.net.hosts:
        lab.start_agent(
            host, f"--reconcile-interval={RECONCILE_INTERVAL}", program=program, cwd=cwd
        )
        if gap:
            time.sleep(gap)


def stop_agents(lab: AgentLab, timeout: float = 60.0) -> None:
    """SIGTERM every agent at once and wait for them all: one signal each (a second one takes
    the default action, which would end an agent in the middle of its shutdown)."""
    agents = list(lab.agents.values())
    for agent in agents:
        agent.process.send_signal(signal.SIGTERM)
    for agent in agents:
        try:
            agent.process.wait(timeout)
        except subprocess.TimeoutExpired:
            agent.process.kill()
            agent.process.wait()
            raise
        finally:
            lab.agents.pop(agent.host.n)


def forget_routes(lab: AgentLab) -> None:
    """Flush flannel.1's routes on every host, as a rebooted node would come up without them,
    so that a restart shows when the peers are back."""
    for host in lab.net.hosts:
        lab.net.ip(host.ns, "route", "flush", "dev", "flannel.1")


def free_subnet(lab: AgentLab) -> IPv4Network:
    """A /24 of 10.244.0.0/16 no host holds."""
    taken = {str(peer) for peer in peer_routes(lab, lab.net.hosts[0])}
    taken |= {str(network) for network in own_subnets(lab)}
    return next(
        IPv4Network(f"10.244.{n}.0/24")
        for n in range(255, 0, -1)
        if f"10.244.{n}.0/24" not in taken
    )


def own_subnets(lab: AgentLab) -> list[IPv4Network]:
    """Every host's leased subnet, from its subnet.env."""
    subnets = []
    for host in lab.net.hosts:
        env = dict(
            line.split("=", 1) for line in lab.subnet_file(host).read_text().splitlines() if line
        )
        subnets.append(IPv4Network(env["FLANNEL_SUBNET"], strict=False))
    return subnets


def add_peer(lab: AgentLab, subnet: IPv4Network) -> None:
    """One lease change: a new vxlan peer's lease (no etcd lease: a reservation-style key)."""
    attrs = LeaseAttrs(
        public_ip=IPv4Address("192.0.2.250"),
        backend_type="vxlan",
        backend_data='{"VNI":1,"VtepMAC":"0e:00:00:00:00:fa"}',
    )
    lab.etcdctl("put", f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}", attrs.to_json())


def remove_peer(lab: AgentLab, subnet: IPv4Network) -> None:
    """The peer `add_peer` made leaves; back when no host routes it any more."""
    lab.etcdctl("del", f"{PREFIX}/subnets/{make_subnet_key(subnet, None)}")
    for host in lab.net.hosts:
        deadline = time.monotonic() + 60
        while subnet in peer_routes(lab, host):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host.ns} still routes {subnet}")
            time.sleep(0.1)


def forget_state(lab: AgentLab) -> None:
    """Remove every host's kept lease watch state, as a reboot (which empties /run) would: the
    next start lists every lease."""
    for host in lab.net.hosts:
        (lab.subnet_file(host).parent / STATE_FILE_NAME).unlink(missing_ok=True)


def agent_cpu_seconds(lab: AgentLab) -> float:
    """The running agents' utime + stime so far."""
    return sum(cpu_seconds(agent.process.pid) for agent in lab.agents.values())


# --- an etcd outage -----------------------------------------------------------------------------

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_STATISTICS = 6
SNAP = 256  # bytes kept of each packet: the headers and the payload's first bytes
_TIMESPEC = struct.Struct("=qq")
_TCP_SYN, _TCP_ACK = 0x02, 0x10


def tcp_port_filter(port: int) -> bytes:
    """A classic BPF program for a packet socket of SOCK_DGRAM (the packet starts at its IP
    header): IPv4 TCP segments from or to `port`, each cut to SNAP bytes; nothing else, so
    that a burst of them never overflows the socket's queue."""
    drop, keep = 12, 11
    program = [
        (0x28, 0, 0, 0xFFFFF000),  # A = the frame's protocol (SKF_AD_PROTOCOL)
        (0x15, 0, drop - 2, ETH_P_IP),
        (0x30, 0, 0, 9),  # A = IP protocol
        (0x15, 0, drop - 4, socket.IPPROTO_TCP),
        (0x28, 0, 0, 6),  # A = flags and fragment offset
        (0x45, drop - 6, 0, 0x1FFF),  # a later fragment has no TCP header
        (0xB1, 0, 0, 0),  # X = the IP header's length
        (0x48, 0, 0, 0),  # A = TCP source port
        (0x15, keep - 9, 0, port),
        (0x48, 0, 0, 2),  # A = TCP destination port
        (0x15, keep - 11, drop - 11, port),
        (0x06, 0, 0, SNAP),
        (0x06, 0, 0, 0),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


@dataclass(frozen=True)
class Seen:
    """One packet between an agent and etcd's client port."""

    at: float  # the kernel's receive time (Unix time)
    agent: str  # the agent's underlay address
    kind: str  # "attempt": a connection opened (SYN); "request": an HTTP request sent;
    #            "answer": an HTTP 200 from etcd (a request that succeeded)


def classify(packet: bytes, port: int) -> tuple[str, str] | None:
    """An IPv4 packet as (kind, agent address) for `Seen`, or None when it is none of those:
    a SYN to `port`, a TCP segment to it that opens with "POST ", one from it that opens with
    "HTTP/1.1 200"."""
    headers = _tcp_headers(packet)
    if headers is None:
        return None
    ip, tcp = headers
    source, destination = socket.inet_ntoa(packet[12:16]), socket.inet_ntoa(packet[16:20])
    sport, dport = struct.unpack_from("!HH", packet, ip)
    flags = packet[ip + 13]
    payload = packet[ip + tcp :]
    if dport == port:
        if flags & (_TCP_SYN | _TCP_ACK) == _TCP_SYN:
            return "attempt", source
        if payload.startswith(b"POST "):
            return "request", source
    elif sport == port and payload.startswith(b"HTTP/1.1 200"):
        return "answer", destination
    return None


def sent_segment(packet: bytes, port: int) -> tuple[tuple[str, int], int, int] | None:
    """An IPv4 TCP segment from `port` as (its flow: the receiver's address and port, its
    sequence number, its payload's length), from the headers alone (a tap keeps SNAP bytes of
    it); None for anything else."""
    headers = _tcp_headers(packet)
    if headers is None:
        return None
    ip, tcp = headers
    sport, dport, sequence = struct.unpack_from("!HHI", packet, ip)
    if sport != port:
        return None
    (total,) = struct.unpack_from("!H", packet, 2)
    return (socket.inet_ntoa(packet[16:20]), dport), sequence, max(total - ip - tcp, 0)


def _tcp_headers(packet: bytes) -> tuple[int, int] | None:
    """The lengths of an IPv4 TCP segment's IP and TCP headers; None for any other packet, or
    one cut too short to hold them."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[9] != socket.IPPROTO_TCP:
        return None
    ip = (packet[0] & 0x0F) * 4
    if len(packet) < ip + 20:
        return None
    return ip, (packet[ip + 12] >> 4) * 4


class UniqueBytes:
    """TCP payload bytes sent, each counted once: a retransmission (a segment that ends at or
    before the furthest byte its flow sent) adds nothing. A tap beside the sender sees every
    segment in the order it was sent, so nothing arrives past a gap."""

    def __init__(self) -> None:
        self.total = 0
        self._sent_to: dict[
            tuple[str, int], int
        ] = {}  # flow -> sequence number after its last byte

    def add(self, flow: tuple[str, int], sequence: int, length: int) -> None:
        end = (sequence + length) % 2**32
        furthest = self._sent_to.get(flow)
        if furthest is None:
            self._sent_to[flow] = end
            self.total += length
            return
        ahead = (end - furthest) % 2**32
        if 0 < ahead < 2**31:  # serial number arithmetic (RFC 1982): end is past furthest
            self._sent_to[flow] = end
            self.total += min(ahead, length)


class EtcdTap:
    """Every agent's connection attempts, requests and answered requests on `device` (in
    `netns`) to and from etcd's client `port`, timestamped by the kernel, until `stop()`; and
    the payload bytes etcd sent, each counted once (`sent_bytes`)."""

    def __init__(self, netns: str, device: str, port: int) -> None:
        code = tcp_port_filter(port)
        program = ctypes.create_string_buffer(code, len(code))  # struct sock_fprog points at it
        fprog = struct.pack("HL", len(code) // 8, ctypes.addressof(program))

        def create() -> socket.socket:
            # All protocols: the kernel hands what a host sends (etcd's answers) only to taps
            # of every protocol. Filtered before it is bound: nothing else is ever queued.
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
            sock.bind((device, ETH_P_ALL))
            return sock

        self._port = port
        self._sock = run_in_netns(netns, create)
        self._sock.settimeout(0.2)
        self._seen: list[Seen] = []
        self._sent = UniqueBytes()
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="etcd-tap", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    packet, ancillary, _, _ = self._sock.recvmsg(SNAP, socket.CMSG_SPACE(16))
                except TimeoutError:
                    continue
                segment = sent_segment(packet, self._port)
                if segment is not None:
                    self._sent.add(*segment)
                found = classify(packet, self._port)
                if found is None:
                    continue
                at = time.time()
                for level, kind, data in ancillary:
                    if (level, kind) == (socket.SOL_SOCKET, SO_TIMESTAMPNS):
                        seconds, nanoseconds = _TIMESPEC.unpack(data[: _TIMESPEC.size])
                        at = seconds + nanoseconds / 1e9
                self._seen.append(Seen(at, found[1], found[0]))
        except BaseException as err:  # raised again by seen() and stop()
            self._failure = err

    def _check(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"the tap failed: {self._failure!r}") from self._failure

    def seen(self, kind: str) -> list[Seen]:
        """What was seen so far of one kind, in time order."""
        self._check()
        return sorted((s for s in list(self._seen) if s.kind == kind), key=lambda s: s.at)

    def sent_bytes(self) -> int:
        """The payload bytes etcd sent so far, without retransmissions and TCP/IP headers."""
        self._check()
        return self._sent.total

    def dropped(self) -> int:
        """Packets the kernel dropped for want of room in the socket's queue, so far."""
        stats = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        return int(struct.unpack("=II", stats)[1])

    def stop(self) -> list[Seen]:
        """Everything seen, in time order; raises when the kernel dropped any of it."""
        self._stop.set()
        self._thread.join()
        dropped = self.dropped()
        self._sock.close()
        self._check()
        if dropped:
            raise RuntimeError(f"the tap lost {dropped} packets: the figures would be short")
        return sorted(self._seen, key=lambda s: s.at)


@dataclass(frozen=True)
class Recovery:
    """What the agents asked of etcd through an outage (Unix times)."""

    stopped: float  # etcd was stopped
    started: float  # etcd was started again
    returned: float  # etcd answered its health check again
    seen: list[Seen] = field(repr=False)
    etcd_requests: int  # etcd's own count of requests since it started again

    def times(self, kind: str, start: float, end: float = float("inf")) -> list[float]:
        return [s.at for s in self.seen if s.kind == kind and start <= s.at < end]

    def reconnects(self) -> dict[str, float]:
        """Per agent: seconds from etcd's return to the agent's first request it answered
        (which can come a little before its health check passed)."""
        first: dict[str, float] = {}
        for seen in self.seen:
            if seen.kind == "answer" and seen.at >= self.started and seen.agent not in first:
                first[seen.agent] = seen.at - self.returned
        return first

    def requests_after_return(self, seconds: float) -> int:
        return len(self.times("request", self.returned, self.returned + seconds))

    def peak(self, kind: str, window: float, start: float, end: float) -> int:
        """The most packets of `kind` within any `window` seconds between start and end."""
        times = self.times(kind, start, end)
        return max(
            (bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0
        )


def agent_logs(lab: AgentLab, addresses: set[str], lines: int = 8) -> str:
    """The last lines of the logs of the agents at these underlay addresses."""
    shown = []
    for agent in lab.agents.values():
        if str(agent.host.underlay_ip) in addresses:
            state = (
                "running" if agent.process.poll() is None else f"exited {agent.process.returncode}"
            )
            tail = "\n".join(agent.log().splitlines()[-lines:])
            shown.append(f"{agent.host.ns} ({state}):\n{tail}")
    return "\n".join(shown)


def etcd_health(lab: AgentLab) -> bool:
    """etcd's /health says true (it serves, with a leader). Not a gRPC call: etcd's request
    counters leave it out."""
    assert lab.etcd is not None
    url = f"http://{lab.etcd.host}:{lab.etcd.client_port}/health"

    def ask() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    return run_in_netns(lab.net.ul, ask)


def etcd_outage(
    lab: AgentLab, seconds: float, follow: float = 10.0, timeout: float = 120.0
) -> Recovery:
    """Stop etcd (SIGTERM) for `seconds`, start it again on the same data and port, and follow
    the agents for `follow` seconds after its return, and at least until every one has had a
    request answered."""
    etcd = lab.etcd
    assert etcd is not None and etcd.process is not None
    agents = {str(host.underlay_ip) for host in lab.net.hosts}
    tap = EtcdTap(lab.net.ul, "br-ul", etcd.client_port)
    try:
        stopped = time.time()
        etcd.process.terminate()
        etcd.process.wait(30)
        time.sleep(max(0.0, stopped + seconds - time.time()))
        started = time.time()
        etcd.spawn()
        while not etcd_health(lab):
            if time.time() > started + timeout or not etcd.running:
                raise RuntimeError(f"etcd did not come back:\n{etcd.log_tail()}")
            time.sleep(0.02)
        returned = time.time()
        while late := agents - {s.agent for s in tap.seen("answer") if s.at >= started}:
            if time.time() > returned + timeout:
                raise RuntimeError(
                    f"no request of {sorted(late)} answered after {timeout} s "
                    f"(tap dropped {tap.dropped()}):\n" + agent_logs(lab, late)
                )
            time.sleep(0.1)
        time.sleep(max(0.0, returned + follow - time.time()))
        requests = int(etcd_metric(lab, GRPC_STARTED))
    finally:
        seen = tap.stop()
    return Recovery(stopped, started, returned, seen, requests)
