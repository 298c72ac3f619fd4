"""What a trickling flood (a slowloris) costs the health port, before and after the server's
bounds, side by side in one run.

N clients (4 000 by default), each sending a request head a line a second, never its end, and
connecting again when cut off, from S loopback addresses taken in turn
(pyflannel_lab/trickle.py); against the health server alone (HealthServer in a
process of its own, ready) and against pyflanneld (an AgentLab host with host-gw and a real
etcd). For each: the descriptors and VmRSS the process added at the flood's peak over the
whole run, and how many of a fresh client's /readyz probes (from 127.0.0.9, one every 0.5 s,
10 s to answer) got a 200 while the flood was held; also the agent's lease renewals meanwhile
(a 4 s TTL renews every 2 s).

"before" is the code at --baseline (a git revision; by default the last whose server held any
number of clients), run from a `git archive` of it; "after" is this tree. One address shows
the cap per address; 100 addresses (--sources 100) the cap on all connections.

Needs root (for the agent's network namespace):

    python bench/bench_health_flood.py [--clients 4000] [--sources 1] [--seconds 15]
                                       [--baseline 91ca186]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from baseline import baseline_tree
from sigterm import interrupt_on_sigterm

from pyflannel_lab.churn import process_facts
from pyflannel_lab.netns_agents import HEALTHZ_PORT, AgentLab
from pyflannel_lab.trickle import Trickle, open_files, probe, trickling
from pyflannel_runtime.netlink.netns import run_in_netns

ROOT = Path(__file__).resolve().parents[1]
ALONE_PORT = 18081
LEASE_TTL = 4
RENEWED = "Lease renewed, new expiration: "
PROBE_EVERY = 0.5
PROBE_TIMEOUT = 10.0
# A HealthServer, ready, until stdin closes; run with the tree under test as its directory.
_SERVE = """
import asyncio, sys
from pyflannel_runtime.agent.health import HealthServer
async def main():
    server = HealthServer("127.0.0.1", int(sys.argv[1]))
    await server.start()
    server.ready = True
    print("listening", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


@dataclass(frozen=True)
class Outcome:
    fds_added: int
    rss_added_kib: int
    probes: int
    answered: int
    slowest_probe: float
    renewals: int | None  # the agent's lease renewals while flooded


def flood(
    args: argparse.Namespace,
    port: int,
    pid: int,
    netns: str | None,
    log: Callable[[], str] | None = None,
) -> Outcome:
    """Hold the flood for args.seconds against the server at `port` in `netns` (process
    `pid`), probing and sampling as it goes."""
    before = process_facts(pid)
    renewed = log().count(RENEWED) if log else 0
    peak_rss, peak_fds, probes, answered, slowest = before.rss_kib, before.fds, 0, 0, 0.0
    sources = [f"127.0.1.{n}" for n in range(1, args.sources + 1)]
    trickle = Trickle(port, sources, args.clients)
    with trickling(trickle, netns):
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            facts = process_facts(pid)
            peak_rss, peak_fds = max(peak_rss, facts.rss_kib), max(peak_fds, facts.fds)
            started = time.monotonic()
            try:
                answer = run_in_netns(netns, lambda: probe(port, timeout=PROBE_TIMEOUT))
            except OSError:
                answer = b""
            slowest = max(slowest, time.monotonic() - started)
            probes += 1
            answered += answer.startswith(b"HTTP/1.1 200 ")
            time.sleep(PROBE_EVERY)
    return Outcome(
        peak_fds - before.fds,
        peak_rss - before.rss_kib,
        probes,
        answered,
        slowest,
        log().count(RENEWED) - renewed if log else None,
    )


def alone(args: argparse.Namespace, tree: Path) -> Outcome:
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(ALONE_PORT)],
        cwd=tree,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        probe(ALONE_PORT)  # the first answer's allocations made before the baseline
        return flood(args, ALONE_PORT, server.pid, None)
    finally:
        server.kill()
        server.wait()


def agent(args: argparse.Namespace, tree: Path) -> Outcome:
    with AgentLab({"Type": "host-gw"}, hosts=1, prefix="pbh", lab_pods=False) as lab:
        host = lab.net.hosts[0]
        with working_directory(tree):  # `python -m` imports from there first
            running = lab.start_agent(host, f"--subnet-lease-ttl={LEASE_TTL}")
        lab.wait_ready(host)
        run_in_netns(host.ns, lambda: probe(HEALTHZ_PORT))
        return flood(args, HEALTHZ_PORT, running.process.pid, host.ns, running.log)


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def show(name: str, before: Outcome, after: Outcome) -> None:
    rows = [
        ("descriptors added", lambda o: str(o.fds_added)),
        ("VmRSS added (MiB)", lambda o: f"{o.rss_added_kib / 1024:.1f}"),
        ("fresh /readyz answered", lambda o: f"{o.answered}/{o.probes}"),
        ("slowest probe (s)", lambda o: f"{o.slowest_probe:.2f}"),
    ]
    if before.renewals is not None:
        rows.append(("lease renewals", lambda o: str(o.renewals)))
    print(f"{name}:{'before':>26}{'after':>12}")
    for label, cell in rows:
        print(f"  {label:<24}{cell(before):>12}{cell(after):>12}")


def main() -> None:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4000)
    parser.add_argument("--sources", type=int, default=1, help="loopback addresses, 1-254")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--baseline", default="91ca186", help="git revision of 'before'")
    args = parser.parse_args()
    results: dict[str, dict[str, Outcome]] = {}
    # The flood's descriptors here, and the servers' (they inherit the limit) before the bounds.
    with open_files(args.clients + 1000), baseline_tree(args.baseline) as old:
        for label, tree in (("before", old), ("after", ROOT)):
            results[label] = {"alone": alone(args, tree), "agent": agent(args, tree)}
    print(
        f"{args.clients} trickling clients from {args.sources} address(es), "
        f"held {args.seconds:.0f} s; before = {args.baseline}, after = this tree"
    )
    for scenario in ("alone", "agent"):
        show(f"health server {scenario}", results["before"][scenario], results["after"][scenario])
    for label, by_scenario in results.items():
        for scenario, outcome in by_scenario.items():
            print(f"{scenario}_fds_added_{label}: {outcome.fds_added}")
            print(f"{scenario}_rss_added_mib_{label}: {outcome.rss_added_kib / 1024:.1f}")
            print(f"{scenario}_probes_answered_{label}: {outcome.answered}/{outcome.probes}")
            print(f"{scenario}_slowest_probe_s_{label}: {outcome.slowest_probe:.2f}")
            if outcome.renewals is not None:
                print(f"{scenario}_lease_renewals_{label}: {outcome.renewals}")


if __name__ == "__main__":
    main()
