"""One pyflanneld (vxlan) with the Kubernetes datastore against 5 000 realistic nodes: programming
time, event latency during a burst of node updates, steady state under kubelet heartbeats,
memory, and what each heartbeat costs the agent; the agent of a git revision ("before",
--baseline) and of this tree ("after") side by side, taking turns in each round. The etcd
equivalent is bench_agent_scale.py, whose peers (subnets /29, VTEP MACs, public IPs) and
measurements this reuses.

Lab: an AgentLab with one host and the Node API test double (tests/fakes/kube_api.py) in the
underlay, serving 5 000 nodes shaped like a real cluster's (bench/realistic_node.py: kubeadm
labels, ~25 images, managed fields; ~10 KB of JSON each) with flannel's annotations and a
podCIDR each; the host's own node has 10.244.0.8/29.

Figures, for each agent in each round:
  * full programming: subnet.env written -> the last of the 15 000 entries in the kernel (and
    from agent start), over `ip -batch` + `bridge -batch` writing the same entries right
    before (a cold start: no flannel.1) under a listener to the kernel's notifications as the
    agent's run is under the bench's; and over the same without one (bare, ~20% faster). The
    test double has encoded every node before the start: it shares this machine's CPUs with
    the agent, where a real API server's are its own;
  * a burst of --updates node updates written back to back: every other one a new VTEP MAC (a
    restarted flanneld's; its neighbour, FDB entry and route are rewritten), the others
    kubelet heartbeats; event -> kernel latency from each MAC change's write to its
    neighbour's RTM_NEWNEIGH;
  * steady state: heartbeats of every node in turn, 100 a second for 20 s: kernel writes (0
    wanted), the agent's CPU per heartbeat, and the bytes the API sent the agent per heartbeat
    (measured on its watch; beside them, the size of one heartbeat's watch event whole and as
    PartialObjectMetadata);
  * agent RSS (VmRSS) with 5 000 peers programmed, after a scrape of /metrics (as Prometheus
    makes).
Once: the whole NodeList decoded by json.loads and by the agent's decoder (decode.py), each in
a bare interpreter, over `ip -batch`. --pages runs this tree with other page sizes too.

Finishes with `metric: value` lines (the median over the rounds, their range in brackets).
Needs root, and the repository on the import path for the test double:
    PYTHONPATH=. python bench/bench_kube_scale.py [--nodes 5000] [--updates 1000] [--rounds 1]
        [--baseline cc7e5ca] [--pages 25,100]
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import realistic_node
from baseline import baseline_tree
from bench_agent_scale import (
    KernelMonitor,
    cold_start,
    cpu_seconds,
    ip_batch_time,
    peer_change,
    peer_leases,
    percentile,
    rss_kib,
    scrape_costs,
)
from sigterm import interrupt_on_sigterm

from pyflannel_lab.churn import OWN_SUBNET
from pyflannel_lab.netns_agents import AGENT_PROGRAM, AgentLab
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.vxlan_data import parse_vxlan_backend_data

try:
    from tests.fakes.kube_api import FakeKubeApi, partial
except ImportError:
    sys.exit("run from the repository's root as PYTHONPATH=. python bench/bench_kube_scale.py")

ROUNDS = 1
# "before": the agent as it was before it decoded only what it reads (json.loads of whole
# Nodes, pages of 25).
BASELINE = "cc7e5ca"
HEARTBEATS_PER_SECOND = 100
STEADY_SECONDS = 20
DECODES = 3
# This tree's agent with another page size (node_pages' default argument).
PAGES_PROGRAM = (
    "import sys; from pyflannel_runtime.subnet.kube import kube; "
    "kube.NodeApi.node_pages.__defaults__ = ({},); "
    "from pyflannel_runtime.agent.main import main; sys.exit(main())"
)


def node_name(n: int) -> str:
    return f"node-{n:05d}"


def load_nodes(api: FakeKubeApi, peers: list[Lease]) -> None:
    for n, lease in enumerate(peers):
        mac = parse_vxlan_backend_data(lease.attrs.backend_data).vtep_mac
        api.add_node_object(
            realistic_node.node(node_name(n), str(lease.subnet), str(lease.attrs.public_ip), mac, n)
        )


def new_mac(n: int, burst_no: int) -> str:
    """Node n's VTEP MAC after burst `burst_no` (from 1): one of the peers' MACs
    (bench_agent_scale.peer_change), none of whose first ones (peer_leases) end in 01."""
    return f"0a:58:{burst_no & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}:01"


def burst(
    api: FakeKubeApi, peers: list[Lease], updates: int, burst_no: int
) -> list[tuple[float, str]]:
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
            data = f'{{"VNI":1,"VtepMAC":"{new_mac(i, burst_no)}"}}'
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


DECODE_FLOORS = {
    "json": "import json; decode = json.loads",
    "msgspec": (
        "from pyflannel_runtime.subnet.kube.annotations import Annotations; "
        "from pyflannel_runtime.subnet.kube.decode import NodeDecoder; "
        "decode = NodeDecoder(Annotations.for_prefix()).page"
    ),
}


def list_decode_floors(api: FakeKubeApi) -> tuple[float, dict[str, float]]:
    """The whole NodeList's size (MB), and the best of DECODES decodings of it by each decoder
    (json.loads; the agent's, decode.py), each in a fresh interpreter."""
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        body.write(api.node_list_json())
        body.flush()
        floors = {}
        for name, setup in DECODE_FLOORS.items():
            timer = (
                f"import sys, time; {setup}; data = open(sys.argv[1], 'rb').read(); "
                "t = time.perf_counter(); decode(data); print(time.perf_counter() - t)"
            )
            argv = [sys.executable, "-c", timer, body.name]
            floors[name] = min(
                float(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
                for _ in range(DECODES)
            )
        return os.path.getsize(body.name) / 1e6, floors


def heartbeat_event_sizes(api: FakeKubeApi) -> tuple[int, int]:
    """Bytes of one heartbeat's watch event, the object whole and as PartialObjectMetadata."""
    obj = api.node(node_name(1))
    assert obj is not None

    def line(body: object) -> int:
        return len(json.dumps({"type": "MODIFIED", "object": body}, separators=(",", ":"))) + 1

    return line({"kind": "Node", "apiVersion": "v1", **obj}), line(partial(obj))


# How an agent runs: the interpreter's arguments, and its working directory (a tree of another
# revision: None, this one).
Variant = tuple[Sequence[str], Path | None]


@dataclass
class Figures:
    """One variant's measurements, one of each per round."""

    full: list[float] = field(default_factory=list)  # subnet.env -> last entry, / ip -batch
    full_bare: list[float] = field(default_factory=list)  # the same, / ip -batch unlistened
    from_start: list[float] = field(default_factory=list)  # agent start -> last entry, / ip
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    max_ms: list[float] = field(default_factory=list)
    burst_rate: list[float] = field(default_factory=list)
    steady_writes: list[float] = field(default_factory=list)
    heartbeat_bytes: list[float] = field(default_factory=list)
    heartbeat_cpu_ms: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)


def span(values: list[float], fmt: str) -> str:
    """The median, and the range of the runs."""
    low, mid, high = (format(v, fmt) for v in (min(values), statistics.median(values), max(values)))
    return mid if len(values) == 1 else f"{mid} ({low}-{high})"


def measure(
    lab: AgentLab,
    api: FakeKubeApi,
    monitor: KernelMonitor,
    peers: list[Lease],
    variant: Variant,
    updates: int,
    start_no: int,
    figures: Figures,
) -> None:
    """A cold start, a burst of `updates`, a steady state and the RSS of one agent, into
    `figures`. `start_no`: the agent's start count on this host so far."""
    host = lab.net.hosts[0]
    nodes = len(peers)
    if host.n in lab.agents:
        lab.stop_agent(host)
        lab.net.ip(host.ns, "link", "del", "flannel.1")
    # The double encodes a node when it is first listed after a change (the burst and the
    # heartbeats since the last start changed 2 000 of them): done here, before the start, as a real
    # API server's encoding is done on the control plane's CPUs, not on the two this agent has.
    api.node_list_json()
    bare_time = ip_batch_time(peers)
    ip_time = ip_batch_time(peers, listening=True)
    full, writes, since_start = cold_start(lab, host, monitor, nodes, start_no, *variant)
    figures.full.append(full / ip_time)
    figures.full_bare.append(full / bare_time)
    figures.from_start.append(since_start / ip_time)
    print(
        f"  cold start: ip -batch + bridge -batch {ip_time:.3f} s under a listener ("
        f"{bare_time:.3f} s bare); agent start -> {3 * nodes} entries {since_start:.3f} s "
        f"(x{since_start / ip_time:.2f}); subnet.env written -> all entries {full:.3f} s "
        f"(x{full / ip_time:.2f}, x{full / bare_time:.2f} of bare); first -> last peer entry "
        f"{writes:.3f} s",
        flush=True,
    )
    agent = lab.agents[host.n]

    monitor.take()
    started = time.monotonic()
    changed = burst(api, peers, updates, start_no)
    seconds = time.monotonic() - started
    lat = burst_latencies(monitor, changed)
    figures.p50_ms.append(statistics.median(lat) * 1e3)
    figures.p99_ms.append(percentile(lat, 0.99) * 1e3)
    figures.max_ms.append(max(lat) * 1e3)
    figures.burst_rate.append(updates / seconds)
    print(
        f"  burst of {updates} node updates in {seconds:.2f} s ({updates / seconds:.0f}/s; "
        f"{len(changed)} VTEP MAC changes): event -> kernel p50 {figures.p50_ms[-1]:.1f} ms, "
        f"p99 {figures.p99_ms[-1]:.1f} ms, max {figures.max_ms[-1]:.1f} ms",
        flush=True,
    )

    time.sleep(2)
    monitor.take()
    watch_bytes = api.bytes_sent("watch")
    cpu_before = cpu_seconds(agent.process.pid)[0]
    beats = 0
    started = time.monotonic()
    while time.monotonic() - started < STEADY_SECONDS:
        api.update_node(node_name(beats % nodes), realistic_node.heartbeat)
        beats += 1
        time.sleep(max(0.0, started + beats / HEARTBEATS_PER_SECOND - time.monotonic()))
    time.sleep(2)  # the last events
    cpu = cpu_seconds(agent.process.pid)[0] - cpu_before
    figures.heartbeat_bytes.append((api.bytes_sent("watch") - watch_bytes) / beats)
    figures.heartbeat_cpu_ms.append(cpu / beats * 1e3)
    figures.steady_writes.append(len([c for c in monitor.take() if peer_change(c)]))
    scrape_costs(host, agent.process.pid, 1, 0.0)  # Prometheus scrapes: RSS counts its cost
    time.sleep(1)
    figures.rss_mib.append(rss_kib(agent.process.pid) / 1024)
    print(
        f"  {beats} heartbeats over {STEADY_SECONDS} s: {figures.steady_writes[-1]:.0f} kernel "
        f"changes; the agent received {figures.heartbeat_bytes[-1]:.0f} bytes and spent "
        f"{figures.heartbeat_cpu_ms[-1]:.3f} ms of CPU per heartbeat; VmRSS with {nodes} peers "
        f"after a scrape of /metrics {figures.rss_mib[-1]:.1f} MiB",
        flush=True,
    )


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--baseline", default=BASELINE, help="git revision of 'before'")
    parser.add_argument(
        "--pages", default="", help="page sizes to run this tree with too, e.g. 25,100"
    )
    args = parser.parse_args()
    peers = peer_leases(args.nodes, first=2)  # after OWN_SUBNET

    with baseline_tree(args.baseline) as old:
        variants: dict[str, Variant] = {
            "before": (AGENT_PROGRAM, old),
            "after": (AGENT_PROGRAM, None),
        }
        for size in filter(None, args.pages.split(",")):
            variants[f"pages_of_{size}"] = (("-c", PAGES_PROGRAM.format(int(size))), None)
        figures = {name: Figures() for name in variants}
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
            # The test double serves from this process: without this, a collection of its
            # ~5 000 whole nodes' millions of objects stalls its watch for ~1 s in the burst,
            # which a bare watch client sees too; the real API server has no such pause.
            gc.freeze()
            print(f"{args.nodes} realistic nodes in the API in {time.perf_counter() - start:.1f} s")
            whole, metadata = heartbeat_event_sizes(api)
            body_mb, floors = list_decode_floors(api)
            monitor = KernelMonitor(host.ns)
            try:
                starts = 0
                for round_no in range(1, args.rounds + 1):
                    for name, variant in variants.items():
                        starts += 1
                        print(f"round {round_no}, {name}: {load()}", flush=True)
                        measure(
                            lab, api, monitor, peers, variant, args.updates, starts, figures[name]
                        )
            finally:
                monitor.close()

    ip_time = statistics.median(ip_batch_time(peers) for _ in range(3))
    print(
        f"decoding the NodeList alone ({body_mb:.1f} MB of JSON, in a bare interpreter, best of "
        f"{DECODES}): json.loads {floors['json']:.3f} s (x{floors['json'] / ip_time:.2f} of "
        f"ip -batch), the agent's decoder {floors['msgspec']:.3f} s "
        f"(x{floors['msgspec'] / ip_time:.2f}); one heartbeat's watch event is {whole} bytes "
        f"with the whole Node, {metadata} as PartialObjectMetadata"
    )
    print(f"end: {load()}")
    for name, f in figures.items():
        print(f"kube_programming_ratio_full_{name}: {span(f.full, '.2f')}")
        print(f"kube_programming_ratio_full_bare_{name}: {span(f.full_bare, '.2f')}")
        print(f"kube_programming_ratio_from_start_{name}: {span(f.from_start, '.2f')}")
        print(f"kube_event_latency_p50_ms_{name}: {span(f.p50_ms, '.1f')}")
        print(f"kube_event_latency_p99_ms_{name}: {span(f.p99_ms, '.1f')}")
        print(f"kube_event_latency_max_ms_{name}: {span(f.max_ms, '.1f')}")
        print(f"kube_burst_updates_per_s_{name}: {span(f.burst_rate, '.0f')}")
        print(f"kube_steady_state_writes_{name}: {span(f.steady_writes, '.0f')}")
        print(f"kube_bytes_per_heartbeat_{name}: {span(f.heartbeat_bytes, '.0f')}")
        print(f"kube_cpu_ms_per_heartbeat_{name}: {span(f.heartbeat_cpu_ms, '.3f')}")
        print(f"kube_agent_rss_mib_{name}: {span(f.rss_mib, '.1f')}")
    for name, seconds in floors.items():
        print(f"kube_list_decode_floor_ratio_{name}: {seconds / ip_time:.2f}")
    print(f"heartbeat_event_bytes_whole: {whole}")
    print(f"heartbeat_event_bytes_metadata: {metadata}")


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
