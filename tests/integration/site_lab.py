"""What the site.yml test modules share: lab hosts for a module, a command on a host, a
host's snapshot, what the agent's virtualenv holds, and the check that a run converged."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

from pyflannel_lab import hosts
from pyflannel_lab.playbook import LAB_INVENTORY, PlaybookRun

# What a host looks like, minus what logging in and running commands change by itself.
SNAPSHOT = (
    "find /etc /opt /run -xdev \\( -path /run/user -o -path /run/systemd -o -path /run/sudo"
    " -o -path /run/log -o -path /run/sshd -o -path /run/utmp -o -path /etc/ld.so.cache \\) -prune"
    " -o -printf '%p %m %s\\n' | sort; systemctl list-unit-files --no-legend --no-pager"
)


@contextlib.contextmanager
def lab_hosts(count: int = 3, etcd_members: int = 1, releases: Sequence[str] = ()) -> Iterator[Any]:
    """Systemd lab hosts (pyflannel_lab) from the cached images of ``releases`` (one for
    all, or one per host; default Debian 12), the first ``etcd_members`` of them in the etcd
    group, removed afterwards with the etcd CA the etcd role made for them beside the inventory
    (as `./scripts/lab down`) and the diagnostics bundles the verify role fetched there."""
    state = hosts.up(count, etcd_members=etcd_members, releases=releases)
    try:
        yield state
    finally:
        hosts.down()
        shutil.rmtree(f"{LAB_INVENTORY}-credentials", ignore_errors=True)
        shutil.rmtree(f"{LAB_INVENTORY}-bundles", ignore_errors=True)


def on_host(lab: Any, name: str, command: str) -> str:
    """``command`` as root on a lab host over SSH; its output (a failure fails the test)."""
    done = lab.ssh(lab.host(name)).run(f"sudo sh -c {shlex.quote(command)}")
    assert done.returncode == 0, f"{name}: {command}: {done.stderr}"
    return str(done.stdout)


# What every node's wheelhouse and virtualenv hold (pyproject.toml's dependencies), as pip
# lists the projects: no pip, no extra.
BASE_PROJECTS = {"pyflannel", "pyroute2", "msgspec", "prometheus-client"}


def venv_projects(lab: Any, name: str, venv: str = "/opt/pyflannel/venv") -> set[str]:
    """The projects installed in the agent's virtualenv, as Debian's pip lists them there."""
    listed = on_host(
        lab,
        name,
        f"python3 -m pip --python {venv}/bin/python list --format=json --disable-pip-version-check",
    )
    return {re.sub(r"[-_.]+", "-", project["name"]).lower() for project in json.loads(listed)}


# What the verify role's summary says when a run that changed nothing left the suite out.
SUITE_NOT_RUN = "connectivity suite not run: nothing changed"
# Asks the verify role for the connectivity suite on a run that changes nothing.
ASK_FOR_THE_SUITE = {"flannel_verify_connectivity": "always"}


def assert_converged(run: PlaybookRun, names: list[str], suite: bool = True) -> None:
    """site.yml ran on every host without a failure, and its verify role saw every pod reach
    every other (``suite``), or left the connectivity suite out as a run that changed nothing
    does unless asked."""
    assert run.returncode == 0 and not run.failed_hosts(), run.explain()
    assert sorted(run.recap) == sorted(names), run.explain()
    if suite:
        assert "every pod reaches every other pod" in run.output, run.explain()
    else:
        assert SUITE_NOT_RUN in " ".join(run.output.split()), run.explain()
        assert "every pod reaches every other pod" not in run.output, run.explain()
