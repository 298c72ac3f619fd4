"""etcd fan-out: N pyflanneld agents (vxlan), each in its own network namespace on one underlay
bridge, against one real etcd (Debian's etcd-server) in the underlay.

Lab: pyflannel_lab/fanout.py (an AgentLab without lab pods; etcd allocates the subnets;
agents reconcile every 30 s, flanneld's resync period). A host has programmed when its kernel
routes every peer's subnet through flannel.1, polled with `ip route` every 0.1 s (so times are
good to a few tenths of a second at N = 50).

Scenarios, each measured as etcd's wire bytes (br-ul tx), the payload bytes it sent (a tap on
br-ul, each byte once: without headers and retransmissions), its gRPC sent bytes (metrics), its
CPU (utime + stime) and the time until every host has programmed:
  * cold start: every agent started at once into an empty cluster;
  * a lease change: a new peer's lease put into etcd, until every host routes it (--changes
    of them one after another per run, figures per change: etcd's CPU ticks are 10 ms);
  * restart storm, before and after side by side: every agent stopped (SIGTERM) and its
    flannel.1 routes flushed (a node that rebooted), then all started at once; "before" the
    agents of --baseline (a git revision: each lists every lease and puts its own again),
    "after" this tree's (each resumes from the state it kept; started and stopped once first
    so that it has kept one, as a running cluster's agents have); the agents' own CPU too;
    both trees' agents load compiled bytecode, as an installed node's do (bench/baseline.py
    compile_ahead);
  * spread restart: this tree's restart with the starts spread evenly over --spread seconds;
  * cold restart, spread and not: this tree's restart without the kept state (removed, as a
    reboot empties /run): every agent lists, each after waiting a random time first (its
    cold start's spread), and the same with that wait left out.

Scenario "outage" (--outage-agents, default 50, in a lab of its own): etcd stopped (SIGTERM) for
--outage seconds and started again on the same data directory and port, as a restart of its
service would, while every agent runs. etcd's return is when its /health says true again. Seen
on br-ul (pyflannel_lab/fanout.py EtcdTap, kernel timestamps): each agent's
reconnect, the first of its requests etcd answers after it returns (min, median, max and
max - min, in seconds after the return); how many requests etcd got in the first second after
it returned; the most it got within any 1 s and any 100 ms from its start until 10 s after
its return; and the most connection attempts within 100 ms while it was down (from 10 s into
the outage, when every retry has reached the longest wait). Twice per run,
side by side: the agents as they are (jitter: each retry waits a random time up to the
doubling ceiling) and lockstep agents (every wait the ceiling itself: the schedule the agents
had before jitter, set through the one place jitter comes from,
pyflannel_runtime/subnet/backoff.py jitter_source). Afterwards a new peer's lease must reach
every host, so every watch is back. etcd's own count of requests since it started again
(grpc_server_started_total) is printed beside the tap's.

Extrapolation to 5 000 nodes: a lease change costs etcd one watch event per agent (bytes per
agent at the largest N, times 5 000); a storm's cost(N) = a*N + b*N^2 through the two lab
sizes (--agents, default 25 and 50), for each restart storm.

Finishes with `metric: value` lines (each scenario repeated --runs times; median and min-max).
Needs root:
    PYTHONPATH=. python bench/bench_etcd_fanout.py [--agents 25,50] [--runs 3] [--spread 10]
        [--changes 10] [--baseline cc7e5ca] [--scenarios fanout,outage] [--outage 30]
        [--outage-agents 50]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from baseline import ROOT, baseline_tree, compile_ahead
from sigterm import interrupt_on_sigterm

from pyflannel_lab.fanout import (
    EtcdCost,
    EtcdTap,
    Recovery,
    add_peer,
    agent_cpu_seconds,
    etcd_cost,
    etcd_outage,
    fanout_lab,
    forget_routes,
    forget_state,
    free_subnet,
    remove_peer,
    start_agents,
    stop_agents,
    wait_programmed,
)
from pyflannel_lab.netns_agents import AGENT_PROGRAM, AgentLab

TARGET = 5000
TIMEOUT = 600.0
# Agents without jitter, to compare against: every retry waits its ceiling (0.1 s doubling to
# 5 s), as before jitter. Set where the agents' jitter comes from, before the agent runs.
LOCKSTEP_PROGRAM = (
    "-c",
    "import sys; from pyflannel_runtime.subnet import backoff; "
    "backoff.jitter_source = lambda: 1.0; "
    "from pyflannel_runtime.agent.main import main; sys.exit(main())",
)
MODES = {"lockstep": LOCKSTEP_PROGRAM, "jitter": AGENT_PROGRAM}
SETTLE = 5.0  # seconds between the agents' start-up and the outage
# Seconds into an outage by which every retry ceiling has reached its cap (0.1 s doubling to
# 5 s: 6.3 s of failures): the connection attempts are counted from then on.
CAPPED = 10.0
WATCHES_CATCH_UP = 3.0  # seconds
# "before": the agents as they were before they resumed their watch (every start lists).
BASELINE = "cc7e5ca"
# This tree's agent without its cold start's spread.
UNSPREAD_PROGRAM = (
    "-c",
    "import sys; from pyflannel_runtime.subnet.etcd import etcd; etcd.COLD_START_SPREAD = 0.0; "
    "from pyflannel_runtime.agent.main import main; sys.exit(main())",
)


@dataclass(frozen=True)
class Sample:
    cost: EtcdCost
    seconds: float
    agent_cpu: float
    # etcd's answers as the tap saw them leave: the payload, each byte once (no TCP/IP headers,
    # no retransmissions, which vary with the machine's load and blur a fit over lab sizes).
    sent_bytes: int


# What etcd sent, on the wire and as the payload alone.
BYTES: dict[str, Callable[[Sample], float]] = {
    "wire_bytes": lambda s: s.cost.wire_bytes,
    "sent_bytes": lambda s: s.sent_bytes,
}


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def measured(lab: AgentLab, act: Callable[[], float | None], per: int = 1) -> Sample:
    """etcd's and the agents' cost of `act`, which returns when every host had programmed (or
    None: `act` itself is the work), divided by `per` (the changes `act` made)."""
    assert lab.etcd is not None
    tap = EtcdTap(lab.net.ul, "br-ul", lab.etcd.client_port)
    try:
        before, agents_before = etcd_cost(lab), agent_cpu_seconds(lab)
        started = time.monotonic()
        end = act() or time.monotonic()
        time.sleep(0.5)  # the last watch responses
        cost = etcd_cost(lab) - before
        sent = tap.sent_bytes()
    finally:
        tap.stop()
    return Sample(
        EtcdCost(cost.wire_bytes // per, cost.grpc_bytes // per, cost.cpu_seconds / per),
        (end - started) / per,
        (agent_cpu_seconds(lab) - agents_before) / per,
        sent // per,
    )


def span(values: list[float], fmt: str) -> str:
    low, mid, high = (format(v, fmt) for v in (min(values), statistics.median(values), max(values)))
    return f"{mid} ({low}-{high})"


def report(name: str, samples: list[Sample], agents: int, with_time: bool = True) -> None:
    costs = [s.cost for s in samples]
    print(f"{name}_wire_bytes: {span([c.wire_bytes for c in costs], '.0f')}")
    print(f"{name}_grpc_bytes: {span([c.grpc_bytes for c in costs], '.0f')}")
    print(f"{name}_sent_bytes: {span([s.sent_bytes for s in samples], '.0f')}")
    print(f"{name}_wire_bytes_per_agent: {span([c.wire_bytes / agents for c in costs], '.0f')}")
    print(f"{name}_etcd_cpu_s: {span([c.cpu_seconds for c in costs], '.3f')}")
    if with_time:
        print(f"{name}_all_programmed_s: {span([s.seconds for s in samples], '.2f')}")
    print(f"{name}_agents_cpu_s: {span([s.agent_cpu for s in samples], '.2f')}")


@dataclass
class Figures:
    cold: Sample
    changes: list[Sample]
    storms_before: list[Sample]
    storms: list[Sample]
    spreads: list[Sample]
    cold_restarts: list[Sample]
    unspread_restarts: list[Sample]


def bench(n: int, runs: int, spread: float, changes_per_run: int, old: Path) -> Figures:
    peers = n - 1
    print(f"{n} agents: {load()}", flush=True)
    with fanout_lab(n) as lab:

        def programmed(expected: int) -> float:
            return max(wait_programmed(lab, expected, TIMEOUT).values())

        def cold_start() -> float:
            start_agents(lab)
            return programmed(peers)

        cold = measured(lab, cold_start)
        print(f"{n} agents: cold start done, {load()}", flush=True)

        def lease_changes(added: list[IPv4Network]) -> float:
            """New peers one by one, each until every host routes it."""
            end = 0.0
            for k in range(changes_per_run):
                added.append(free_subnet(lab))
                add_peer(lab, added[-1])
                end = programmed(peers + k + 1)
            return end

        changes = []
        for _ in range(runs):
            added: list[IPv4Network] = []
            changes.append(measured(lab, functools.partial(lease_changes, added), changes_per_run))
            for subnet in added:
                remove_peer(lab, subnet)
        print(f"{n} agents: lease changes done, {load()}", flush=True)

        def restart(
            gap: float = 0.0, program: Sequence[str] = AGENT_PROGRAM, cwd: Path | None = None
        ) -> Callable[[], float]:
            def act() -> float:
                start_agents(lab, gap, program, cwd)
                return programmed(peers)

            return act

        def again(act: Callable[[], float], *, keep_state: bool = True) -> Sample:
            """Every agent stopped, its routes flushed (and its kept state removed, unless
            `keep_state`), then `act` measured."""
            stop_agents(lab)
            forget_routes(lab)
            if not keep_state:
                forget_state(lab)
            return measured(lab, act)

        figures = Figures(cold, changes, [], [], [], [], [])
        for run in range(runs):
            figures.storms_before.append(again(restart(cwd=old)))
            # This tree's agents, started once (their watches caught up: they routed every
            # peer again, and the replay that follows has had its moment) and stopped again,
            # have kept their state.
            stop_agents(lab)
            forget_routes(lab)
            restart()()
            time.sleep(WATCHES_CATCH_UP)
            figures.storms.append(again(restart()))
            figures.spreads.append(again(restart(spread)))
            cold_pair = [
                (figures.cold_restarts, restart()),
                (figures.unspread_restarts, restart(program=UNSPREAD_PROGRAM)),
            ]
            for into, act in cold_pair if run % 2 == 0 else cold_pair[::-1]:
                into.append(again(act, keep_state=False))
            print(f"{n} agents: restarts, run {run + 1} done, {load()}", flush=True)
        stop_agents(lab)
    return figures


def outage_bench(n: int, runs: int, seconds: float) -> dict[str, list[Recovery]]:
    """The outage, `runs` times for each mode, in turn."""
    print(f"outage, {n} agents: {load()}", flush=True)
    found: dict[str, list[Recovery]] = {mode: [] for mode in MODES}
    with fanout_lab(n, prefix="pfu") as lab:
        for run in range(runs):
            for mode, program in MODES.items():
                start_agents(lab, program=program)
                wait_programmed(lab, n - 1, TIMEOUT)
                time.sleep(SETTLE)
                recovery = etcd_outage(lab, seconds)
                found[mode].append(recovery)
                print(f"run {run + 1} {mode}: {describe(recovery)}; {load()}", flush=True)
                subnet = free_subnet(lab)  # every watch is back: a new peer reaches every host
                add_peer(lab, subnet)
                wait_programmed(lab, n, TIMEOUT)
                remove_peer(lab, subnet)
                stop_agents(lab)
    return found


def outage_figures(r: Recovery) -> dict[str, float]:
    reconnects = sorted(r.reconnects().values())
    after = r.returned + 10.0
    return {
        "reconnect_first_s": reconnects[0],
        "reconnect_median_s": statistics.median(reconnects),
        "reconnect_last_s": reconnects[-1],
        "reconnect_spread_s": reconnects[-1] - reconnects[0],
        "requests_first_second": r.requests_after_return(1.0),
        "peak_requests_per_1s": r.peak("request", 1.0, r.started, after),
        "peak_requests_per_100ms": r.peak("request", 0.1, r.started, after),
        "peak_attempts_per_100ms_while_down": r.peak("attempt", 0.1, r.stopped + CAPPED, r.started),
    }


def describe(r: Recovery) -> str:
    f = outage_figures(r)
    tapped = len(r.times("request", r.started))
    return (
        f"reconnects {f['reconnect_first_s']:.2f}/{f['reconnect_median_s']:.2f}/"
        f"{f['reconnect_last_s']:.2f} s (min/median/max after return), "
        f"{f['requests_first_second']:.0f} requests in the first second, peaks "
        f"{f['peak_requests_per_1s']:.0f}/s and {f['peak_requests_per_100ms']:.0f}/100 ms; "
        f"while down {f['peak_attempts_per_100ms_while_down']:.0f} attempts/100 ms at most; "
        f"requests since the restart: tap {tapped}, etcd {r.etcd_requests}; "
        f"etcd back {r.returned - r.started:.2f} s after its start"
    )


def report_outage(n: int, found: dict[str, list[Recovery]]) -> None:
    print(f"--- outage: {n} agents, lockstep (the schedule without jitter) vs jitter")
    figures = {mode: [outage_figures(r) for r in found[mode]] for mode in found}
    for metric in figures["jitter"][0]:
        shown = {mode: [f[metric] for f in figures[mode]] for mode in figures}
        fmt = ".2f" if metric.endswith("_s") else ".0f"
        before, after = (statistics.median(shown[mode]) for mode in ("lockstep", "jitter"))
        ratio = f" (x{after / before:.2f})" if before > 0 and after > 0 else ""
        print(
            f"outage_{metric}: lockstep {span(shown['lockstep'], fmt)}, "
            f"jitter {span(shown['jitter'], fmt)}{ratio}"
        )


def median(samples: list[Sample], metric: Callable[[Sample], float]) -> float:
    return statistics.median(metric(s) for s in samples)


def fit(points: dict[int, float]) -> tuple[float, float]:
    """a, b of cost(N) = a*N + b*N^2 through the smallest and the largest N."""
    (n1, c1), (n2, c2) = (min(points.items()), max(points.items()))
    b = (c2 / n2 - c1 / n1) / (n2 - n1)
    return c1 / n1 - b * n1, b


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="25,50", help="lab sizes; the fit takes two")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spread", type=float, default=10.0, help="seconds a spread restart takes")
    parser.add_argument("--changes", type=int, default=10, help="lease changes per run")
    parser.add_argument(
        "--scenarios",
        default="fanout,outage",
        help="fanout (every scenario but the outage), outage",
    )
    parser.add_argument("--outage", type=float, default=30.0, help="seconds etcd is down")
    parser.add_argument("--outage-agents", type=int, default=50)
    parser.add_argument("--baseline", default=BASELINE, help="git revision of 'before'")
    args = parser.parse_args()
    scenarios = set(args.scenarios.split(","))
    if unknown := scenarios - {"fanout", "outage"}:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if "outage" in scenarios:
        outages = outage_bench(args.outage_agents, args.runs, args.outage)
        report_outage(args.outage_agents, outages)
    if "fanout" in scenarios:
        fanout(args)
    print(f"end: {load()}")
    return 0


def fanout(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.agents.split(",")]
    with baseline_tree(args.baseline) as old:
        for tree in (old, ROOT):
            compile_ahead(tree)
        results = {n: bench(n, args.runs, args.spread, args.changes, old) for n in sizes}

    storms = ("storms_before", "storms", "spreads", "cold_restarts", "unspread_restarts")
    for n, f in results.items():
        print(f"--- {n} agents")
        report(f"n{n}_cold_start", [f.cold], n)
        report(f"n{n}_lease_change", f.changes, n)
        report(f"n{n}_restart_storm_before", f.storms_before, n)
        report(f"n{n}_restart_storm", f.storms, n)
        report(f"n{n}_spread_restart", f.spreads, n)
        report(f"n{n}_cold_restart", f.cold_restarts, n)
        report(f"n{n}_cold_restart_unspread", f.unspread_restarts, n)
        for name, metric in BYTES.items():
            ratio = median(f.storms, metric) / median(f.storms_before, metric)
            print(f"n{n}_restart_storm_{name}_ratio: {ratio:.3f}")
        slowest = [(b.seconds, a.seconds) for b, a in zip(f.storms_before, f.storms, strict=True)]
        print(
            f"n{n}_restart_storm_all_programmed_s_before_after: "
            + ", ".join(f"{b:.1f}/{a:.1f}" for b, a in slowest)
        )

    print(f"--- extrapolated to {TARGET} nodes")
    change = max(sizes)
    per_event = median(results[change].changes, lambda s: s.cost.wire_bytes) / change
    print(f"lease_change_wire_bytes(N) = {per_event:.0f} * N")
    print(f"extrapolated_{TARGET}_lease_change_wire_bytes: {per_event * TARGET:.3e}")
    cpu_per_event = median(results[change].changes, lambda s: s.cost.cpu_seconds) / change
    print(f"extrapolated_{TARGET}_lease_change_etcd_cpu_s: {cpu_per_event * TARGET:.2f}")
    if len(sizes) < 2:
        return
    metrics: dict[str, Callable[[Sample], float]] = {
        **BYTES,
        # What etcd's gRPC server sent its gateway: the protobuf before the gateway's JSON.
        "grpc_bytes": lambda s: s.cost.grpc_bytes,
        "etcd_cpu_s": lambda s: s.cost.cpu_seconds,
    }
    for name, metric in metrics.items():
        for scenario in storms:
            a, b = fit({n: median(getattr(f, scenario), metric) for n, f in results.items()})
            at = a * TARGET + b * TARGET**2
            print(f"{scenario}_{name}(N) = {a:.4g} * N + {b:.4g} * N^2")
            print(f"extrapolated_{TARGET}_{scenario}_{name}: {at:.3e}")


if __name__ == "__main__":
    sys.exit(main())
