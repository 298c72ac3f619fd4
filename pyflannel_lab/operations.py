"""The routine operations the disruption probe holds connections through, on lab hosts over
SSH: every agent restarted, an agent stopped for a while, a host rebooted, and a new runtime
version to roll out with ``site.yml``. For tests/integration/test_site_disruption.py and
``bench/bench_disruption.py``, which check the probe after each."""

from __future__ import annotations

import re
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pyflannel_lab import hosts
from pyflannel_lab.disruption import each
from pyflannel_lab.errors import LabError
from pyflannel_lab.playbook import ROOT

if TYPE_CHECKING:
    from pyflannel_lab.hosts import LabState

# The agent's masquerade and forward rules, and the routes to the pods' network.
RULES = "iptables -t nat -S FLANNEL-POSTRTG; iptables -S FLANNEL-FWD"
ROUTES = "ip -4 route show | grep -c 10.244. || true"
READY = (
    "python3 -c 'import urllib.request; "
    'urllib.request.urlopen("http://127.0.0.1:8081/readyz", timeout=5)\''
)


def as_root(lab: LabState, name: str, command: str) -> str:
    """``command`` as root on a lab host; its output (LabError if it fails)."""
    done = lab.ssh(lab.host(name)).run(f"sudo sh -c {shlex.quote(command)}")
    if done.returncode != 0:
        raise LabError(f"{name}: {command}: {done.stderr.strip()}")
    return str(done.stdout)


def agent_pids(lab: LabState, names: list[str]) -> dict[str, int]:
    return each(
        names, lambda n: int(as_root(lab, n, "systemctl show -p MainPID --value pyflanneld"))
    )


def restart_agents(lab: LabState, ends: tuple[str, str], third: str) -> None:
    """Both ends of a connection at once, then a third node; LabError unless each agent's
    process is a new one."""
    names = [*ends, third]
    before = agent_pids(lab, names)
    each(list(ends), lambda n: as_root(lab, n, "systemctl restart pyflanneld"))
    as_root(lab, third, "systemctl restart pyflanneld")
    after = agent_pids(lab, names)
    if any(after[n] == before[n] for n in names):
        raise LabError(f"not every agent restarted: {before} then {after}")


@dataclass(frozen=True)
class Stop:
    """What an agent stopped for a while left on its host: its rules and routes before the
    stop and halfway through it, and how long it was down."""

    rules: tuple[str, str]
    routes: tuple[str, str]
    down: float

    @property
    def kept(self) -> bool:
        return self.rules[0] == self.rules[1] and self.routes[0] == self.routes[1]


def stop_agent(lab: LabState, name: str, seconds: float) -> Stop:
    """``systemctl stop pyflanneld`` (not reset) for `seconds`, then start."""
    rules, routes = as_root(lab, name, RULES), as_root(lab, name, ROUTES)
    as_root(lab, name, "systemctl stop pyflanneld")
    stopped = time.monotonic()
    try:
        time.sleep(seconds / 2)
        meanwhile = (as_root(lab, name, RULES), as_root(lab, name, ROUTES))
        time.sleep(max(0.0, stopped + seconds - time.monotonic()))
    finally:
        as_root(lab, name, "systemctl start pyflanneld")
    return Stop((rules, meanwhile[0]), (routes, meanwhile[1]), time.monotonic() - stopped)


def wait_ready(lab: LabState, name: str, timeout: float = 120.0) -> None:
    """Until the agent answers ready on /readyz (a reboot starts it with the host)."""
    deadline = time.monotonic() + timeout
    while lab.ssh(lab.host(name)).run(f"sudo {READY}").returncode != 0:
        if time.monotonic() > deadline:
            raise LabError(f"{name}'s agent is not ready after {timeout:.0f} s")
        time.sleep(1)


def reboot(lab: LabState, name: str) -> None:
    """The host rebooted, and its agent ready again."""
    hosts.restart_host(name)
    wait_ready(lab, name)


def subnet_of(lab: LabState, name: str) -> str:
    """The node's FLANNEL_SUBNET in its subnet.env."""
    found = re.search(
        r"^FLANNEL_SUBNET=(\S+)$", as_root(lab, name, "cat /run/flannel/subnet.env"), re.M
    )
    if found is None:
        raise LabError(f"{name}: no FLANNEL_SUBNET in /run/flannel/subnet.env")
    return found[1]


def runtime_copy(target: Path, version: str) -> Path:
    """A copy of this source tree (what its wheel is built from) with another version: a new
    runtime to roll out (``flannel_runtime_source``)."""
    shutil.copytree(
        ROOT / "pyflannel_runtime",
        target / "pyflannel_runtime",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, target / name)
    for name, key in (
        ("pyproject.toml", "version"),
        ("pyflannel_runtime/__init__.py", "__version__"),
    ):
        path = target / name
        text, count = re.subn(
            rf'^{key} = "[^"]+"$', f'{key} = "{version}"', path.read_text(), flags=re.M
        )
        if count != 1:
            raise LabError(f"{path}: no {key} line to set")
        path.write_text(text)
    return target
