"""What serving /metrics costs an agent: at its start, the time to import and the memory of the
agent's metrics module; at the first scrape, those of the Prometheus client library and the
registry built on it; each on top of what an etcd and vxlan agent imports anyway.

Each round starts three fresh interpreters side by side in time: one importing the agent's
modules alone, one the same and then `pyflannel_runtime.agent.metrics` (what a starting agent
serving metrics imports), one those and then `pyflannel_runtime.agent.metrics_registry` (which
brings prometheus-client, as the first scrape does); each reports the seconds its imports took
and its VmRSS after them. The figures are the medians over the rounds, rotating which goes
first, as this VM's vCPU speed swings from second to second. An agent started with
--metrics=false imports none of them.

    PYTHONPATH=. python bench/bench_metrics_import.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

AGENT = (
    "pyflannel_runtime.agent.main",
    "pyflannel_runtime.subnet.etcd.etcd",
    "pyflannel_runtime.backend.vxlan.vxlan",
)
METRICS = "pyflannel_runtime.agent.metrics"
REGISTRY = "pyflannel_runtime.agent.metrics_registry"

PROBE = r"""
import importlib, json, sys, time
def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
started = time.perf_counter()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({"seconds": time.perf_counter() - started, "rss_kib": rss()}))
"""


def probe(modules: tuple[str, ...]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, check=True
    )
    found: dict[str, float] = json.loads(done.stdout)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    kinds = {"agent": AGENT, "start": (*AGENT, METRICS), "scraped": (*AGENT, METRICS, REGISTRY)}
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    order = list(kinds)
    for round_no in range(args.rounds):
        for kind in order[round_no % 3 :] + order[: round_no % 3]:
            results[kind].append(probe(kinds[kind]))

    def median(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in results[kind])

    base_s, base_rss = median("agent", "seconds"), median("agent", "rss_kib")
    print(
        f"imports of an etcd and vxlan agent, medians of {args.rounds} rounds: "
        f"{base_s * 1e3:.0f} ms, {base_rss / 1024:.1f} MiB"
    )
    for kind, label in (("start", "at the start"), ("scraped", "after the first scrape")):
        seconds, rss = median(kind, "seconds"), median(kind, "rss_kib")
        print(
            f"metrics {label}: {seconds * 1e3:.0f} ms, {rss / 1024:.1f} MiB; "
            f"metrics_{kind}_import_ms: {(seconds - base_s) * 1e3:.1f} "
            f"metrics_{kind}_import_ratio: {seconds / base_s:.3f} "
            f"metrics_{kind}_rss_mib: {(rss - base_rss) / 1024:.2f}"
        )


if __name__ == "__main__":
    main()
