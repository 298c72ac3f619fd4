"""site.yml at 3, 10 and 20 lab hosts: the first run and the re-run, wall time and the
controller's CPU, and where the time goes.

For each size a fresh lab (pyflannel_lab podman hosts over SSH, the image and wheelhouse
caches reused) is booted, site.yml run twice, and the lab removed. Controller CPU is
getrusage(RUSAGE_CHILDREN) around each ansible-playbook run: ansible-playbook, its forks and the
ssh clients they start (everything the controller spends on the run). ansible.posix's
profile_tasks callback names the slowest tasks of each run (wall time of a task across all
hosts); modules per host on the re-run are counted from the ssh commands Ansible starts.

The floor of a re-run is one module round trip per host: `ansible all -m ansible.builtin.ping`
on the same inventory, run just before and just after each re-run (same connections, same
minutes; on a busy machine one ping alone varies by half); each re-run is printed as a multiple
of their mean.

Goals: a re-run with changed=0 <= 5x the ping floor at every size and <= 30 s at 20 hosts; the
first run <= 3 min at 20 hosts; cost growing no worse than linearly (seconds per host not
growing with the size).
Needs root:  PYTHONPATH=. python bench/bench_site_scale.py [--sizes 3,10,20] [--top 8] [--reruns 1]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sigterm import interrupt_on_sigterm

from pyflannel_lab import hosts
from pyflannel_lab.errors import LabError
from pyflannel_lab.playbook import LAB_INVENTORY, PlaybookRun, run_ping, run_playbook

# Every lab host's systemd, logind and dbus hold 7 inotify instances, and every rootful
# container counts against root's fs.inotify.max_user_instances (128 here): past ~17 hosts the
# last ones boot without sshd.
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_HOST = 8
INOTIFY_SLACK = 64  # other labs booting meanwhile

# profile_tasks' summary lines: "<task name> ------ 12.34s"
_TASK_TIME = re.compile(r"^(.+?) -{3,} (\d+\.\d+)s$", re.M)


@dataclass(frozen=True)
class Measured:
    run: PlaybookRun
    cpu_seconds: float
    load: str
    # The ping floor just before and just after the run (re-runs only).
    floor: tuple[PlaybookRun, ...] = ()

    @property
    def floor_seconds(self) -> float:
        return sum(ping.seconds for ping in self.floor) / len(self.floor)

    def slowest(self, top: int) -> list[tuple[str, float]]:
        tasks = [(name.strip(), float(t)) for name, t in _TASK_TIME.findall(self.run.output)]
        return sorted(tasks, key=lambda task: -task[1])[:top]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ping(addresses: dict[str, str]) -> PlaybookRun:
    floor = run_ping(count_modules=addresses)
    if floor.returncode != 0:
        raise RuntimeError(floor.explain())
    return floor


def measured(addresses: dict[str, str] | None = None) -> Measured:
    before_run = ping(addresses) if addresses is not None else None
    before = children_cpu()
    run = run_playbook("site.yml", count_modules=addresses)
    cpu = children_cpu() - before
    if run.returncode != 0 or run.failed_hosts():
        raise RuntimeError(run.explain())
    floor = () if addresses is None or before_run is None else (before_run, ping(addresses))
    return Measured(run, cpu, load(), floor)


def inotify_in_use() -> int:
    count = 0
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            count += sum(os.readlink(fd) == "anon_inode:inotify" for fd in fd_dir.iterdir())
        except OSError:  # a process that ended meanwhile
            continue
    return count


@contextmanager
def inotify_room(hosts: int) -> Iterator[None]:
    """Root's inotify instance limit raised for `hosts` more lab hosts while they run, and put
    back as it was (instances made meanwhile stay valid)."""
    before = int(INOTIFY_LIMIT.read_text())
    needed = inotify_in_use() + hosts * INOTIFY_PER_HOST + INOTIFY_SLACK
    if needed <= before:
        yield
        return
    print(f"fs.inotify.max_user_instances {before} -> {needed} while the lab runs", flush=True)
    INOTIFY_LIMIT.write_text(str(needed))
    try:
        yield
    finally:
        INOTIFY_LIMIT.write_text(str(before))


def report(size: int, booted: float, first: Measured, reruns: list[Measured], top: int) -> None:
    for name, run in (("first run", first), ("re-run", reruns[0])):
        print(f"{size} hosts, {name}: slowest tasks:")
        for task, seconds in run.slowest(top):
            print(f"    {seconds:6.2f} s  {task}")
    print(f"hosts_{size}_boot_s: {booted:.1f}")
    print(f"hosts_{size}_first_run_s: {first.run.seconds:.1f} (load {first.load})")
    print(f"hosts_{size}_first_run_controller_cpu_s: {first.cpu_seconds:.1f}")
    print(f"hosts_{size}_first_run_s_per_host: {first.run.seconds / size:.2f}")
    for again in reruns:
        print(f"hosts_{size}_rerun_s: {again.run.seconds:.1f} (load {again.load})")
        print(f"hosts_{size}_rerun_controller_cpu_s: {again.cpu_seconds:.1f}")
        print(f"hosts_{size}_rerun_controller_cpu_s_per_host: {again.cpu_seconds / size:.2f}")
        print(f"hosts_{size}_rerun_changed: {sum(again.run.changed().values())}")
        print(f"hosts_{size}_rerun_modules_per_host: {sorted(set(again.run.modules.values()))}")
        if again.floor:
            pings = ", ".join(f"{ping.seconds:.1f}" for ping in again.floor)
            print(f"hosts_{size}_ping_floor_s: {again.floor_seconds:.1f} (before, after: {pings})")
            counts = sorted({n for ping in again.floor for n in ping.modules.values()})
            print(f"hosts_{size}_ping_modules_per_host: {counts}")
            print(f"hosts_{size}_rerun_over_ping: {again.run.seconds / again.floor_seconds:.1f}")
    sys.stdout.flush()


def boot_and_run(size: int, reruns: int) -> tuple[float, Measured, list[Measured]] | None:
    """A fresh lab of `size` hosts, site.yml once and `reruns` times again, the lab removed; None
    if it did not boot."""
    started = time.monotonic()
    try:
        state = hosts.up(size)
    except LabError as err:  # reported, and the next size runs
        print(f"hosts_{size}_boot_failed: {err} (load {load()})", flush=True)
        hosts.down()
        return None
    booted = time.monotonic() - started
    try:
        addresses = {host.name: str(host.address) for host in state.hosts}
        first = measured()
        return booted, first, [measured(addresses) for _ in range(reruns)]
    finally:
        hosts.down()
        shutil.rmtree(f"{LAB_INVENTORY}-credentials", ignore_errors=True)


def main() -> int:
    interrupt_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3,10,20")
    parser.add_argument("--top", type=int, default=8, help="slowest tasks shown per run")
    parser.add_argument("--reruns", type=int, default=1, help="re-runs per lab, each reported")
    args = parser.parse_args()
    os.environ["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    os.environ["PROFILE_TASKS_TASK_OUTPUT_LIMIT"] = "all"
    for size in [int(s) for s in args.sizes.split(",")]:
        with inotify_room(size):
            measurement = boot_and_run(size, args.reruns)
        if measurement is not None:
            report(size, *measurement, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
