"""What serving /metrics costs an agent before it does anything: the time to import and the
memory of the Prometheus client library and the agent's metrics module, on top of what an etcd
and vxlan agent imports anyway.

Each round starts two fresh interpreters side by side in time, one importing the agent's
modules alone, the other the same and then `pyflannel_runtime.agent.metrics` (which brings
prometheus-client); each reports the seconds its imports took and its VmRSS after them. The
figures are the medians over the rounds, alternating which goes first, as this VM's vCPU speed
swings from second to second. An agent started with --metrics=false imports neither.

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
    without: list[dict[str, float]] = []
    with_metrics: list[dict[str, float]] = []
    for round_no in range(args.rounds):
        runs = [(without, AGENT), (with_metrics, (*AGENT, METRICS))]
        for results, modules in runs if round_no % 2 == 0 else reversed(runs):
            results.append(probe(modules))

    def median(results: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in results)

    base_s, metrics_s = median(without, "seconds"), median(with_metrics, "seconds")
    base_rss, metrics_rss = median(without, "rss_kib"), median(with_metrics, "rss_kib")
    print(
        f"imports of an etcd and vxlan agent, medians of {args.rounds} rounds: "
        f"{base_s * 1e3:.0f} ms, {base_rss / 1024:.1f} MiB; with the metrics module and "
        f"prometheus-client {metrics_s * 1e3:.0f} ms, {metrics_rss / 1024:.1f} MiB"
    )
    print(f"metrics_import_ms: {(metrics_s - base_s) * 1e3:.1f}")
    print(f"metrics_import_ratio: {metrics_s / base_s:.2f}")
    print(f"metrics_rss_mib: {(metrics_rss - base_rss) / 1024:.2f}")


if __name__ == "__main__":
    main()
