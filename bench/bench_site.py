"""site.yml on a fresh 3-host lab: the first run, the idempotent re-run, and how many modules
the re-run starts on each host.

Lab: ``pyflannel_lab`` podman hosts reached over SSH (the image cache is reused when
present; the wheelhouse cache too, so the first run measures provisioning, not pip wheel).
Modules per host are counted from the ssh commands Ansible starts (with pipelining, one per
module run on that host; controller-side work such as certificate generation is not counted).

Goals: re-run <= 20 s for 3 hosts, <= 15 modules per host on the re-run.
Needs root:  PYTHONPATH=. python bench/bench_site.py [--keep]
"""

from __future__ import annotations

import argparse
import sys

from sigterm import interrupt_on_sigterm

from pyflannel_lab import hosts
from pyflannel_lab.playbook import run_playbook


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab up afterwards")
    args = parser.parse_args()
    state = hosts.up(3)
    try:
        addresses = {host.name: str(host.address) for host in state.hosts}
        first = run_playbook("site.yml")
        if first.returncode != 0:
            print(first.explain(), file=sys.stderr)
            return 1
        again = run_playbook("site.yml", count_modules=addresses)
        if again.returncode != 0:
            print(again.explain(), file=sys.stderr)
            return 1
        print(f"first run: {first.seconds:.1f} s")
        print(f"re-run: {again.seconds:.1f} s (goal 20 s)")
        print(f"re-run changed: {again.changed()}")
        print(f"re-run modules per host: {again.modules} (goal 15)")
    finally:
        if not args.keep:
            hosts.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
