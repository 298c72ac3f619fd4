"""Connections through every routine operation: the disruption probe's long-lived TCP
connections (pod to pod across nodes and on one node, pod to the outside stand-in through the
masquerade, host to remote pod; a message every 100 ms) held open on 3 lab hosts while, for
each backend in turn on one lab:

  1. pyflanneld restarts on both ends of the connections (node1, node2), then on node3;
  2. site.yml rolls out a new runtime version (this tree as VERSION.post1), batch by batch;
  3. site.yml rolls out a changed agent setting, batch by batch;
  4. node3 reboots (the connections between node1 and node2 go on; the probe is then opened
     again, node3's new pods included);
  5. pyflanneld on node2 is stopped for STOP seconds and started again.

A quiet window comes first, in which nothing happens: the gaps the machine itself makes. Each
check prints its table and the longest gap beside its goal and the load average; at the end,
the closing table (operation and path: resets, longest gap, messages lost) and those lines
again. The switch to the next backend goes back to the first runtime and the default settings,
so that its roll is an upgrade and a change again.

Goal (vxlan, host-gw): 0 resets, 0 lost; the longest gap at most 1 s for 1-3, and for 5 at
most the stop plus 1 s. udp forwards in the agent: its gaps are the agent's outages.
Needs root:  PYTHONPATH=. python bench/bench_disruption.py [--stop S] [--backend B ...] [--keep]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sigterm import interrupt_on_sigterm

from pyflannel_lab import hosts
from pyflannel_lab.disruption import (
    GAP_GOAL,
    Probe,
    apart_from,
    closing_table,
    involving,
    longest_gap,
    shown,
)
from pyflannel_lab.errors import LabError
from pyflannel_lab.operations import agent_pids, reboot, restart_agents, runtime_copy, stop_agent
from pyflannel_lab.playbook import run_playbook
from pyflannel_runtime import __version__
from pyflannel_runtime.connectivity.disruption import Row

UPGRADE = f"{__version__}.post1"
SETTING = {"flannel_iptables_resync": 7}
STOPPED, REBOOTED = "node2", "node3"
QUIET = 10.0  # seconds of the quiet window


class Bench:
    def __init__(self, lab: hosts.LabState, stop: float, upgrade: Path) -> None:
        self.lab = lab
        self.probe = Probe(lab, lab.names(), lab.outside.target if lab.outside else "")
        self.stop = stop
        self.upgrade = upgrade
        self.gaps: list[str] = []

    def site(self, **extra_vars: Any) -> None:
        """A site.yml run; LabError if it fails or leaves an agent running that it did not
        restart."""
        before = agent_pids(self.lab, self.lab.names()) if self.probe.windows else {}
        run = run_playbook("site.yml", extra_vars=extra_vars)
        if run.returncode != 0:
            raise LabError(run.explain())
        after = agent_pids(self.lab, self.lab.names())
        if any(after[n] == pid for n, pid in before.items()):
            raise LabError(f"site.yml left an agent as it was: {before} then {after}")
        print(
            f"site.yml {run.seconds:.0f} s{', every agent restarted' if before else ''}", flush=True
        )

    def window(
        self,
        operation: str,
        goal: float = GAP_GOAL,
        settle: float = 5.0,
        names: Sequence[str] = (),
        apart: str = "",
    ) -> list[Row]:
        """The probe checked after an operation: its table, and its longest gap (of the
        connections with no end on `apart`) beside the goal."""
        rows = self.probe.check(operation, settle, names)
        print(shown(operation, rows), flush=True)
        self.gaps.append(longest_gap(operation, apart_from(rows, apart) if apart else rows, goal))
        print(self.gaps[-1], flush=True)
        return rows

    def backend(self, backend: str) -> None:
        base = {"flannel_backend_type": backend}
        # The first run, or the switch from another backend (every agent restarts for it).
        self.site(**base, flannel_agent_restart_batch="100%")
        self.probe.open()
        time.sleep(QUIET)
        self.window(f"{backend}: quiet, nothing done")
        restart_agents(self.lab, ("node1", "node2"), REBOOTED)
        self.window(f"{backend}: pyflanneld restarted on every node")
        upgraded = {**base, "flannel_runtime_source": str(self.upgrade)}
        self.site(**upgraded)
        self.window(f"{backend}: a rolling upgrade to {UPGRADE} by site.yml")
        self.site(**upgraded, **SETTING)
        self.window(f"{backend}: a settings change by site.yml")
        reboot(self.lab, REBOOTED)
        others = [n for n in self.lab.names() if n != REBOOTED]
        self.window(f"{backend}: {REBOOTED} rebooted", names=others, apart=REBOOTED)
        self.probe.close()
        self.probe.open()
        stop = stop_agent(self.lab, STOPPED, self.stop)
        operation = f"{backend}: pyflanneld on {STOPPED} down {stop.down:.1f} s"
        rows = self.window(operation, goal=stop.down + GAP_GOAL, settle=30.0)
        through, baseline = involving(rows, STOPPED), apart_from(rows, STOPPED)
        gap = max(r.report.longest_gap for r in through)
        base_gap = max(r.report.longest_gap for r in baseline)
        print(
            f"{backend}: agent down {stop.down:.1f} s, its rules and routes"
            f" {'kept' if stop.kept else 'CHANGED'}; longest gap through {STOPPED} {gap:.2f} s,"
            f" elsewhere {base_gap:.2f} s",
            flush=True,
        )
        self.probe.close()


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop", type=float, default=60.0, help="seconds the agent is down")
    parser.add_argument(
        "--backend",
        action="append",
        choices=("vxlan", "host-gw", "udp"),
        help="a backend to go through, in turn (repeat it; default: host-gw, then vxlan)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    lab = hosts.up(3)
    with tempfile.TemporaryDirectory() as scratch:
        bench = Bench(lab, args.stop, runtime_copy(Path(scratch), UPGRADE))
        try:
            for backend in args.backend or ["host-gw", "vxlan"]:
                bench.backend(backend)
        finally:
            print(closing_table(bench.probe.windows))
            print("\n".join(bench.gaps))
            if not args.keep:
                try:
                    bench.probe.close()
                finally:
                    hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
