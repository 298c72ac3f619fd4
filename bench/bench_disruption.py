"""Connections through an agent stopped for a minute: the disruption probe's long-lived TCP
connections (pod to pod across nodes and on one node, pod to the outside stand-in through the
masquerade, host to remote pod) held open on 3 lab hosts while pyflanneld on node2 is stopped
for STOP seconds and started again.

For each path through node2 it prints the longest gap between two echoes beside the stop's
length, side by side with the paths that do not cross node2 as the baseline, and the resets and
messages lost. vxlan and host-gw keep their datapath (and the masquerade) while the agent is
down: their gap is the baseline's. udp forwards in the agent: its gap is the stop plus TCP's
retransmission backoff.

Goal (vxlan, host-gw): 0 resets, 0 lost, the longest gap at most the stop plus 1 s.
Needs root:  PYTHONPATH=. python bench/bench_disruption.py [--stop S] [--backend B] [--keep]
"""

from __future__ import annotations

import argparse
import sys
import time

from sigterm import interrupt_on_sigterm

from pyflannel_lab import hosts
from pyflannel_lab.disruption import Probe, apart_from, involving, shown
from pyflannel_lab.playbook import run_playbook

STOPPED = "node2"


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop", type=float, default=60.0, help="seconds the agent is down")
    parser.add_argument("--backend", choices=("vxlan", "host-gw", "udp"), default="vxlan")
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    lab = hosts.up(3)
    probe = Probe(lab, lab.names(), lab.outside.target if lab.outside else "")
    try:
        run = run_playbook("site.yml", extra_vars={"flannel_backend_type": args.backend})
        if run.returncode != 0:
            print(run.explain(), file=sys.stderr)
            return 1
        probe.open()
        time.sleep(2)
        probe.check("before")
        ssh = lab.ssh(lab.host(STOPPED))
        ssh.run("sudo systemctl stop pyflanneld")
        stopped = time.monotonic()
        time.sleep(args.stop)
        ssh.run("sudo systemctl start pyflanneld")
        down = time.monotonic() - stopped
        rows = probe.check(f"{args.backend}: pyflanneld on {STOPPED} down {down:.1f} s", 30.0)
        print(shown(probe.windows[-1][0], rows))
        through, baseline = involving(rows, STOPPED), apart_from(rows, STOPPED)
        gap = max(r.report.longest_gap for r in through)
        base = max(r.report.longest_gap for r in baseline)
        resets = sum(r.report.resets for r in rows)
        lost = sum(r.report.lost for r in rows)
        print(
            f"{args.backend}: agent down {down:.1f} s; longest gap through {STOPPED} {gap:.2f} s"
            f" ({gap - down:+.2f} s beside the stop), elsewhere {base:.2f} s; {resets} resets,"
            f" {lost} lost"
        )
    finally:
        if not args.keep:
            probe.close()
            hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
