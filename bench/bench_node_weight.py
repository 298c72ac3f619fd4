"""What a node carries, and the first site.yml run, for this tree and a reference checkout.

Side by side, "after" (this tree) and "before" (a checkout given with --before, for example
`git worktree add --detach /tmp/weight-before main`, removed afterwards):

  * the node wheelhouse for each cluster's settings (etcd with vxlan or host-gw, etcd with udp,
    Kubernetes, Kubernetes with udp): its size and its wheels, built for the lab hosts' Python
    (Debian 12) into each tree's lab wheelhouse cache (.lab/wheelhouse), which the lab runs then
    find; a tree whose builder knows no extras builds one wheelhouse for every node;
  * on a fresh lab of each size in --sizes (pyflannel_lab podman hosts, the lab's
    etcd and vxlan settings): the first site.yml run, wall time, and the agent's virtualenv it
    installed on node1 (`du`: apparent bytes, and the disk it takes).

Each tree runs in a child process whose Python path starts with it, so that its controller code,
lab code, roles, lab image recipe and caches are its own; this interpreter's environment serves
both (it holds every package either tree's controller imports). For each size, the rounds
alternate which tree goes first; the load average is printed with each run, as the machine
may be shared. Finishes with `metric: value` lines. Needs root and the package index:

    python bench/bench_node_weight.py --before /tmp/weight-before [--sizes 3,20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_site_scale import inotify_room
from sigterm import interrupt_on_sigterm

from pyflannel_controller.wheelhouse import node_extras

ROOT = Path(__file__).resolve().parents[1]
# The cluster settings whose wheelhouses differ, by name.
SETTINGS = {
    "etcd": {"flannel_datastore": "etcd", "flannel_backend_type": "vxlan"},
    "etcd-udp": {"flannel_datastore": "etcd", "flannel_backend_type": "udp"},
    "kube": {"flannel_datastore": "kubernetes", "flannel_backend_type": "vxlan"},
    "kube-udp": {"flannel_datastore": "kubernetes", "flannel_backend_type": "udp"},
}
# The lab hosts' Python (Debian 12), as node_facts reports it: the builds the lab runs use.
LAB_INTERPRETER = {
    "implementation": "cpython",
    "python": "3.11",
    "abiflags": "",
    "machine": "x86_64",
    "libc": "glibc 2.36",
}

# Run by a child in the tree under test, argv[1] the JSON of the extras per settings' name: the
# wheelhouse of each (one for all where the tree's builder takes no extras).
WHEELHOUSES = """
import inspect, json, sys, tarfile
from pyflannel_lab.playbook import ROOT, WHEELHOUSE_CACHE
from pyflannel_controller.wheelhouse import build_wheelhouse, target_of
target = target_of(json.loads(sys.argv[2]))
takes_extras = "extras" in inspect.signature(build_wheelhouse).parameters
result = {}
for name, extras in json.loads(sys.argv[1]).items():
    built = build_wheelhouse(ROOT, WHEELHOUSE_CACHE, target, *([tuple(extras)] if takes_extras else []))
    with tarfile.open(built.archive) as tar:
        wheels = sorted(n.split("-")[0].lower() for n in tar.getnames())
    result[name] = {"bytes": built.archive.stat().st_size, "wheels": wheels}
print(json.dumps(result))
"""

# Run by a child in the tree under test, argv[1] the lab's size: boot, the first site.yml run,
# the virtualenv on node1, the lab removed.
FIRST_RUN = """
import json, os, shutil, sys, time
from pyflannel_lab import hosts
from pyflannel_lab.playbook import LAB_INVENTORY, run_playbook
started = time.monotonic()
state = hosts.up(int(sys.argv[1]))
try:
    booted = time.monotonic() - started
    load = os.getloadavg()
    run = run_playbook("site.yml")
    if run.returncode != 0 or run.failed_hosts():
        sys.exit(run.explain())
    load = [max(a, b) for a, b in zip(load, os.getloadavg())]
    du = state.ssh(state.hosts[0]).run(
        "sudo du -sb /opt/pyflannel/venv && sudo du -sk /opt/pyflannel/venv"
    ).stdout.split()
    print(json.dumps({"boot_s": booted, "first_run_s": run.seconds, "load": load,
                      "venv_bytes": int(du[0]), "venv_disk_kib": int(du[2])}))
finally:
    hosts.down()
    shutil.rmtree(f"{LAB_INVENTORY}-credentials", ignore_errors=True)
"""


def in_tree(tree: Path, code: str, *args: str) -> Any:
    """The JSON a child running `code` in `tree` prints last."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: the child failed ({done.returncode}): {done.stdout[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def mib(size: float) -> str:
    return f"{size / 2**20:.2f}"


def wheelhouses(trees: dict[str, Path]) -> None:
    extras = {name: list(node_extras(settings)) for name, settings in SETTINGS.items()}
    built = {
        which: in_tree(tree, WHEELHOUSES, json.dumps(extras), json.dumps(LAB_INTERPRETER))
        for which, tree in trees.items()
    }
    print("node wheelhouse, MiB (wheels), for the lab hosts' Python (cp311, glibc 2.36):")
    for name in SETTINGS:
        cells = [
            f"{which} {mib(built[which][name]['bytes'])} ({len(built[which][name]['wheels'])})"
            for which in trees
        ]
        print(f"  {name:9} extras {extras[name] or '-'}: " + ", ".join(cells))
        print(f"            after's wheels: {' '.join(built['after'][name]['wheels'])}")
    for which in trees:
        for name in SETTINGS:
            print(
                f"wheelhouse_{name.replace('-', '_')}_mib_{which}: {mib(built[which][name]['bytes'])}"
            )


def first_runs(trees: dict[str, Path], sizes: list[int], rounds: int) -> None:
    for size in sizes:
        runs: dict[str, list[dict[str, Any]]] = {which: [] for which in trees}
        with inotify_room(size):
            for round_ in range(rounds):
                order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
                for which in order:
                    got = in_tree(trees[which], FIRST_RUN, str(size))
                    runs[which].append(got)
                    load = " ".join(f"{x:.1f}" for x in got["load"])
                    print(
                        f"{size} hosts, round {round_ + 1}, {which}: first run "
                        f"{got['first_run_s']:.1f} s (boot {got['boot_s']:.0f} s; load up to "
                        f"{load}), node1's virtualenv {mib(got['venv_bytes'])} MiB "
                        f"({got['venv_disk_kib'] / 1024:.2f} MiB on disk)",
                        flush=True,
                    )
        medians = {w: statistics.median(r["first_run_s"] for r in runs[w]) for w in trees}
        for which in trees:
            venv = statistics.median(r["venv_bytes"] for r in runs[which])
            print(f"hosts_{size}_first_run_s_{which}: {medians[which]:.1f}")
            print(f"venv_mib_{which}: {mib(venv)}")
        if "before" in medians:
            print(
                f"hosts_{size}_first_run_after_over_before: "
                f"{medians['after'] / medians['before']:.2f}"
            )


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the reference checkout (e.g. main's)")
    parser.add_argument("--sizes", default="3,20", help="lab sizes for the first run; '' none")
    parser.add_argument("--rounds", type=int, default=1, help="first runs per size and tree")
    args = parser.parse_args()
    trees = {"after": ROOT}
    if args.before is not None:
        trees = {"before": args.before.resolve(), "after": ROOT}
    wheelhouses(trees)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    first_runs(trees, sizes, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
