"""One pyflanneld (vxlan) with the Kubernetes datastore against 5 000 realistic nodes: programming
time, event latency during a burst of node updates, steady state under kubelet heartbeats,
memory, and what each heartbeat costs the agent. The etcd equivalent is
bench_agent_scale.py, whose peers (subnets /29, VTEP MACs, public IPs) and measurements this
reuses.

Lab: an AgentLab with one host and the Node API test double (tests/fakes/kube_api.py) in the
underlay, serving 5 000 nodes shaped like a real cluster's (bench/realistic_node.py: kubeadm
labels, ~25 images, managed fields; ~10 KB of JSON each) with flannel's annotations and a
podCIDR each; the host's own node has 10.244.0.8/29.

Figures:
  * full programming: subnet.env written -> the last of the 15 000 entries in the kernel (and
    from agent start), over `ip -batch` + `bridge -batch` writing the same entries right
    before, the median over 3 cold starts;
  * a burst of 1 000 node updates written back to back: every other one a new VTEP MAC (a
    restarted flanneld's; its neighbour, FDB entry and route are rewritten), the others
    kubelet heartbeats; event -> kernel latency from each MAC change's write to its
    neighbour's RTM_NEWNEIGH;
  * steady state: heartbeats of every node in turn, 100 a second for 20 s: kernel writes (0
    wanted), the agent's CPU per heartbeat, and the bytes the API sent the agent per heartbeat
    (measured on its watch; beside them, the size of one heartbeat's watch event whole and as
    PartialObjectMetadata);
  * agent RSS (VmRSS) with 5 000 peers programmed.

Finishes with `metric: value` lines. Needs root, and the repository on the import path for
the test double:
    PYTHONPATH=. python bench/bench_kube_scale.py [--nodes 5000] [--updates 1000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import cast

import realistic_node
from bench_agent_scale import (
    KernelMonitor,
    cold_start,
    cpu_seconds,
    ip_batch_time,
    peer_change,
    peer_leases,
    percentile,
    rss_kib,
)
from sigterm import interrupt_on_sigterm

from pyflannel_lab.churn import OWN_SUBNET
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.vxlan_data import parse_vxlan_backend_data

try:
    from tests.fakes.kube_api import FakeKubeApi, partial
except ImportError:
    sys.exit("run from the repository's root as PYTHONPATH=. python bench/bench_kube_scale.py")

COLD_STARTS = 3
HEARTBEATS_PER_SECOND = 100
STEADY_SECONDS = 20
DECODES = 3


def node_name(n: int) -> str:
    return f"node-{n:05d}"


def load_nodes(api: FakeKubeApi, peers: list[Lease]) -> None:
    for n, lease in enumerate(peers):
        mac = parse_vxlan_backend_data(lease.attrs.backend_data).vtep_mac
        api.add_node_object(
            realistic_node.node(node_name(n), str(lease.subnet), str(lease.attrs.public_ip), mac, n)
        )


def new_mac(n: int) -> str:
    return f"0a:59:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}:00"


def burst(api: FakeKubeApi, peers: list[Lease], updates: int) -> list[tuple[float, str]]:
    """`updates` writes back to back: MAC changes of nodes 0, 2, 4, ... and heartbeats of 1, 3,
    ...; returns (when written, the neighbour's IP) of each MAC change.

    Each write waits until the double has written its watch event to the agent: the double
    serves from this process, so without that the writes (a deep copy of a 10 KB node each)
    and its fan-out take turns at one GIL and the events reach the agent only as the burst
    ends (p50 248 ms, p99 397 ms on an idle machine), which a real API server, fanning out
    beside its writers, does not do."""
    changed = []
    key = f"{realistic_node.ANNOTATION_PREFIX}/backend-data"
    for i in range(updates):
        if i % 2:
            node = api.update_node(node_name(i), realistic_node.heartbeat)
        else:
            data = f'{{"VNI":1,"VtepMAC":"{new_mac(i)}"}}'
            node = api.annotate(node_name(i), {key: data})
            lease = peers[i]
            assert lease.subnet is not None
            changed.append((time.time(), str(lease.subnet.network_address)))
        api.wait_delivered(int(node["metadata"]["resourceVersion"]))
    return changed


def burst_latencies(monitor: KernelMonitor, changed: list[tuple[float, str]]) -> list[float]:
    wanted = {ip for _, ip in changed}
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(seen) < len(wanted) and time.monotonic() < deadline:
        for change in monitor.take():
            if change.kind == "neigh" and change.added and change.dst in wanted:
                seen.setdefault(change.dst, change.at)
        time.sleep(0.05)
    missing = wanted - set(seen)
    if missing:
        raise RuntimeError(f"{len(missing)} neighbours were never rewritten, e.g. {min(missing)}")
    return [seen[ip] - at for at, ip in changed]


def list_decode_floor(api: FakeKubeApi) -> tuple[float, float]:
    """The whole NodeList's size (MB) and the best of DECODES json.loads of it, each in a
    fresh interpreter."""
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        body.write(api.node_list_json())
        body.flush()
        timer = (
            "import json, sys, time; data = open(sys.argv[1], 'rb').read(); "
            "t = time.perf_counter(); json.loads(data); print(time.perf_counter() - t)"
        )
        argv = [sys.executable, "-c", timer, body.name]
        times = [
            float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
            for _ in range(DECODES)
        ]
        return os.path.getsize(body.name) / 1e6, min(times)


def heartbeat_event_sizes(api: FakeKubeApi) -> tuple[int, int]:
    """Bytes of one heartbeat's watch event, the object whole and as PartialObjectMetadata."""
    obj = api.node(node_name(1))
    assert obj is not None

    def line(body: object) -> int:
        return len(json.dumps({"type": "MODIFIED", "object": body}, separators=(",", ":"))) + 1

    return line({"kind": "Node", "apiVersion": "v1", **obj}), line(partial(obj))


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=1000)
    args = parser.parse_args()
    peers = peer_leases(args.nodes, first=2)  # after OWN_SUBNET
    entries = 3 * args.nodes

    with AgentLab(
        {"Type": "vxlan"}, hosts=1, prefix="pkbs", ip_masq=False, kube_api=FakeKubeApi
    ) as lab:
        api = cast(FakeKubeApi, lab.kube)
        host = lab.net.hosts[0]

        def own_cidr(obj: dict[str, object]) -> None:
            obj["spec"] = {"podCIDR": str(OWN_SUBNET), "podCIDRs": [str(OWN_SUBNET)]}

        api.update_node(host.ns, own_cidr)
        start = time.perf_counter()
        load_nodes(api, peers)
        # The test double serves from this process: without this, a collection of its ~5 000
        # whole nodes' millions of objects stalls its watch for ~1 s in the burst, which a bare
        # watch client sees too; the real API server has no such pause to lend the agent.
        gc.freeze()
        print(f"{args.nodes} realistic nodes in the API in {time.perf_counter() - start:.1f} s")
        whole, metadata = heartbeat_event_sizes(api)

        monitor = KernelMonitor(host.ns)
        try:
            full_ratios, start_ratios, ip_times = [], [], []
            for start_no in range(1, COLD_STARTS + 1):
                if start_no > 1:
                    lab.stop_agent(host)
                    lab.net.ip(host.ns, "link", "del", "flannel.1")
                ip_time = ip_batch_time(peers)
                ip_times.append(ip_time)
                full, writes, since_start = cold_start(lab, host, monitor, args.nodes, start_no)
                full_ratios.append(full / ip_time)
                start_ratios.append(since_start / ip_time)
                print(
                    f"cold start {start_no}: ip -batch + bridge -batch {ip_time:.3f} s; agent "
                    f"start -> {entries} entries {since_start:.3f} s (x{start_ratios[-1]:.2f}); "
                    f"subnet.env written -> all entries {full:.3f} s (x{full_ratios[-1]:.2f}); "
                    f"first -> last peer entry {writes:.3f} s"
                )
            agent = lab.agents[host.n]
            body_mb, decode = list_decode_floor(api)
            floor_ratio = decode / statistics.median(ip_times)
            print(
                f"decoding the NodeList alone ({body_mb:.1f} MB of JSON, json.loads in a bare "
                f"interpreter, best of {DECODES}): {decode:.3f} s, x{floor_ratio:.2f} of "
                "ip -batch: the floor of any CPython agent that lists whole Nodes"
            )

            monitor.take()
            burst_started = time.monotonic()
            changed = burst(api, peers, args.updates)
            burst_seconds = time.monotonic() - burst_started
            lat = burst_latencies(monitor, changed)
            print(
                f"burst of {args.updates} node updates in {burst_seconds:.2f} s "
                f"({args.updates / burst_seconds:.0f}/s; {len(changed)} VTEP MAC changes): event "
                f"-> kernel p50 {statistics.median(lat) * 1e3:.1f} ms, p99 "
                f"{percentile(lat, 0.99) * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms"
            )

            time.sleep(2)
            monitor.take()
            watch_bytes = api.bytes_sent("watch")
            cpu_before = cpu_seconds(agent.process.pid)[0]
            beats = 0
            started = time.monotonic()
            while time.monotonic() - started < STEADY_SECONDS:
                api.update_node(node_name(beats % args.nodes), realistic_node.heartbeat)
                beats += 1
                time.sleep(max(0.0, started + beats / HEARTBEATS_PER_SECOND - time.monotonic()))
            time.sleep(2)  # the last events
            cpu = cpu_seconds(agent.process.pid)[0] - cpu_before
            per_beat = (api.bytes_sent("watch") - watch_bytes) / beats
            steady = [c for c in monitor.take() if peer_change(c)]
            print(
                f"{beats} heartbeats over {STEADY_SECONDS} s: {len(steady)} kernel changes; the "
                f"agent received {per_beat:.0f} bytes and spent {cpu / beats * 1e3:.2f} ms of CPU "
                f"per heartbeat; one heartbeat's watch event is {whole} bytes with the whole "
                f"Node, {metadata} as PartialObjectMetadata ({whole / metadata:.1f}x less)"
            )
            rss = rss_kib(agent.process.pid)
            print(f"agent VmRSS with {args.nodes} peers: {rss / 1024:.1f} MiB")
        finally:
            monitor.close()

    print(f"kube_programming_ratio_full: {statistics.median(full_ratios):.2f}")
    print(f"kube_programming_ratio_from_start: {statistics.median(start_ratios):.2f}")
    print(f"kube_list_decode_floor_ratio: {floor_ratio:.2f}")
    print(f"kube_event_latency_p99_ms: {percentile(lat, 0.99) * 1e3:.1f}")
    print(f"kube_burst_updates_per_s: {args.updates / burst_seconds:.0f}")
    print(f"kube_steady_state_writes: {len(steady)}")
    print(f"kube_agent_rss_mib: {rss / 1024:.1f}")
    print(f"kube_bytes_per_heartbeat: {per_beat:.0f}")
    print(f"kube_cpu_ms_per_heartbeat: {cpu / beats * 1e3:.3f}")
    print(f"heartbeat_event_bytes_whole: {whole}")
    print(f"heartbeat_event_bytes_metadata: {metadata}")


if __name__ == "__main__":
    main()
