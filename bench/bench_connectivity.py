"""What the verify role's connectivity suite adds to a site.yml run on 3 lab hosts, and the
time of each group of its scenarios.

The verify role's tasks (with the preflight, which they need) run alternately with the suite
(the default) and without it (``flannel_verify_pods: false``), ROUNDS times each, on a lab that
site.yml has provisioned; the difference of the medians is the suite's cost. Each group's time
is the suite's own measure (the slowest node's), as its summary prints it.

Goal: the suite adds <= 15 s for 3 hosts.
Needs root:  PYTHONPATH=. python bench/bench_connectivity.py [--rounds N] [--keep]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

from sigterm import interrupt_on_sigterm

from pyflannel_lab import hosts
from pyflannel_lab.playbook import run_playbook

VERIFY = ("--tags", "flannel_preflight,flannel_verify")


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs with and without the suite")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    hosts.up(3)
    try:
        first = run_playbook("site.yml")
        if first.returncode != 0:
            print(first.explain(), file=sys.stderr)
            return 1
        with_suite, without = [], []
        groups = ""
        for _ in range(args.rounds):
            run = run_playbook("site.yml", *VERIFY)
            off = run_playbook("site.yml", *VERIFY, extra_vars={"flannel_verify_pods": False})
            if run.returncode != 0 or off.returncode != 0:
                print((run if run.returncode else off).explain(), file=sys.stderr)
                return 1
            with_suite.append(run.seconds)
            without.append(off.seconds)
            # The summary's line, however the callback wrapped it.
            found = re.search(r"time per group \(slowest node\): [^;]*; all [0-9.]+ s",
                              " ".join(run.output.split()))  # fmt: skip
            groups = found[0] if found else groups
        added = statistics.median(with_suite) - statistics.median(without)
        print(f"verify with the suite: median {statistics.median(with_suite):.1f} s {with_suite}")
        print(f"verify without it: median {statistics.median(without):.1f} s {without}")
        print(f"suite adds: {added:.1f} s (goal 15 s)")
        print(f"suite groups (last run): {groups}")
    finally:
        if not args.keep:
            hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
