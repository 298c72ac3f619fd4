"""udp backend throughput vs a C per-packet TUN<->UDP forwarder (socat) and vs kernel vxlan,
pod to pod.

Topology (pyflannel_lab/netns_lab.py): 2 netns hosts on a bridge underlay (MTU 1500),
one pod each behind cni0. Setups (`--setups A B` measures A / B):

  * ours: pyflannel's udp backend, flannel's framing on UDP 8285 (a send and a receive worker
    process per queue; TSO + UDP GSO/GRO when numpy is importable, plain per-packet
    forwarding otherwise); pod MTU 1472;
  * ours-super: the same with the `SuperPackets` option on both hosts, so the two negotiate
    pyflannel's super-packet framing (backend/udp/superpacket.py): TCP super-packets cross
    whole, not cut into MSS-sized packets; pod MTU 1472;
  * socat: socat TUN:<subnet>/16 <-> UDP:<peer>:8285 per host; one read/sendto and one
    recvfrom/write per packet, the design of flannel's C proxy (proxy_amd64.c); pod MTU 1472;
  * socat-mtu1000: socat with pod MTU 1000 (same per-packet cost, 0.68x the bytes), a check
    of the method;
  * vxlan: the kernel's vxlan, programmed by hand as flanneld's vxlan backend programs it
    (bench_throughput.program_by_hand); pod MTU 1450, flannel's for vxlan on this underlay.

All flannel0 devices get txqueuelen 10000, so the comparison is of the forwarders, not of TUN
queue drops. Wire compatibility with socat is tested in tests/integration/test_udp_backend.py.

Why head to head: on this 2-vCPU VM the speed of a vCPU itself swings by up to 2x from one
second to the next (host contention), so runs of the two setups one after the other compare
moments, not forwarders (means of such runs read 1.83 to 2.22 for the same code). Each setup
is a lab of its own, both run the whole time, and each round runs one TCP stream (pod 1 ->
pod 2) in both at once, so both flows see the same vCPUs at the same speeds. Both setups'
processes (forwarders, both iperf3 ends; packet processing runs in softirq on their CPUs)
get the same CPU set, both vCPUs, and each setup sits in a cpu cgroup of its own with equal
cpu.shares: when both want a CPU each gets half, however many processes it runs (socat 2,
pyflannel 4 workers, kernel vxlan none). A setup's rate is what it forwards with half the VM.
Kernel vxlan's work is all softirq, part of which the cgroups do not see, so against vxlan
`--mode both` adds solo rounds (one setup after the other) to every round: it is the stricter
figure, and the noisier.

Why both vCPUs and not one, as in bench_throughput.py: the forwarders hand every packet over
through a TUN queue and a UDP socket, so what they reach depends on running beside the
iperf3 ends and beside each other. All of both setups on one CPU read 1.37 (8 rounds), and
socat's stream stalls (RTO after its 208 KiB receive buffer overflows while it waits for
the CPU) when only the forwarders share one CPU; solo runs of the same code read about 1.9.
Checked with this method: two socat setups read 1.02, 1.03, 1.03 (12, 16, 40 rounds; the
first-built lab may be favoured by up to 3 %, within noise, so the reference, B, is built
first); socat-mtu1000 reads 0.65-0.67 against socat head to head and 0.66-0.70 from 12 solo
rounds (`--mode solo`), so sharing neither favours a setup nor flattens a real difference.

A rate is counted from iperf3's 0.1 s intervals after a 0.3 s warm-up and before the last
0.2 s (the clients start a few ms apart); rounds alternate which client starts first.
Retransmits are iperf3's for the whole round (socat's: UdpRcvbufErrors on host 2, its
socket has the default 208 KiB; pyflannel's has 4 MiB; kernel vxlan's and the few of ours:
TCP reordering, where a sender's veth hands packets to the backlog of the CPU it runs on and
two CPUs' backlogs pass each other; after the rounds it prints our forwarders' counters and
every lab link's rx and tx drops, which tell a loss from that). A forwarder's CPU is the user
and system time of its processes (both hosts) over a round, in cores, divided by the round's
Gbit/s: "% of a core per Gbit/s", softirq work done on their behalf not included. It prints every round, the
per-setup median Gbit/s (head to head: with half the VM, so about half a solo run),
retransmits and CPU per Gbit/s, the median of the per-round ratios with IQR and range, the
ratio of the mean rates, and finishes with `<setup>_cpu_per_gbps: <cores per Gbit/s>` per
forwarding setup and `<A>_over_<B>[_solo]: <median of the per-round ratios>` (the default
pair also as `udp_throughput_ratio`). With the default 40 rounds (about 2 minutes) four runs
of ours / socat read 2.02, 2.08, 2.16 and 2.15 before super-packets existed.
Needs root:

    PYTHONPATH=. python bench/bench_udp.py [--seconds 3] [--rounds 40] [--queues N] [--offload|--no-offload]
                              [--setups ours socat]
                              [--mode head-to-head|solo|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench_throughput import program_by_hand
from sigterm import interrupt_on_sigterm

from pyflannel_lab.netns_lab import (
    LabHost,
    NetLab,
    close_udp_network,
    external_interface,
)
from pyflannel_runtime.backend.udp.udp import UdpBackend, UdpNetwork
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import check_network_config, parse_config

PREFIX = "pudpb"
POD_MTU = 1472
HANDICAP_POD_MTU = 1000  # same per-packet cost, 0.68x the bytes per packet
NET_CONF = '{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}'
NET_SUPER_PACKETS = '{"Network": "10.244.0.0/16", "Backend": {"Type": "udp", "SuperPackets": true}}'
VXLAN_POD_MTU = 1450  # flannel's vxlan MTU on this underlay
POD_MTU_OF = {"socat-mtu1000": HANDICAP_POD_MTU, "vxlan": VXLAN_POD_MTU}
CPUS = {0, 1}  # the VM's two vCPUs, for both setups alike
INTERVAL = 0.1  # iperf3 -i: fine enough to cut the warm-up and the tail precisely
WARMUP = 0.3
TAIL = 0.2
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")  # cgroup v1 cpu controller on this VM
SETUPS = ("ours", "ours-super", "socat", "socat-mtu1000", "vxlan")


@dataclass
class Setup:
    """One lab with its forwarders running and an iperf3 server in pod 2, all in `cgroup`."""

    name: str
    lab: NetLab
    cgroup: Path
    forwarders: list[int]
    networks: list[UdpNetwork] = field(default_factory=list)  # ours: to read their counters

    def forwarder_counters(self) -> dict[str, int]:
        """Our forwarders' non-zero counters (backend/udp/worker.py Counter, socket drops), both hosts."""
        total: dict[str, int] = {}
        for network in self.networks:
            for name, count in network.counters().items():
                total[name] = total.get(name, 0) + count
        return {name: count for name, count in total.items() if count}

    def kernel_drops(self) -> dict[str, int]:
        """The lab's links that dropped packets (`ip -s link`, rx and tx), by namespace/link."""
        drops = {}
        for ns in self.lab.namespaces():
            for link in json.loads(self.lab.ip(ns, "-s", "-j", "link", "show")):
                stats = link.get("stats64", {})
                for way in ("rx", "tx"):
                    dropped = stats.get(way, {}).get("dropped", 0)
                    if dropped:
                        drops[f"{ns.removeprefix(self.lab.token)}/{link['ifname']} {way}"] = dropped
        return drops

    def forwarder_cpu(self) -> float:
        """CPU seconds the forwarder processes have used so far (user and system)."""
        ticks = 0
        for pid in self.forwarders:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")


# --- forwarders ----------------------------------------------------------------------------------


async def start_ours(
    lab: NetLab, host: LabHost, queues: int | None, offload: bool | None, super_packets: bool
) -> UdpNetwork:
    """The host's udp network; its lease carries what the backend advertises."""
    ext = external_interface(lab, host)

    async def acquire(attrs: LeaseAttrs) -> Lease:
        return Lease(host.subnet, None, attrs)

    backend = UdpBackend(host.ns, queues=queues, offload=offload)
    conf = NET_SUPER_PACKETS if super_packets else NET_CONF
    config = check_network_config(parse_config(conf))
    return await backend.register_network(config, ext, acquire)


def start_socat(lab: NetLab, host: LabHost, peer: LabHost) -> subprocess.Popen[bytes]:
    """`ip netns exec` execs socat, so the PID is socat's."""
    proc = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            host.ns,
            "socat",
            # unconnected (sendto/recvfrom), so an early ICMP port-unreachable cannot kill it
            f"UDP-DATAGRAM:{peer.underlay_ip}:8285,bind={host.underlay_ip}:8285",
            f"TUN:{host.subnet.network_address}/16,tun-name=flannel0,tun-type=tun,iff-no-pi,iff-up",
        ]
    )
    deadline = time.monotonic() + 10
    while "flannel0" not in lab.ip(host.ns, "link", "show"):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("socat did not create flannel0")
        time.sleep(0.05)
    lab.ip(host.ns, "link", "set", "flannel0", "mtu", str(POD_MTU), "txqueuelen", "10000")
    return proc


def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def run_socat(stack: contextlib.ExitStack, lab: NetLab, host: LabHost, peer: LabHost) -> list[int]:
    proc = start_socat(lab, host, peer)
    stack.callback(stop, proc)
    return [proc.pid]


def run_ours(
    stack: contextlib.ExitStack,
    lab: NetLab,
    queues: int | None,
    offload: bool | None,
    super_packets: bool,
) -> list[UdpNetwork]:
    """Both hosts' networks, each with the other's lease (so super-packets are negotiated)."""
    networks = []
    for host in lab.hosts:
        network = asyncio.run(start_ours(lab, host, queues, offload, super_packets))
        stack.callback(close_udp_network, network)
        networks.append(network)
    for network, peer in zip(networks, networks[::-1], strict=True):
        asyncio.run(network.reconcile([peer.lease]))
        if super_packets and not network.super_packet_subnets():
            raise RuntimeError("super-packets were not negotiated")
    return networks


# --- CPU placement -------------------------------------------------------------------------------


@contextlib.contextmanager
def cpu_cgroup(name: str) -> Iterator[Path]:
    """A cpu cgroup with the default shares; whatever is left in it goes back to the root."""
    path = CPU_CGROUP / name
    path.mkdir()
    try:
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                (CPU_CGROUP / "cgroup.procs").write_text(pid)
        path.rmdir()


def join(cgroup: Path, pid: int) -> None:
    """Moves every thread of the process (cgroup v1 `cgroup.procs`)."""
    (cgroup / "cgroup.procs").write_text(str(pid))


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread (sched_setaffinity on a PID covers only that thread)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


# --- iperf3 --------------------------------------------------------------------------------------


def start_server(stack: contextlib.ExitStack, lab: NetLab) -> int:
    """A persistent iperf3 server in pod 2 (`ip netns exec` execs it: the PID is iperf3's)."""
    pod_ns = lab.hosts[1].pod_ns
    server = subprocess.Popen(
        ["ip", "netns", "exec", pod_ns, "iperf3", "-s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stack.callback(stop, server)
    deadline = time.monotonic() + 5
    while not lab.run(pod_ns, "ss", "-Htln", "sport = :5201").stdout.strip():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"iperf3 server in {pod_ns} not listening")
        time.sleep(0.05)
    return server.pid


def start_client(setup: Setup, seconds: int) -> subprocess.Popen[str]:
    """The client joins its setup's cgroup and CPUs before exec, so none of its work escapes."""

    def enter() -> None:
        join(setup.cgroup, os.getpid())
        os.sched_setaffinity(0, CPUS)

    server = setup.lab.hosts[1]
    argv = ["iperf3", "-c", str(server.pod_ip), "-t", str(seconds), "-i", str(INTERVAL), "-J"]
    return subprocess.Popen(
        ["ip", "netns", "exec", setup.lab.hosts[0].pod_ns, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=enter,
    )


@dataclass(frozen=True)
class Round:
    """One setup's round: the rate between warm-up and tail, the retransmits of the whole
    run, and its forwarders' CPU (cores busy) over the whole run's rate."""

    gbps: float
    retransmits: int
    cpu_per_gbps: float | None  # None without forwarders (kernel vxlan)


def result(setup: Setup, client: subprocess.Popen[str], seconds: int, cpu: float) -> Round:
    """`cpu`: the forwarders' CPU seconds when the client started."""
    out, err = client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"iperf3 client exited {client.returncode}: {out[-500:]} {err}")
    report = json.loads(out)
    eps = 1e-6  # interval bounds are floats: 0.30000001 must count as 0.3
    kept = [
        i["sum"]
        for i in report["intervals"]
        if i["sum"]["start"] >= WARMUP - eps and i["sum"]["end"] <= seconds - TAIL + eps
    ]
    bits: float = sum(i["bytes"] for i in kept) * 8
    seconds_kept: float = sum(i["seconds"] for i in kept)
    sent = report["end"]["sum_sent"]
    per_gbps = None
    if setup.forwarders:
        cores = (setup.forwarder_cpu() - cpu) / sent["seconds"]
        per_gbps = cores / (sent["bits_per_second"] / 1e9)
    return Round(bits / seconds_kept / 1e9, sent.get("retransmits", 0), per_gbps)


# --- rounds --------------------------------------------------------------------------------------


def head_to_head(setups: list[Setup], seconds: int) -> dict[str, Round]:
    """One round: both flows at once, so both see the same vCPU speeds."""
    cpu = {s.name: s.forwarder_cpu() for s in setups}
    clients = {s.name: start_client(s, seconds) for s in setups}
    return {s.name: result(s, clients[s.name], seconds, cpu[s.name]) for s in setups}


def solo(setups: list[Setup], seconds: int) -> dict[str, Round]:
    """One round the old way, each setup alone."""
    got = {}
    for s in setups:
        cpu = s.forwarder_cpu()
        got[s.name] = result(s, start_client(s, seconds), seconds, cpu)
    return got


def spread(ratios: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"IQR {q1:.3f}-{q3:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"


def start_setup(
    stack: contextlib.ExitStack, name: str, queues: int | None, offload: bool | None
) -> Setup:
    mtu = POD_MTU_OF.get(name, POD_MTU)
    lab = stack.enter_context(NetLab(prefix=PREFIX, hosts=2, pod_mtu=mtu))
    h1, h2 = lab.hosts
    cgroup = stack.enter_context(cpu_cgroup(lab.token))
    forwarders: list[int] = []
    networks: list[UdpNetwork] = []
    if name == "vxlan":
        program_by_hand(lab, "vxlan")
    elif name.startswith("ours"):
        networks = run_ours(stack, lab, queues, offload, super_packets=name == "ours-super")
        forwarders = [pid for network in networks for pid in network.worker_pids]
    else:
        forwarders = [p for h, peer in ((h1, h2), (h2, h1)) for p in run_socat(stack, lab, h, peer)]
    server = start_server(stack, lab)
    for pid in (*forwarders, server):
        join(cgroup, pid)
        pin(pid, CPUS)
    return Setup(name, lab, cgroup, forwarders, networks)


def unique_names(names: list[str]) -> list[str]:
    """`socat socat` needs two keys for its results."""
    return [f"{n} #{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


MODES = {"head-to-head": head_to_head, "solo": solo}


def measure(
    names: list[str],
    seconds: int,
    rounds: int,
    queues: int | None,
    offload: bool | None,
    modes: list[str],
) -> dict[str, float]:
    """Per mode, the median of the per-round ratios A / B."""
    if seconds <= WARMUP + TAIL:
        raise ValueError(f"--seconds must leave time after {WARMUP} s warm-up and {TAIL} s tail")
    results: dict[str, dict[str, list[Round]]] = {}
    ratios: dict[str, list[float]] = {mode: [] for mode in modes}
    with contextlib.ExitStack() as stack:
        # B (the reference) is built first: the first-built lab may be favoured a little.
        built = {i: start_setup(stack, names[i], queues, offload) for i in (1, 0)}
        setups = [built[0], built[1]]
        for setup, key in zip(setups, unique_names(names), strict=True):
            setup.name = key
        first, second = (s.name for s in setups)
        results = {mode: {s.name: [] for s in setups} for mode in modes}
        for i in range(rounds):
            # The first client gets a head start of a few ms: alternate it.
            order = setups if i % 2 == 0 else setups[::-1]
            for mode in modes:
                got = MODES[mode](order, seconds)
                for name, value in got.items():
                    results[mode][name].append(value)
                ratios[mode].append(got[first].gbps / got[second].gbps)
                print(
                    f"round {i + 1} ({mode}, {order[0].name} first): "
                    + ", ".join(
                        f"{n} {r.gbps:.3f} Gbit/s {r.retransmits} retr" for n, r in got.items()
                    )
                    + f", ratio {ratios[mode][-1]:.3f}",
                    flush=True,
                )
        for setup in setups:
            counters = (
                f"forwarder counters {setup.forwarder_counters() or 0}; " if setup.networks else ""
            )
            print(f"{setup.name} after all rounds: {counters}links' drops {setup.kernel_drops()}")
    for mode in modes:
        summarize(mode, results[mode], ratios[mode])
    for name in (first, second):
        cpu = [r.cpu_per_gbps for m in modes for r in results[m][name] if r.cpu_per_gbps]
        if cpu:
            print(f"{metric_name(name)}_cpu_per_gbps: {statistics.median(cpu):.3f}")
    medians = {mode: statistics.median(ratios[mode]) for mode in modes}
    for mode, ratio in medians.items():
        suffix = "_solo" if mode == "solo" else ""
        print(f"{metric_name(first)}_over_{metric_name(second)}{suffix}: {ratio:.3f}")
    return medians


def summarize(mode: str, results: dict[str, list[Round]], ratios: list[float]) -> None:
    for name, values in results.items():
        cpu = [v.cpu_per_gbps for v in values if v.cpu_per_gbps is not None]
        print(
            f"{name} ({mode}): median {statistics.median(v.gbps for v in values):.3f} Gbit/s"
            f"{'' if mode == 'solo' else ' (sharing the CPUs with the other)'}, retransmits "
            f"median {statistics.median(v.retransmits for v in values):.0f}, total "
            f"{sum(v.retransmits for v in values)}"
            + (
                f", forwarders {statistics.median(cpu) * 100:.0f} % of a core per Gbit/s"
                if cpu
                else ""
            )
        )
    first, second = results
    print(
        f"{first} / {second} ({mode}): {statistics.median(ratios):.3f} (median of {len(ratios)} rounds; {spread(ratios)})"
    )
    means = [statistics.mean(v.gbps for v in results[n]) for n in (first, second)]
    print(f"ratio of the means ({mode}): {means[0] / means[1]:.3f}")


def metric_name(setup: str) -> str:
    return setup.replace("-", "_").replace(" #", "_")


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each round")
    parser.add_argument("--rounds", type=int, default=40, help="best even")
    parser.add_argument("--queues", type=int, default=None)
    parser.add_argument("--offload", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--setups", nargs=2, choices=SETUPS, default=["ours", "socat"], help="ratio is A / B"
    )
    parser.add_argument(
        "--mode",
        choices=[*MODES, "both"],
        default="head-to-head",
        help="solo: one setup after the other (noisy); both: each round both ways",
    )
    args = parser.parse_args()
    modes = list(MODES) if args.mode == "both" else [args.mode]
    ratios = measure(args.setups, args.seconds, args.rounds, args.queues, args.offload, modes)
    if args.setups == ["ours", "socat"] and "head-to-head" in ratios:
        print(f"udp_throughput_ratio: {ratios['head-to-head']:.2f}")


if __name__ == "__main__":
    main()
