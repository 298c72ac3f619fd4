"""Running this repository's playbooks (and the ping floor) against lab hosts, for tests and benches.

``run_playbook`` runs ``ansible-playbook`` from the repository root (its ansible.cfg, the
collection by FQCN) and parses the PLAY RECAP. With ``count_modules`` every ssh command Ansible
starts goes through a logging wrapper, so the run also says how many modules ran on each host
(with pipelining, one ssh command per module).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyflannel_lab.paths import LabPaths, project_root

ROOT = project_root()
BIN = Path(sys.executable).parent
# The lab's inventory directory: inventories/lab, or where PYFLANNEL_LAB_INVENTORY puts the
# lab's hosts.yml (a test worker's own lab, tests/parallel.py).
LAB_INVENTORY = LabPaths.default().inventory.parent
# One wheelhouse build per source tree, shared by every test, the bench and molecule.
WHEELHOUSE_CACHE = ROOT / ".lab" / "wheelhouse"

_RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.M)


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    seconds: float
    recap: dict[str, dict[str, int]]
    modules: dict[str, int] = field(default_factory=dict)

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.recap.items()}

    def failed_hosts(self) -> list[str]:
        return sorted(h for h, c in self.recap.items() if c["failed"] or c["unreachable"])

    def explain(self) -> str:
        return self.output[-6000:]


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    recap_text = output.rsplit("PLAY RECAP", 1)[-1] if "PLAY RECAP" in output else ""
    recap = {}
    for host, counts in _RECAP.findall(recap_text):
        recap[host] = {k: int(v) for k, v in (pair.split("=") for pair in counts.split())}
    return recap


def _ssh_wrapper(directory: Path, log: Path) -> Path:
    wrapper = directory / "ssh"
    wrapper.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {shlex.quote(str(log))}\nexec ssh "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


def _module_counts(log: Path, addresses: Mapping[str, str]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    lines = log.read_text().splitlines() if log.exists() else []
    for line in lines:
        if "python" not in line:
            continue
        for host, address in addresses.items():
            if re.search(rf"(^|[\s@]){re.escape(address)}(\s|$)", line):
                counts[host] += 1
    return {host: counts[host] for host in addresses}


def run_playbook(
    playbook: str,
    *args: str,
    inventories: Sequence[Path] = (LAB_INVENTORY,),
    extra_vars: Mapping[str, Any] | None = None,
    count_modules: Mapping[str, str] | None = None,
) -> PlaybookRun:
    """``ansible-playbook`` in the repository root; ``count_modules`` maps host -> address."""
    command = [str(BIN / "ansible-playbook"), playbook, *args]
    for inventory in inventories:
        command += ["-i", str(inventory)]
    merged = {"flannel_wheelhouse_cache_dir": str(WHEELHOUSE_CACHE), **(extra_vars or {})}
    command += ["-e", json.dumps(merged)]
    return _run(command, count_modules)


def run_ping(
    pattern: str = "all",
    inventories: Sequence[Path] = (LAB_INVENTORY,),
    count_modules: Mapping[str, str] | None = None,
) -> PlaybookRun:
    """``ansible PATTERN -m ansible.builtin.ping`` in the repository root, with the same
    configuration as ``run_playbook``: one module round trip per host, the floor of any run
    that asks every host something. Its recap is empty (ad-hoc runs print none)."""
    command = [str(BIN / "ansible"), pattern, "-m", "ansible.builtin.ping"]
    for inventory in inventories:
        command += ["-i", str(inventory)]
    return _run(command, count_modules)


def _run(command: list[str], count_modules: Mapping[str, str] | None) -> PlaybookRun:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_FORCE_COLOR": "0"}
    env.pop("ANSIBLE_CONFIG", None)
    with tempfile.TemporaryDirectory(prefix="pyft-ssh-") as scratch:
        log = Path(scratch) / "ssh.log"
        if count_modules is not None:
            env["ANSIBLE_SSH_EXECUTABLE"] = str(_ssh_wrapper(Path(scratch), log))
        started = time.monotonic()
        # No stdin: ansible-playbook refuses to start on a non-blocking one (as a CI runner's
        # may be), and a play's prompt must not wait on the caller's terminal.
        done = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        modules = _module_counts(log, count_modules) if count_modules is not None else {}
    output = done.stdout + done.stderr
    return PlaybookRun(done.returncode, output, seconds, parse_recap(done.stdout), modules)
