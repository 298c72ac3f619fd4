"""What a pod-to-pod TCP stream over the udp backend keeps of its rate while a host outside the
cluster floods the backend's port (8285) with flannel-framed datagrams, as fast as one process
sends them.

Lab: an AgentLab with two hosts running pyflanneld with the udp backend (real etcd), the pods'
MTU at FLANNEL_MTU (1472), and an outside namespace on the underlay bridge at 192.0.2.99, which
no lease names (pyflannel_lab/flood.py). Each datagram is a valid inner IPv4/UDP packet
for pod 2, so only its outer source tells it from a peer's; host 2's udp backend drops and
counts every one (its socket filter in the kernel; the forwarder for any that get by).

Rounds alternate: an iperf3 TCP stream pod 1 -> pod 2 alone, then the same with the flood (it
starts with the stream and lasts as long), then with the same flood at a port of host 2 where
nothing listens (the kernel drops it on arrival: the reference), then with the flood dropped
at host 2's eth0 before IP input (an nftables netdev ingress rule for the outsider's address:
the earliest drop there is short of the flooder's own interface). On this 2-vCPU VM the
flooder is no host of its own: its sending, and the bridge it sets off, run on the vCPUs the
stream runs on, so the references tell what the flood costs the stream before any backend
looks at it; the flooder's own CPU time is printed too. This VM's vCPU speed swings from second to second, so each figure is the median of
the per-round ratios, with the spread. Also
printed: datagrams sent per second, how many the agent counted (/statusz via `pyflannel
status --output=json`) and how many the kernel dropped at the full socket buffer, and whether
any reached the pod (its Udp counters).

Goal (issue 25): the stream keeps >= 80 % of its rate. Finishes with `metric: value` lines.
Needs root:

    PYTHONPATH=. python bench/bench_udp_flood.py [--rounds 8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Iterator
from ipaddress import IPv4Address

from sigterm import interrupt_on_sigterm

from pyflannel_lab.flood import Flood, Outsider, flooding, inner_packet, outsider
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_runtime.connectivity.snmp import UDP_BUFFER_ERRORS, read_counters

POD_MTU = 1472
STRANGER = IPv4Address("192.0.2.99")
UDP_PORT = 8285
CLOSED_PORT = 9  # discard: nothing listens on host 2


def stream(lab: AgentLab, seconds: int) -> float:
    """One iperf3 TCP stream pod 1 -> pod 2; Gbit/s received."""
    h1, h2 = lab.net.hosts
    argv = ["iperf3", "-c", str(h2.pod_ip), "-t", str(seconds), "-J"]
    done = subprocess.run(
        ["ip", "netns", "exec", h1.pod_ns, *argv], capture_output=True, text=True, check=True
    )
    return float(json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"]) / 1e9


def foreign_counted(lab: AgentLab) -> int:
    argv = [*lab.status_argv(lab.net.hosts[1]), "--output=json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if not done.stdout:
        raise RuntimeError(f"pyflannel status: {done.stderr}")
    counters = json.loads(done.stdout)["udp_counters"]
    return int(counters["socket_drops"]) + int(counters["foreign_source"])


@contextlib.contextmanager
def dropped_at_ingress(ns: str, source: IPv4Address, port: int) -> Iterator[None]:
    """An nftables netdev table in `ns` dropping udp to `port` from `source` on eth0."""
    table = f"""table netdev pbf_ingress {{
    chain flood {{
        type filter hook ingress device eth0 priority -500;
        ip saddr {source} udp dport {port} drop
    }}
}}
"""
    nft = ["ip", "netns", "exec", ns, "nft"]
    subprocess.run([*nft, "-f", "-"], input=table, text=True, check=True)
    try:
        yield
    finally:
        subprocess.run([*nft, "delete", "table", "netdev", "pbf_ingress"], check=True)


def flooded_stream(
    lab: AgentLab, source: Outsider, port: int, payload: bytes, seconds: int
) -> tuple[float, Flood]:
    """A stream while the outsider floods host 2's `port`: Gbit/s, and the flood."""
    target = lab.net.hosts[1].underlay_ip
    with flooding(source, target, port, payload, 10**9, seconds + 0.5) as flood:
        rate = stream(lab, seconds)
        return rate, flood.result()


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()

    with AgentLab({"Type": "udp"}, hosts=2, prefix="pbf") as lab:
        lab.start_all()
        h1, h2 = lab.net.hosts
        for host in (h1, h2):
            lab.net.ip(host.pod_ns, "link", "set", "eth0", "mtu", str(POD_MTU))
        server = subprocess.Popen(
            ["ip", "netns", "exec", h2.pod_ns, "iperf3", "-s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.5)
            payload = inner_packet(h1.pod_ip, h2.pod_ip)
            pod_before = read_counters(h2.pod_ns)
            host_before = read_counters(h2.ns)
            alone, ratios, references, ingress, sent, spent, cpu = [], [], [], [], 0, 0.0, 0.0
            with outsider(lab.net, STRANGER) as source:
                for n in range(args.rounds):
                    alone.append(stream(lab, args.seconds))
                    rate, result = flooded_stream(lab, source, UDP_PORT, payload, args.seconds)
                    reference, _ = flooded_stream(lab, source, CLOSED_PORT, payload, args.seconds)
                    with dropped_at_ingress(h2.ns, STRANGER, UDP_PORT):
                        early, _ = flooded_stream(lab, source, UDP_PORT, payload, args.seconds)
                    sent += result.sent
                    spent += result.seconds
                    cpu += result.cpu_seconds
                    ratios.append(rate / alone[-1])
                    references.append(reference / alone[-1])
                    ingress.append(early / alone[-1])
                    print(
                        f"round {n + 1}: alone {alone[-1]:.3f} Gbit/s; flooding the udp port "
                        f"{rate:.3f} Gbit/s (x{ratios[-1]:.2f}, "
                        f"{result.sent / result.seconds:.0f} datagrams/s, the flooder busy "
                        f"{result.cpu_seconds / result.seconds:.2f} of a vCPU); flooding a "
                        f"closed port {reference:.3f} Gbit/s (x{references[-1]:.2f}); dropped "
                        f"at ingress {early:.3f} Gbit/s (x{ingress[-1]:.2f})"
                    )
            counted = foreign_counted(lab)
            pod_after, host_after = read_counters(h2.pod_ns), read_counters(h2.ns)
        finally:
            server.kill()
            server.wait()

    reached = (
        pod_after.get("Udp:InDatagrams", 0)
        + pod_after.get("Udp:NoPorts", 0)
        - (pod_before.get("Udp:InDatagrams", 0) + pod_before.get("Udp:NoPorts", 0))
    )
    overflowed = host_after[UDP_BUFFER_ERRORS] - host_before[UDP_BUFFER_ERRORS]
    print(
        f"alone: median {statistics.median(alone):.3f} Gbit/s; kept while the udp port is "
        f"flooded: {spread(ratios)}; while a closed port is flooded (the reference): "
        f"{spread(references)}; while the flood is dropped at ingress: {spread(ingress)}"
    )
    print(
        f"flood: {sent} datagrams ({sent / spent:.0f}/s); dropped and counted by the udp backend "
        f"{counted} (at host 2's sockets or by its forwarder; {overflowed} of them for a full "
        f"socket buffer); {reached} reached pod 2"
    )
    print(f"flood_rate_per_s: {sent / spent:.0f}")
    print(f"flooder_vcpus: {cpu / spent:.2f}")
    print(f"flooded_datagrams_counted: {counted}")
    print(f"flooded_datagrams_dropped_by_kernel: {overflowed}")
    print(f"flood_packets_reaching_pod: {reached}")
    print(f"stream_rate_kept: {statistics.median(ratios):.2f}")
    print(f"stream_rate_kept_reference: {statistics.median(references):.2f}")
    print(f"stream_rate_kept_dropped_at_ingress: {statistics.median(ingress):.2f}")


def spread(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    return f"median x{statistics.median(ratios):.2f} (range {ordered[0]:.2f}-{ordered[-1]:.2f})"


if __name__ == "__main__":
    main()
