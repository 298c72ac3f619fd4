"""Pod-to-pod TCP throughput through the agent-programmed datapath vs the same topology
programmed by hand, for vxlan and host-gw.

  * agent: an AgentLab (pyflannel_lab/netns_agents.py): real etcd, pyflanneld on both
    hosts (no --ip-masq, as flanneld's default), which install flannel's FORWARD accept rules;
  * by hand: a plain NetLab programmed with the `ip` / `bridge` commands flanneld's backends
    amount to (docs/compatibility.md, "VXLAN device and per-peer entries" and "host-gw
    routes"), plus the same FORWARD rules as `iptables` commands, so the labs differ only in who
    programmed them (their `iptables -S` is compared before measuring). `--bare-by-hand`
    leaves the rules out, and so prices them too.

Why head to head: on this 2-vCPU VM the speed of a vCPU itself swings by up to 2x from one
second to the next (host contention; a fixed loop takes 50 or 100 ms on an idle VM), so even
back-to-back 1 s runs of two identical labs differ by +-15 %. Each round therefore runs one
TCP stream (pod 1 -> pod 2) in both labs at the same time, all four iperf3 processes pinned
to one CPU: the vCPU's speed of the moment is shared by both flows, and each flow's kernel
work runs in (and is charged to) its own processes. Pinning client and server to different
CPUs would add TCP reordering (veth queues a flow's packets on both CPUs' backlogs). Checked:
two by-hand labs read 1.00 +- 0.01; 400 non-matching FORWARD rules in one lab read 0.71 head
to head and 0.69-0.72 from solo runs, so sharing the core does not flatten a difference.

Pods use the backend's MTU (1450 for vxlan, 1500 for host-gw). A flow's rate is counted from
iperf3's 0.1 s intervals after a 0.3 s warm-up (slow start is over within 0.1 s here) and
before the last 0.2 s (the clients start a few ms apart). Rounds alternate the CPU and which
client starts first. Per backend it prints every round, the per-lab medians (Gbit/s while
sharing the core, about half a solo run), the median of the per-round ratios with their IQR
and range, and how busy the other CPU was (the agents, etcd, this script and anything else on
the VM: 3-8 % with nothing else running); it finishes with `throughput_ratio: <the lower
median>`. Needs root:

    PYTHONPATH=. python bench/bench_throughput.py [--seconds 3] [--rounds 20] [--backend vxlan|host-gw]
                                     [--bare-by-hand]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import time

from sigterm import interrupt_on_sigterm

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import NetLab

MTU = {"vxlan": 1450, "host-gw": 1500}
CPUS = (0, 1)
INTERVAL = 0.1  # iperf3 -i: fine enough to cut the warm-up and the tail precisely
WARMUP = 0.3
TAIL = 0.2
CLUSTER = "10.244.0.0/16"
COMMENT = ("-m", "comment", "--comment", "flanneld forward")
# flanneld's forward rules as an operator would type them (flannel-io/flannel
# pkg/trafficmngr/iptables/iptables.go: forwardRules).
FORWARD_RULES = (
    ("-N", "FLANNEL-FWD"),
    ("-A", "FORWARD", *COMMENT, "-j", "FLANNEL-FWD"),
    ("-A", "FLANNEL-FWD", "-s", CLUSTER, *COMMENT, "-j", "ACCEPT"),
    ("-A", "FLANNEL-FWD", "-d", CLUSTER, *COMMENT, "-j", "ACCEPT"),
)


def program_by_hand(lab: NetLab, backend: str) -> None:
    """flanneld's device and per-peer entries as `ip` / `bridge` commands, on every host."""
    for h in lab.hosts:
        n = h.n
        if backend == "vxlan":
            lab.ip(h.ns, "link", "add", "flannel.1", "address", f"02:42:0a:f4:0{n}:00",
                   "mtu", "1450", "type", "vxlan", "id", "1", "local", str(h.underlay_ip),
                   "dev", "eth0", "dstport", "8472", "nolearning")  # fmt: skip
            lab.ip(h.ns, "addr", "add", f"10.244.{n}.0/32", "dev", "flannel.1")
            lab.ip(h.ns, "link", "set", "flannel.1", "up")
        for p in lab.hosts:
            if p is h:
                continue
            m = p.n
            if backend == "vxlan":
                mac = f"02:42:0a:f4:0{m}:00"
                lab.ip(h.ns, "route", "replace", str(p.subnet), "via", f"10.244.{m}.0",
                       "dev", "flannel.1", "onlink")  # fmt: skip
                lab.ip(h.ns, "neigh", "replace", f"10.244.{m}.0", "lladdr", mac,
                       "dev", "flannel.1", "nud", "permanent")  # fmt: skip
                lab.bridge(h.ns, "fdb", "replace", mac, "dev", "flannel.1",
                           "dst", str(p.underlay_ip), "self", "permanent")  # fmt: skip
            else:
                lab.ip(h.ns, "route", "replace", str(p.subnet), "via", str(p.underlay_ip),
                       "dev", "eth0")  # fmt: skip


def add_forward_rules_by_hand(lab: NetLab) -> None:
    for h in lab.hosts:
        for rule in FORWARD_RULES:
            lab.run(h.ns, "iptables", "-t", "filter", *rule)


def iptables_rules(lab: NetLab) -> list[str]:
    return [
        lab.run(h.ns, "iptables", "-t", table, "-S").stdout
        for h in lab.hosts
        for table in ("filter", "nat")
    ]


def check_same_rules(agent: NetLab, hand: NetLab) -> None:
    """The by-hand rules must be exactly the agent's, or the ratio compares two topologies."""
    if iptables_rules(agent) != iptables_rules(hand):
        raise RuntimeError(
            f"iptables differ:\nagent {iptables_rules(agent)}\nby hand {iptables_rules(hand)}"
        )


def set_pod_mtu(lab: NetLab, mtu: int) -> None:
    for h in lab.hosts:
        lab.ip(h.pod_ns, "link", "set", "eth0", "mtu", str(mtu))


def start_server(lab: NetLab) -> subprocess.Popen[bytes]:
    """A persistent iperf3 server in pod 2 (`ip netns exec` execs it: the PID is iperf3's)."""
    pod_ns = lab.hosts[1].pod_ns
    server = subprocess.Popen(
        ["ip", "netns", "exec", pod_ns, "iperf3", "-s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 5
    while not lab.run(pod_ns, "ss", "-Htln", "sport = :5201").stdout.strip():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"iperf3 server in {pod_ns} not listening")
        time.sleep(0.05)
    return server


def stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def start_client(lab: NetLab, cpu: int, seconds: int) -> subprocess.Popen[str]:
    server = lab.hosts[1]
    argv = ["iperf3", "-c", str(server.pod_ip), "-t", str(seconds), "-i", str(INTERVAL),
            "-J", "-A", str(cpu)]  # fmt: skip
    return subprocess.Popen(
        ["ip", "netns", "exec", lab.hosts[0].pod_ns, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def gbps(client: subprocess.Popen[str], seconds: int) -> float:
    """Gbit/s sent between the warm-up and the tail; with no loss, what pod 2 receives."""
    out, err = client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"iperf3 client exited {client.returncode}: {out[-500:]} {err}")
    eps = 1e-6  # interval bounds are floats: 0.30000001 must count as 0.3
    kept = [
        i["sum"]
        for i in json.loads(out)["intervals"]
        if i["sum"]["start"] >= WARMUP - eps and i["sum"]["end"] <= seconds - TAIL + eps
    ]
    bits: float = sum(i["bytes"] for i in kept) * 8
    seconds_kept: float = sum(i["seconds"] for i in kept)
    return bits / seconds_kept / 1e9


def head_to_head(
    labs: dict[str, NetLab], servers: dict[str, int], order: list[str], cpu: int, seconds: int
) -> dict[str, float]:
    """One round: both flows at once, on one CPU, so they see the same vCPU speed."""
    for pid in servers.values():
        os.sched_setaffinity(pid, {cpu})
    clients = {name: start_client(labs[name], cpu, seconds) for name in order}
    return {name: gbps(client, seconds) for name, client in clients.items()}


def spread(ratios: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"IQR {q1:.3f}-{q3:.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"


def cpu_jiffies(cpu: int) -> tuple[int, int]:
    """(busy, total) jiffies of one CPU so far, from /proc/stat."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith(f"cpu{cpu} "):
                user, nice, system, idle, iowait, *rest = map(int, line.split()[1:9])
                busy = user + nice + system + sum(rest)
                return busy, busy + idle + iowait
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) / max(1, after[1] - before[1])


def measure(backend: str, seconds: int, rounds: int, bare: bool) -> float:
    if seconds <= WARMUP + TAIL:
        raise ValueError(f"--seconds must leave time after {WARMUP} s warm-up and {TAIL} s tail")
    with contextlib.ExitStack() as stack:
        agent_lab = stack.enter_context(
            AgentLab({"Type": backend}, hosts=2, prefix="pbt", ip_masq=False)
        )
        hand = stack.enter_context(NetLab("pbt", hosts=2))
        agent_lab.start_all()
        program_by_hand(hand, backend)
        if not bare:
            add_forward_rules_by_hand(hand)
            check_same_rules(agent_lab.net, hand)
        labs = {"agent": agent_lab.net, "by hand": hand}
        servers: dict[str, int] = {}
        for name, lab in labs.items():
            set_pod_mtu(lab, MTU[backend])
            server = start_server(lab)
            stack.callback(stop, server)
            servers[name] = server.pid
        results: dict[str, list[float]] = {name: [] for name in labs}
        ratios: list[float] = []
        background: list[float] = []
        for i in range(rounds):
            # Every 4 rounds cover both CPUs x both start orders, so neither favours a lab.
            cpu = CPUS[i % 2]
            order = list(labs) if (i // 2) % 2 == 0 else list(reversed(labs))
            # The other CPU's busy share: the agents, etcd and whatever else runs on the VM.
            other = CPUS[(i + 1) % 2]
            before = cpu_jiffies(other)
            got = head_to_head(labs, servers, order, cpu, seconds)
            background.append(busy_share(before, cpu_jiffies(other)))
            for name, value in got.items():
                results[name].append(value)
            ratios.append(got["agent"] / got["by hand"])
            print(
                f"{backend} round {i + 1} (cpu {cpu}, {order[0]} first): agent "
                f"{got['agent']:.2f}, by hand {got['by hand']:.2f} Gbit/s, ratio {ratios[-1]:.3f}"
                f"; cpu {other} {background[-1]:.0%} busy",
                flush=True,
            )
    ratio = statistics.median(ratios)
    hand_label = "by hand (no FORWARD rules)" if bare else "by hand"
    print(
        f"{backend}: agent {statistics.median(results['agent']):.2f} Gbit/s, {hand_label} "
        f"{statistics.median(results['by hand']):.2f} Gbit/s (medians, each sharing one core "
        f"with the other); ratio {ratio:.3f} (median of {rounds} rounds; {spread(ratios)}); "
        f"the other CPU {statistics.median(background):.0%} busy (median), "
        f"{max(background):.0%} at most"
    )
    return ratio


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3, help="length of each round")
    parser.add_argument("--rounds", type=int, default=20, help="best a multiple of 4")
    parser.add_argument("--backend", choices=sorted(MTU), action="append")
    parser.add_argument(
        "--bare-by-hand",
        action="store_true",
        help="by-hand lab without flannel's FORWARD rules (the datapath only)",
    )
    args = parser.parse_args()
    ratios = {
        b: measure(b, args.seconds, args.rounds, args.bare_by_hand)
        for b in args.backend or ["vxlan", "host-gw"]
    }
    for backend, ratio in ratios.items():
        print(f"{backend.replace('-', '')}_throughput_ratio: {ratio:.3f}")
    print(f"throughput_ratio: {min(ratios.values()):.3f}")


if __name__ == "__main__":
    main()
