"""udp backend throughput vs a C per-packet TUN<->UDP forwarder (socat), pod to pod.

Topology (tests/integration/netlab.py): 2 netns hosts on a bridge underlay (MTU 1500), one pod
each behind cni0, pod MTU 1472. Forwarders on both hosts, flannel's framing on UDP 8285:

  * reference: socat TUN:<subnet>/16 <-> UDP:<peer>:8285 per host; one read/sendto and one
    recvfrom/write per packet, the design of flannel's C proxy (proxy_amd64.c);
  * ours: pyflannel's udp backend (workers per queue and direction; TSO + UDP GSO/GRO when
    numpy is importable, plain per-packet forwarding otherwise).

Both get txqueuelen 10000 on flannel0, so the comparison is of the forwarders, not of TUN
queue drops. iperf3, one TCP stream, alternating runs. Prints each run and finishes with
`udp_throughput_ratio: <ours / socat>` (mean of the runs). Needs root.

    python bench/bench_udp.py [--seconds 5] [--rounds 2] [--queues N] [--offload|--no-offload]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]


from netlab import LabHost, NetLab, close_udp_network  # noqa: E402

from pyflannel_runtime.backend.udp import UdpBackend, UdpNetwork  # noqa: E402
from pyflannel_runtime.iface import ExternalInterface  # noqa: E402
from pyflannel_runtime.model.lease import Lease, LeaseAttrs  # noqa: E402
from pyflannel_runtime.model.netconf import check_network_config, parse_config  # noqa: E402

POD_MTU = 1472
NET_CONF = '{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}'


def lease_of(host: LabHost) -> Lease:
    return Lease(subnet=host.subnet, ipv6_subnet=None, attrs=LeaseAttrs(public_ip=host.underlay_ip))


async def start_ours(
    lab: NetLab, host: LabHost, peer: LabHost, queues: int | None, offload: bool | None
) -> UdpNetwork:
    ext = ExternalInterface(
        name="eth0",
        index=lab.ifindex(host.ns, "eth0"),
        mtu=1500,
        iface_addr=host.underlay_ip,
        iface_v6_addr=None,
        ext_addr=host.underlay_ip,
        ext_v6_addr=None,
    )

    async def acquire(attrs: LeaseAttrs) -> Lease:
        return lease_of(host)

    backend = UdpBackend(host.ns, queues=queues, offload=offload)
    config = check_network_config(parse_config(NET_CONF))
    network = await backend.register_network(config, ext, acquire)
    await network.reconcile([lease_of(peer)])
    return network


def start_socat(lab: NetLab, host: LabHost, peer: LabHost) -> subprocess.Popen[bytes]:
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


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_gone(lab: NetLab, ns: str) -> None:
    deadline = time.monotonic() + 10
    while "flannel0" in lab.ip(ns, "link", "show") and time.monotonic() < deadline:
        time.sleep(0.05)


def iperf(lab: NetLab, client: LabHost, server: LabHost, seconds: int) -> tuple[float, int]:
    """(Gbit/s received, retransmits) of one TCP stream client pod -> server pod."""
    srv = subprocess.Popen(
        ["ip", "netns", "exec", server.pod_ns, "iperf3", "-s", "-1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        out = lab.run(
            client.pod_ns, "iperf3", "-c", str(server.pod_ip), "-t", str(seconds), "-J"
        ).stdout
    finally:
        stop(srv)
    end = json.loads(out)["end"]
    return end["sum_received"]["bits_per_second"] / 1e9, end["sum_sent"].get("retransmits", 0)


def run_socat(lab: NetLab, seconds: int) -> tuple[float, int]:
    h1, h2 = lab.hosts
    procs = [start_socat(lab, h1, h2), start_socat(lab, h2, h1)]
    try:
        return iperf(lab, h1, h2, seconds)
    finally:
        for proc in procs:
            stop(proc)
        wait_gone(lab, h1.ns)
        wait_gone(lab, h2.ns)


def run_ours(
    lab: NetLab, seconds: int, queues: int | None, offload: bool | None
) -> tuple[float, int]:
    h1, h2 = lab.hosts
    networks: list[UdpNetwork] = []
    try:
        networks.append(asyncio.run(start_ours(lab, h1, h2, queues, offload)))
        networks.append(asyncio.run(start_ours(lab, h2, h1, queues, offload)))
        return iperf(lab, h1, h2, seconds)
    finally:
        for network in networks:
            close_udp_network(network)
        wait_gone(lab, h1.ns)
        wait_gone(lab, h2.ns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queues", type=int, default=None)
    parser.add_argument("--offload", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args()
    ours: list[float] = []
    reference: list[float] = []
    with NetLab(prefix="pudpb", hosts=2, pod_mtu=POD_MTU) as lab:
        for round_no in range(1, args.rounds + 1):
            gbps, retrans = run_socat(lab, args.seconds)
            reference.append(gbps)
            print(
                f"round {round_no} socat (C, per packet): {gbps:.2f} Gbit/s, {retrans} retransmits"
            )
            gbps, retrans = run_ours(lab, args.seconds, args.queues, args.offload)
            ours.append(gbps)
            print(
                f"round {round_no} pyflannel udp:        {gbps:.2f} Gbit/s, {retrans} retransmits"
            )
    print(f"socat mean: {statistics.mean(reference):.2f} Gbit/s")
    print(f"pyflannel udp mean: {statistics.mean(ours):.2f} Gbit/s")
    print(f"udp_throughput_ratio: {statistics.mean(ours) / statistics.mean(reference):.2f}")


if __name__ == "__main__":
    main()
