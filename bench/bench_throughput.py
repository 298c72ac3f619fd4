"""Pod-to-pod TCP throughput through the agent-programmed datapath vs the same topology
programmed by hand, for vxlan and host-gw.

  * agent: an AgentLab (tests/integration/agentlab.py): real etcd, pyflanneld on both hosts
    (no --ip-masq, as flanneld's default; its FORWARD accept rules are installed);
  * by hand: a plain NetLab programmed with the `ip` / `bridge` commands of lab-recipes §1.

Both labs exist side by side; iperf3 runs (one TCP stream, pod 1 -> pod 2) alternate between
them, with client and server pinned to CPUs 0 and 1 in both labs (unpinned, where the
scheduler puts them swings one lab against the other by +-15 %). Pods use the backend's MTU
in both (1450 for vxlan, 1500 for host-gw). Prints every run,
then the ratio of medians per backend, and finishes with `throughput_ratio: <the lower one>`.
Needs root:

    python bench/bench_throughput.py [--seconds 5] [--rounds 3] [--backend vxlan|host-gw]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from agentlab import AgentLab  # noqa: E402
from netlab import LabHost, NetLab  # noqa: E402

MTU = {"vxlan": 1450, "host-gw": 1500}


def iperf(lab: NetLab, client: LabHost, server: LabHost, seconds: int) -> float:
    """Gbit/s received over one TCP stream, client pod -> server pod."""
    srv = subprocess.Popen(
        ["ip", "netns", "exec", server.pod_ns, "iperf3", "-s", "-1", "-A", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        argv = ["iperf3", "-c", str(server.pod_ip), "-t", str(seconds), "-J", "-A", "0"]
        out = lab.run(client.pod_ns, *argv).stdout
    finally:
        if srv.poll() is None:
            srv.kill()
        srv.wait()
    bits: float = json.loads(out)["end"]["sum_received"]["bits_per_second"]
    return bits / 1e9


def program_by_hand(lab: NetLab, backend: str) -> None:
    """lab-recipes §1, for every host and each of its peers."""
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


def set_pod_mtu(lab: NetLab, mtu: int) -> None:
    for h in lab.hosts:
        lab.ip(h.pod_ns, "link", "set", "eth0", "mtu", str(mtu))


def measure(backend: str, seconds: int, rounds: int) -> float:
    with AgentLab({"Type": backend}, hosts=2, prefix="pbt", ip_masq=False) as agent_lab, \
            NetLab("pbt", hosts=2) as hand:  # fmt: skip
        agent_lab.start_all()
        program_by_hand(hand, backend)
        for lab in (agent_lab.net, hand):
            set_pod_mtu(lab, MTU[backend])
        labs = {"agent": agent_lab.net, "by hand": hand}
        results: dict[str, list[float]] = {name: [] for name in labs}
        for round_ in range(1, rounds + 1):
            # Alternate which goes first, so drift in the machine's load hits both alike.
            order = list(labs) if round_ % 2 else list(reversed(labs))
            for name in order:
                lab = labs[name]
                gbps = iperf(lab, lab.hosts[0], lab.hosts[1], seconds)
                results[name].append(gbps)
                print(f"{backend} round {round_} {name}: {gbps:.2f} Gbit/s", flush=True)
    ratio = statistics.median(results["agent"]) / statistics.median(results["by hand"])
    print(
        f"{backend}: agent {statistics.median(results['agent']):.2f} Gbit/s, by hand "
        f"{statistics.median(results['by hand']):.2f} Gbit/s (medians); ratio {ratio:.3f}"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=sorted(MTU), action="append")
    args = parser.parse_args()
    ratios = {
        b: measure(b, args.seconds, args.rounds) for b in args.backend or ["vxlan", "host-gw"]
    }
    for backend, ratio in ratios.items():
        print(f"{backend.replace('-', '')}_throughput_ratio: {ratio:.3f}")
    print(f"throughput_ratio: {min(ratios.values()):.3f}")


if __name__ == "__main__":
    main()
