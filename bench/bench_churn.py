"""Churn soak: one pyflanneld (vxlan) with 5 000 peer leases in a real etcd under continuous
churn (60 lease changes a second by default: new peers, peers leaving, peers changing their VTEP
MAC, a third each) for ten minutes.

Lab and churn: pyflannel_lab/churn.py (an AgentLab with one host, /29 subnets in
10.244.0.0/16, the changes sent on schedule from the underlay with the agent's own etcd client;
a peer changes again only 2 s after its last change, so every change reaches the kernel as
such). The agent runs with flanneld's resync period, a reconcile every 10 s. A netlink monitor
in the host namespace (bench_agent_scale.KernelMonitor) timestamps every kernel change.

Figures:
  * event -> kernel latency of every change: its etcd request sent -> the peer's route added
    (a new peer) or gone (a peer that left), or its new VTEP MAC's FDB entry added (a change);
    p50/p99/max over the first and the last window (60 s), and p99 per window throughout;
    and the agent's share of it: the change's watch event seen by a second watcher beside the
    churn (etcd's commit and delivery, the same for the agent) -> the kernel;
  * the agent's VmRSS and open file descriptors every 10 s: at the churn's start (right after
    the 5 000 peers were programmed), after the first window (the reconcile's and the event
    path's working set in place), and at the end; growth over the soak and after the first
    window;
  * the end state: the kernel's flannel.1 entries against the churn's own view of the leases,
    and `pyflannel status` (0 missing, 0 stale).

Goals (issue 25): RSS growth <= 5 MiB, fds flat, p99 <= 50 ms throughout, the kernel equal to
the lease set at the end. Finishes with `metric: value` lines. Needs root:

    PYTHONPATH=. python bench/bench_churn.py [--peers 5000] [--rate 60] [--minutes 10] [--window 60]
                                [--reconcile-interval 10]

`--reconcile-interval 0` turns the periodic reconcile off, which tells its share of the tail
latency (each reconcile dumps and compares the 15 000 entries while events wait).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

from bench_agent_scale import Change, KernelMonitor, percentile
from sigterm import interrupt_on_sigterm

from pyflannel_lab.churn import (
    RECONCILE_INTERVAL,
    LeaseChurn,
    Op,
    ProcessFacts,
    configure,
    entries_for,
    in_sync,
    kernel_entries,
    lease_key,
    process_facts,
    with_etcd,
)
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_runtime.subnet.etcd.client import EtcdClient, prefix_range_end

SUBNETS = b"/coreos.com/network/subnets/"

SAMPLE_EVERY = 10  # seconds between RSS and fd samples


def wait_in_sync(lab: AgentLab, leases: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not in_sync(lab, leases):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the agent did not reach {leases} leases in {timeout} s")
        time.sleep(1)


def seen_at(changes: list[Change]) -> dict[tuple[str, str, bool], list[float]]:
    """When each (kind, destination, added) change was seen, in order."""
    index: dict[tuple[str, str, bool], list[float]] = defaultdict(list)
    for change in changes:
        index[(change.kind, change.dst, change.added)].append(change.at)
    for times in index.values():
        times.sort()
    return index


def marker(op: Op) -> tuple[str, str, bool]:
    """The kernel change that shows `op` applied."""
    if op.kind == "add":
        return "route", str(op.subnet), True
    if op.kind == "remove":
        return "route", str(op.subnet), False
    return "fdb", op.mac, True


def latencies(ops: list[Op], changes: list[Change]) -> list[tuple[float, float]]:
    """(when sent, seconds until the kernel showed it) for every op."""
    index = seen_at(changes)
    out = []
    for op in ops:
        times = index.get(marker(op), [])
        at = bisect.bisect_left(times, op.sent)
        if at == len(times):
            raise RuntimeError(f"{op} never reached the kernel ({len(changes)} changes seen)")
        out.append((op.sent, times[at] - op.sent))
    return out


async def churn_watched(
    client: EtcdClient,
    churn: LeaseChurn,
    rate: float,
    seconds: float,
    sample: Callable[[float], None],
) -> tuple[list[Op], dict[str, list[float]]]:
    """Run the churn with a watch beside it: the changes sent, and when a watch saw each key
    change (key -> times)."""
    _, revision = await client.range(SUBNETS, prefix_range_end(SUBNETS))
    watch = await client.watch(SUBNETS, prefix_range_end(SUBNETS), revision + 1)
    seen: dict[str, list[float]] = defaultdict(list)

    async def follow() -> None:
        async for event in watch.events():
            seen[event.kv.key.decode()].append(time.time())

    follower = asyncio.create_task(follow())
    try:
        ops = await churn.run(client, rate, seconds, sample)
        await asyncio.sleep(2)  # the last events
    finally:
        follower.cancel()
        watch.close()
    return ops, seen


def agent_share(
    ops: list[Op], seen: dict[str, list[float]], lat: list[tuple[float, float]]
) -> list[float]:
    """For each op, its watch event seen -> the kernel (the agent's part of the latency)."""
    out = []
    for op, (sent, taken) in zip(ops, lat, strict=True):
        times = seen.get(lease_key(op.subnet).decode(), [])
        at = bisect.bisect_left(times, sent)
        if at < len(times):
            out.append(sent + taken - times[at])
    return out


def describe(values: list[float]) -> str:
    ms = [v * 1e3 for v in values]
    return (
        f"p50 {statistics.median(ms):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms, "
        f"max {max(ms):.1f} ms ({len(ms)} changes)"
    )


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=60.0, help="lease changes a second")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per latency window")
    parser.add_argument("--reconcile-interval", type=int, default=RECONCILE_INTERVAL)
    args = parser.parse_args()
    seconds = args.minutes * 60

    churn = LeaseChurn(args.peers)
    with AgentLab({"Type": "vxlan"}, hosts=1, prefix="pbc", ip_masq=False) as lab:
        configure(lab)
        with_etcd(lab, churn.load)
        host = lab.net.hosts[0]
        agent = lab.start_agent(host, f"--reconcile-interval={args.reconcile_interval}")
        lab.wait_ready(host, timeout=120)
        wait_in_sync(lab, args.peers + 1, timeout=300)
        pid = agent.process.pid
        samples: list[tuple[float, ProcessFacts]] = [(0.0, process_facts(pid))]

        def sample(elapsed: float) -> None:
            if int(elapsed) % SAMPLE_EVERY == 0:
                samples.append((elapsed, process_facts(pid)))

        monitor = KernelMonitor(host.ns)
        try:
            started = time.time()
            ops, seen = with_etcd(
                lab, lambda client: churn_watched(client, churn, args.rate, seconds, sample)
            )
            sent_in = time.time() - started
            leases = len(churn.peers) + 1
            wait_in_sync(lab, leases, timeout=300)
            samples.append((time.time() - started, process_facts(pid)))
            time.sleep(1)  # the monitor's last datagrams
            changes = monitor.take()
            overflows = monitor.overflows
        finally:
            monitor.close()
        equal = kernel_entries(lab) == entries_for(churn.peers)
        alive = agent.process.poll() is None

    lat = latencies(ops, changes)
    share = agent_share(ops, seen, lat)
    # Windows by when each change was sent; a short last one joins the one before.
    windows: dict[int, list[float]] = defaultdict(list)
    whole = int((ops[-1].sent - ops[0].sent) // args.window) or 1
    for sent, seconds_taken in lat:
        windows[min(int((sent - ops[0].sent) // args.window), whole - 1)].append(seconds_taken)
    first, last = windows[0], windows[whole - 1]
    p99s = [percentile(windows[w], 0.99) * 1e3 for w in sorted(windows)]

    start_facts, end_facts = samples[0][1], samples[-1][1]
    warm = next(facts for elapsed, facts in samples if elapsed >= args.window)
    growth = (end_facts.rss_kib - start_facts.rss_kib) / 1024
    growth_warm = (end_facts.rss_kib - warm.rss_kib) / 1024
    fds = sorted({facts.fds for _, facts in samples})

    kinds = {kind: sum(op.kind == kind for op in ops) for kind in ("add", "remove", "change")}
    print(
        f"{len(ops)} lease changes in {sent_in:.0f} s ({len(ops) / sent_in:.1f}/s: {kinds}) "
        f"against {args.peers} peers; monitor overflows {overflows}"
    )
    print(f"event -> kernel, first {args.window:.0f} s: {describe(first)}")
    print(f"event -> kernel, last {args.window:.0f} s: {describe(last)}")
    print("p99 per window (ms): " + ", ".join(f"{p:.1f}" for p in p99s))
    print(f"watch event -> kernel (the agent's part), all changes: {describe(share)}")
    print(
        "VmRSS (MiB) every 10 s: "
        + ", ".join(f"{facts.rss_kib / 1024:.1f}" for _, facts in samples)
    )
    print(f"open fds seen: {fds}")
    print(f"end state: kernel equal to the leases: {equal}; agent running: {alive}")
    print(f"churn_rate_per_s: {len(ops) / sent_in:.1f}")
    print(f"rss_start_mib: {start_facts.rss_kib / 1024:.1f}")
    print(f"rss_end_mib: {end_facts.rss_kib / 1024:.1f}")
    print(f"rss_growth_mib: {growth:.1f}")
    print(f"rss_growth_after_first_window_mib: {growth_warm:.1f}")
    print(f"fds_start: {start_facts.fds}")
    print(f"fds_end: {end_facts.fds}")
    print(f"latency_p99_first_window_ms: {percentile(first, 0.99) * 1e3:.1f}")
    print(f"latency_p99_last_window_ms: {percentile(last, 0.99) * 1e3:.1f}")
    print(f"latency_p99_worst_window_ms: {max(p99s):.1f}")
    print(f"agent_latency_p99_ms: {percentile(share, 0.99) * 1e3:.1f}")
    print(f"end_state_equal: {equal}")


if __name__ == "__main__":
    main()
