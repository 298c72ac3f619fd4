"""One pyflanneld (vxlan) against 5 000 peer leases in a real etcd: programming time, event
latency, memory and steady-state writes.

Lab: an AgentLab with one host (pyflannel_lab/netns_agents.py), the cluster config
changed to SubnetLen 29 so 5 000 peers fit in 10.244.0.0/16, the host's lease reserved as
10.244.0.8/29.
Peer leases are put into etcd before the agent starts (aetcd transactions, from a helper
process in the underlay namespace, where etcd listens), attached to an etcd lease as flanneld's
keys are. The agent runs with flanneld's default
reconcile interval (10 s). A netlink monitor in the host namespace (RTNLGRP_IPV4_ROUTE and
RTNLGRP_NEIGH, which carries FDB changes too) timestamps every kernel change.

Figures:
  * full programming: subnet.env written -> the last of the 15 000 entries in the kernel (the
    agent plans from the listing its subnet allocation made just before, then dumps the
    kernel, diffs and writes; "agent start ->" also counts that listing and the start-up),
    and the write phase alone (first -> last peer entry), each over `ip -batch` +
    `bridge -batch` writing the same entries in a fresh namespace right before; the median
    of these ratios over 5 cold starts (the agent stopped and flannel.1 deleted in between),
    as this VM's vCPU speed swings up to 2x from second to second;
  * event-to-kernel latency: etcd put (or delete) of a lease -> its route appearing (or going)
    in the kernel, for 100 puts then 100 deletes, paced 20 ms apart;
  * agent RSS (VmRSS) with 5 000 peers programmed;
  * netlink writes during 2 reconcile intervals without any change (kernel changes seen by the
    monitor, and the agent's "Reconcile repaired" log lines);
  * idle CPU: the agent's user and system time, its children's (iptables checks) included,
    over a minute without any change, in % of a core (no scrape meanwhile);
  * a scrape of /metrics (when the agent serves it): the round trip of GET /metrics over
    loopback, the answer's size, the agent's CPU per scrape (its idle rate taken off), what a
    scrape every 15 s adds to its idle CPU, and its RSS after the scrapes; and what one no-change full reconcile
    costs (the kernel dump and diff the agent makes once per FULL_RECONCILE_PERIOD while the
    kernel's notifications report nothing, earlier at every check), timed here on the same
    kernel state, and that cost spread over the period;
  * repair latency: routes, neighbours and FDB entries of random peers deleted with
    `ip`/`bridge` one at a time (100 ms apart), from the kernel's deletion notification to
    the one of the entry put back.

Finishes with `metric: value` lines. Needs root:
    PYTHONPATH=. python bench/bench_agent_scale.py [--peers 5000] [--events 200] [--idle-seconds 60]
        [--agent-arg=--metrics=false]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import re
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path

from bench_netlink import iproute2, make_host
from sigterm import interrupt_on_sigterm

from pyflannel_lab.churn import NETWORK, SUBNET_LEN, configure
from pyflannel_lab.netns_agents import AGENT_PROGRAM, HEALTHZ_PORT, PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.backend.peers import VxlanDevices
from pyflannel_runtime.backend.programmer import FULL_RECONCILE_PERIOD
from pyflannel_runtime.backend.vxlan.peers import vxlan_peer_entries
from pyflannel_runtime.netlink.decoder import decode_neigh, decode_route
from pyflannel_runtime.netlink.diff import desired_state, diff_ops
from pyflannel_runtime.netlink.dump import Ownership, open_dump_socket, read_owned_state
from pyflannel_runtime.netlink.netns import run_in_netns
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs, make_subnet_key
from pyflannel_runtime.wire.vxlan_data import parse_vxlan_backend_data, vxlan_backend_data

RECONCILE_INTERVAL = 10
REPAIRS = 60
SCRAPES = 20
SCRAPE_INTERVAL = 15.0  # seconds: a common scrape_interval (Prometheus's default is 60 s)
# Full programming is timed over this many starts on a bare host, each right after the
# reference; the figure is the median of their ratios.
COLD_STARTS = 5
# Peers' public IPs: never the host's own 192.0.2.11, or etcd would hand it a peer's lease.
PUBLICS = [IPv4Address(f"{net}.{i}") for net in ("198.51.100", "203.0.113") for i in range(2, 255)]

RTM_NEWROUTE, RTM_DELROUTE, RTM_NEWNEIGH, RTM_DELNEIGH = 24, 25, 28, 29
RTMGRP_NEIGH, RTMGRP_IPV4_ROUTE = 0x4, 0x40
AF_BRIDGE = 7
_HEADER = struct.Struct("=IHHII")

# Runs in the underlay namespace: puts the leases in transactions ("load"), or puts/deletes
# them one at a time, paced, printing when each request was sent ("events").
LOADER = r"""
import asyncio, json, sys, time
import aetcd

async def main():
    host, port, mode, path, pace = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
    with open(path) as handle:
        items = json.load(handle)
    async with aetcd.Client(host=host, port=port) as client:
        sent = []
        if mode == "load":
            lease = await client.lease(86400)  # flanneld's keys all live on etcd leases
            for start in range(0, len(items), 100):
                puts = [client.transactions.put(k.encode(), v.encode(), lease=lease) for _, k, v in items[start:start + 100]]
                await client.transaction(compare=[], success=puts, failure=[])
        else:
            for op, key, value in items:
                sent.append(time.time())
                if op == "put":
                    await client.put(key.encode(), value.encode())
                else:
                    await client.delete(key.encode())
                await asyncio.sleep(pace)
    print(json.dumps(sent))

asyncio.run(main())
"""


def peer_leases(count: int, first: int) -> list[Lease]:
    subnets = list(NETWORK.subnets(new_prefix=SUBNET_LEN))
    leases = []
    for n in range(first, first + count):
        mac = f"0a:58:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}:00"
        attrs = LeaseAttrs(PUBLICS[n % len(PUBLICS)], None, "vxlan", vxlan_backend_data(1, mac))
        leases.append(Lease(subnets[n], None, attrs))
    return leases


def key(lease: Lease) -> str:
    return f"{PREFIX}/subnets/{make_subnet_key(lease.subnet, None)}"


def etcd_ops(lab: AgentLab, mode: str, items: list[list[str]], pace: float = 0.0) -> list[float]:
    assert lab.etcd is not None
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="pbs-", delete=False) as handle:
        json.dump(items, handle)
    try:
        done = lab.net.run(lab.net.ul, sys.executable, "-c", LOADER, lab.etcd.host,
                           str(lab.etcd.client_port), mode, handle.name, str(pace))  # fmt: skip
    finally:
        os.unlink(handle.name)
    sent: list[float] = json.loads(done.stdout)
    return sent


@dataclass
class Change:
    at: float  # time.time() when the datagram was read
    kind: str  # "route", "neigh", "fdb"
    added: bool
    dst: str  # route: the destination CIDR; neighbour: its IP; FDB: its MAC


@dataclass
class KernelMonitor:
    """Every route and neighbour/FDB change in the namespace, timestamped on receipt. The
    reader thread only stores datagrams; decoding happens afterwards."""

    ns: str
    datagrams: list[tuple[float, bytes]] = field(default_factory=list)
    overflows: int = 0

    def __post_init__(self) -> None:
        def create() -> socket.socket:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
            sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: bursts of 15 000
            sock.bind((0, RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE))
            return sock

        self._sock = run_in_netns(self.ns, create)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError as err:
                if err.errno != errno.ENOBUFS:
                    raise
                self.overflows += 1  # changes were lost; the figures depending on them fail
                continue
            self.datagrams.append((time.time(), data))

    def take(self) -> list[Change]:
        """The changes seen so far (and forget them)."""
        taken, self.datagrams = self.datagrams, []
        changes = []
        for at, data in taken:
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, msg_type, _f, _s, _p = _HEADER.unpack_from(data, offset)
                start, end = offset + _HEADER.size, offset + length
                if msg_type in (RTM_NEWROUTE, RTM_DELROUTE):
                    route = decode_route(data, start, end)
                    changes.append(Change(at, "route", msg_type == RTM_NEWROUTE,
                                          f"{route.dst}/{route.dst_len}"))  # fmt: skip
                elif msg_type in (RTM_NEWNEIGH, RTM_DELNEIGH):
                    neigh = decode_neigh(data, start, end)
                    fdb = neigh.family == AF_BRIDGE
                    changes.append(Change(at, "fdb" if fdb else "neigh", msg_type == RTM_NEWNEIGH,
                                          str(neigh.lladdr if fdb else neigh.dst)))  # fmt: skip
                offset += (length + 3) & ~3
        return changes

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


def peer_change(change: Change) -> bool:
    """A change of a peer's entry (not the host's own device and address routes)."""
    if change.kind == "route":
        return change.dst.endswith(f"/{SUBNET_LEN}")
    if change.kind == "neigh":
        return change.dst.startswith("10.244.")
    return change.dst.startswith("0a:58:")


def wait_for_log(lab: AgentLab, pattern: str, timeout: float, count: int = 1) -> None:
    """Until the log (appended to by every start of the agent) has ``count`` matches."""
    agent = next(iter(lab.agents.values()))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(re.findall(pattern, agent.log())) >= count:
            return
        if agent.process.poll() is not None:
            raise RuntimeError(f"agent exited:\n{agent.log()}")
        time.sleep(0.05)
    raise RuntimeError(f"no {pattern!r} in the agent's log after {timeout}s:\n{agent.log()}")


def wait_for_route(monitor: KernelMonitor, dst: str, added: bool, timeout: float) -> list[Change]:
    """The changes until the route to `dst` was added (or removed)."""
    changes: list[Change] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        changes += monitor.take()
        if any(c.kind == "route" and c.dst == dst and c.added == added for c in changes):
            return changes
        time.sleep(0.1)
    raise RuntimeError(f"the route {dst} was not {'added' if added else 'removed'} in {timeout}s")


def cold_start(
    lab: AgentLab,
    host: LabHost,
    monitor: KernelMonitor,
    peers: int,
    start_no: int,
    program: Sequence[str] = AGENT_PROGRAM,
    cwd: Path | None = None,
) -> tuple[float, float, float]:
    """Start the agent (`program` in `cwd`, as AgentLab.start_agent runs it) on a host without
    any flannel state and time its full programming: (subnet.env written -> last entry, first
    -> last entry, agent start -> last entry)."""
    entries = 3 * peers
    monitor.take()
    started = time.time()
    lab.start_agent(host, f"--reconcile-interval={RECONCILE_INTERVAL}", program=program, cwd=cwd)
    wait_for_log(lab, rf"Synced {peers} peers", timeout=120, count=start_no)
    written = lab.subnet_file(host).stat().st_mtime
    time.sleep(0.5)  # the monitor's last datagrams
    changes = [c for c in monitor.take() if peer_change(c) and c.added]
    seen: set[tuple[str, str]] = set()
    for change in changes:
        seen.add((change.kind, change.dst))
        if len(seen) == entries:
            return change.at - written, change.at - changes[0].at, change.at - started
    raise RuntimeError(f"only {len(seen)} of {entries} entries appeared")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's user + system time, the same with its waited-for children's)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    own = (int(fields[11]) + int(fields[12])) / ticks
    return own, own + (int(fields[13]) + int(fields[14])) / ticks


def idle_cpu_percent(pid: int, window: float) -> tuple[float, float]:
    """(% of a core with children, without), over `window` seconds of doing nothing."""
    start, (own0, all0) = time.monotonic(), cpu_seconds(pid)
    time.sleep(window)
    own1, all1 = cpu_seconds(pid)
    elapsed = time.monotonic() - start
    return (all1 - all0) / elapsed * 100, (own1 - own0) / elapsed * 100


def no_change_reconcile_seconds(lab: AgentLab, host: LabHost, peers: list[Lease]) -> float:
    """The agent's full reconcile on an unchanged kernel: dump the owned entries, diff them
    against the peers' (the median of 5; the peers' entries are cached between reconciles)."""
    index = lab.net.ifindex(host.ns, "flannel.1")
    ownership = Ownership(frozenset({index}), (NETWORK,))
    desired = desired_state(
        e for p in peers for e in vxlan_peer_entries(p, VxlanDevices(index, None))
    )
    sock = run_in_netns(host.ns, open_dump_socket)
    try:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            ops = diff_ops(desired, read_owned_state(sock, ownership))
            times.append(time.perf_counter() - start)
            if ops:
                raise RuntimeError(f"the kernel is not in sync: {len(ops)} ops, {ops[:3]}")
    finally:
        sock.close()
    return statistics.median(times)


def repair_latencies(
    lab: AgentLab, host: LabHost, monitor: KernelMonitor, peers: list[Lease], count: int
) -> list[float]:
    """Delete `count` entries of random peers, a third each routes, neighbours and FDB
    entries, one at a time; for each, the time from its deletion to its return."""
    rng = random.Random(26)
    targets = rng.sample(peers, count)
    out = []
    for n, peer in enumerate(targets):
        data = parse_vxlan_backend_data(peer.attrs.backend_data)
        assert peer.subnet is not None
        gateway = str(peer.subnet.network_address)
        kind, key, command = [
            ("route", str(peer.subnet), ["ip", "route", "del", str(peer.subnet)]),
            ("neigh", gateway, ["ip", "neigh", "del", gateway, "dev", "flannel.1"]),
            ("fdb", data.vtep_mac, ["bridge", "fdb", "del", data.vtep_mac, "dev", "flannel.1",
                                    "dst", str(peer.attrs.public_ip), "self"]),
        ][n % 3]  # fmt: skip
        monitor.take()
        lab.net.run(host.ns, *command)
        deadline = time.monotonic() + 10
        changes: list[Change] = []
        while time.monotonic() < deadline:
            changes += monitor.take()
            gone = [c.at for c in changes if (c.kind, c.dst, c.added) == (kind, key, False)]
            back = [c.at for c in changes if (c.kind, c.dst, c.added) == (kind, key, True)]
            if gone and back:
                out.append(back[-1] - gone[0])
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"the {kind} {key} was not put back in 10 s")
        time.sleep(0.1)
    return out


def scrape_costs(
    host: LabHost, pid: int, count: int, idle_share: float
) -> tuple[list[float], int, float] | None:
    """(the round trip of each GET /metrics, the answer's size, the agent's CPU seconds per
    scrape less its idle rate `idle_share` over the same time); None when the agent serves
    no metrics."""

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", HEALTHZ_PORT), timeout=10)

    times, size = [], 0
    own0, _ = cpu_seconds(pid)
    started = time.monotonic()
    for _ in range(count):
        sock = run_in_netns(host.ns, connect)
        with sock:
            begin = time.perf_counter()
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            chunks = []
            while chunk := sock.recv(1 << 16):
                chunks.append(chunk)
            times.append(time.perf_counter() - begin)
        answer = b"".join(chunks)
        if not answer.startswith(b"HTTP/1.1 200 "):
            return None
        size = len(answer.partition(b"\r\n\r\n")[2])
        time.sleep(0.2)
    own1, _ = cpu_seconds(pid)
    spent = own1 - own0 - idle_share * (time.monotonic() - started)
    return times, size, spent / count


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def ip_batch_time(peers: list[Lease], listening: bool = False) -> float:
    """`ip -batch` + `bridge -batch` writing the peers' entries in a fresh namespace; with
    `listening`, under a `KernelMonitor` as an agent's timed run is: the kernel copies every
    change to each listener inside the write that makes it, ~20% of ip -batch's time."""
    ns = f"pbs-{secrets.token_hex(3)}-ip"
    monitor = None
    try:
        make_host(ns)
        if listening:
            monitor = KernelMonitor(ns)
        return iproute2(ns, peers)
    finally:
        if monitor is not None:
            monitor.close()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latencies(
    sent: list[float], wanted: list[tuple[str, bool]], changes: list[Change]
) -> list[float]:
    """For each request, how long until its route was added (True) or removed (False)."""
    out = []
    for at, (dst, added) in zip(sent, wanted, strict=True):
        seen = [c.at for c in changes if c.kind == "route" and c.dst == dst and c.added == added
                and c.at >= at]  # fmt: skip
        if not seen:
            raise RuntimeError(
                f"the route {dst} never {'appeared' if added else 'went'}"
                f" ({len(changes)} changes seen)"
            )
        out.append(min(seen) - at)
    return out


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=5000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        help="one more pyflanneld flag, e.g. --agent-arg=--metrics=false (repeatable)",
    )
    args = parser.parse_args()
    peers = peer_leases(args.peers, first=2)  # after OWN_SUBNET
    extra = peer_leases(args.events // 2, first=args.peers + 2)
    entries = 3 * args.peers

    with AgentLab({"Type": "vxlan"}, hosts=1, prefix="pbs", ip_masq=False) as lab:
        host = lab.net.hosts[0]
        configure(lab)
        start = time.perf_counter()
        etcd_ops(lab, "load", [["put", key(p), p.attrs.to_json()] for p in peers])
        print(f"put {args.peers} leases into etcd in {time.perf_counter() - start:.2f} s")

        monitor = KernelMonitor(host.ns)
        try:
            full_ratios, write_ratios = [], []
            for start_no in range(1, COLD_STARTS + 1):
                if start_no > 1:
                    # Back to a bare host: the device goes, and its entries with it.
                    lab.stop_agent(host)
                    lab.net.ip(host.ns, "link", "del", "flannel.1")
                # The reference right before each start: this VM's vCPU speed swings up to 2x
                # from one second to the next, so only neighbours in time compare.
                ip_time = ip_batch_time(peers)
                full, writes, since_start = cold_start(
                    lab, host, monitor, args.peers, start_no, args.agent_arg
                )
                full_ratios.append(full / ip_time)
                write_ratios.append(writes / ip_time)
                print(
                    f"cold start {start_no}: ip -batch + bridge -batch {ip_time:.3f} s; agent "
                    f"start -> {entries} entries in the kernel {since_start:.3f} s; subnet.env "
                    f"written -> all entries (plan, dump, diff, write) {full:.3f} s "
                    f"(x{full_ratios[-1]:.2f}); first -> last peer entry {writes:.3f} s "
                    f"(x{write_ratios[-1]:.2f})"
                )
            agent = lab.agents[host.n]

            puts = [["put", key(p), p.attrs.to_json()] for p in extra]
            deletes = [["delete", key(p), ""] for p in extra]
            wanted = [(str(p.subnet), True) for p in extra] + [
                (str(p.subnet), False) for p in extra
            ]
            sent = etcd_ops(lab, "events", puts + deletes, pace=0.02)
            events = wait_for_route(monitor, str(extra[-1].subnet), added=False, timeout=180)
            lat = latencies(sent, wanted, events)
            print(
                f"event -> kernel over {len(lat)} puts/deletes: p50 {statistics.median(lat) * 1e3:.1f}"
                f" ms, p99 {percentile(lat, 0.99) * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms"
            )

            log_before = agent.log().count("Reconcile repaired")
            monitor.take()
            time.sleep(2 * RECONCILE_INTERVAL + 1)
            steady = [c for c in monitor.take() if peer_change(c)]
            repaired = agent.log().count("Reconcile repaired") - log_before
            print(
                f"no-change window of {2 * RECONCILE_INTERVAL + 1} s: {len(steady)} kernel "
                f"changes, {repaired} 'Reconcile repaired' log lines"
            )
            rss = rss_kib(agent.process.pid)
            print(f"agent VmRSS with {args.peers} peers: {rss / 1024:.1f} MiB")

            idle_cpu, alone = idle_cpu_percent(agent.process.pid, args.idle_seconds)
            print(
                f"idle CPU over {args.idle_seconds} s without a change: {idle_cpu:.3f} % of a core "
                f"(the agent alone {alone:.3f} %, the rest its iptables checks)"
            )
            scrapes = scrape_costs(host, agent.process.pid, SCRAPES, alone / 100)
            if scrapes is None:
                print("the agent serves no /metrics")
            else:
                round_trips, size, cpu = scrapes
                print(
                    f"GET /metrics with {args.peers} peers, {len(round_trips)} times: p50 "
                    f"{statistics.median(round_trips) * 1e3:.1f} ms, max "
                    f"{max(round_trips) * 1e3:.1f} ms, {size} bytes; agent CPU per scrape "
                    f"{cpu * 1e3:.1f} ms, one every {SCRAPE_INTERVAL:.0f} s: "
                    f"{cpu / SCRAPE_INTERVAL * 100:.3f} % of a core; agent VmRSS after them "
                    f"{rss_kib(agent.process.pid) / 1024:.1f} MiB"
                )
            full = no_change_reconcile_seconds(lab, host, peers)
            print(
                f"a no-change full reconcile (dump + diff of {entries} entries): {full:.3f} s; "
                f"once per {FULL_RECONCILE_PERIOD:.0f} s that is "
                f"{full / FULL_RECONCILE_PERIOD * 100:.3f} % of a core (every "
                f"{RECONCILE_INTERVAL} s, as before: {full / RECONCILE_INTERVAL * 100:.2f} %)"
            )
            repairs = repair_latencies(lab, host, monitor, peers, REPAIRS)
            print(
                f"repair of {len(repairs)} deleted entries (from deletion to re-add, as the "
                f"kernel notified): p50 {statistics.median(repairs) * 1e3:.1f} ms, p99 "
                f"{percentile(repairs, 0.99) * 1e3:.1f} ms, max {max(repairs) * 1e3:.1f} ms"
            )
        finally:
            monitor.close()

    print(f"programming_ratio_full: {statistics.median(full_ratios):.2f}")
    print(f"programming_ratio_writes: {statistics.median(write_ratios):.2f}")
    print(f"event_latency_p99_ms: {percentile(lat, 0.99) * 1e3:.1f}")
    print(f"agent_rss_mib: {rss / 1024:.1f}")
    print(f"steady_state_writes: {len(steady) + repaired}")
    print(f"idle_cpu_percent: {idle_cpu:.3f}")
    print(f"full_reconcile_s: {full:.3f}")
    print(f"repair_latency_p99_ms: {percentile(repairs, 0.99) * 1e3:.1f}")
    if scrapes is not None:
        print(f"metrics_scrape_p50_ms: {statistics.median(scrapes[0]) * 1e3:.1f}")
        print(f"metrics_scrape_agent_cpu_ms: {scrapes[2] * 1e3:.1f}")


if __name__ == "__main__":
    main()
