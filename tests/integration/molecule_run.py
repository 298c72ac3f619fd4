"""Running molecule scenarios (molecule/<scenario>/) from the tests, as `scripts/molecule` runs
them, each run on lab hosts of its own name so that runs go side by side; molecule's progress
read back from its output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))
# In this order: each backend's converge switches from the one before.
BACKEND_SCENARIOS = ["default", "host-gw", "udp", "kubernetes"]
ROLE_SCENARIOS = [s for s in SCENARIOS if s not in BACKEND_SCENARIOS]
# molecule's progress lines: "<scenario> ➜ <action>: Executing|Executed: ..."
ACTION_RE = re.compile(r"(\S+) ➜ (\w+): (Executing|Executed: .*)$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def scenario_config(scenario: str) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())
    assert isinstance(config, dict), scenario
    return config


def molecule_env(lab: str) -> dict[str, str]:
    """molecule's environment for a run on the lab hosts named `lab` (.lab/molecule-<lab>), its
    state beside theirs."""
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return dict(
        os.environ,
        PATH=path,
        PYFLANNEL_MOLECULE_LAB=lab,
        MOLECULE_EPHEMERAL_DIRECTORY=str(molecule_state(lab)),
    )


def molecule_state(lab: str) -> Path:
    """molecule's own state for the runs on the lab hosts named `lab`. Its default place is
    keyed by the checkout directory's name alone, shared by every checkout of that name: a run
    killed there leaves "created" behind, and the next run would skip create and converge on no
    hosts at all."""
    return ROOT / ".lab" / f"molecule-{lab}" / "molecule"


def lab_state(lab: str) -> Path:
    """Where the lab hosts of molecule's lab `lab` keep their state (.config/molecule)."""
    return ROOT / ".lab" / f"molecule-{lab}" / "hosts"


def molecule_test(scenarios: list[str], lab: str) -> tuple[int, list[tuple[float, str]]]:
    """`molecule test -s ...` on the lab hosts named `lab`: its exit status and its output,
    each line with when it came."""
    argv = ["molecule", "test"] + [arg for s in scenarios for arg in ("-s", s)]
    shutil.rmtree(molecule_state(lab), ignore_errors=True)  # a killed run's
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=molecule_env(lab),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as molecule:
        assert molecule.stdout is not None
        for line in molecule.stdout:
            lines.append((time.monotonic(), ANSI_RE.sub("", line.rstrip("\n"))))
    return molecule.returncode, lines


def actions(lines: list[tuple[float, str]]) -> list[tuple[float, str, str, str]]:
    """(when, scenario, action, outcome) of each of molecule's progress lines."""
    found = []
    for when, line in lines:
        match = ACTION_RE.search(line)
        if match:
            name, action, outcome = match.groups()
            found.append((when, name, action, outcome))
    return found


def wall_times(steps: list[tuple[float, str, str, str]]) -> dict[str, float]:
    """Seconds from a scenario's first action to the next scenario's (the shared create and
    destroy counted apart, as `create` and `destroy`)."""
    starts = [
        (when, "create" if action == "create" else "destroy" if action == "destroy" else name)
        for when, name, action, outcome in steps
        if outcome == "Executing"
    ]
    times: dict[str, float] = {}
    for (when, name), (later, _) in zip(starts, [*starts[1:], (steps[-1][0], "")], strict=True):
        times[name] = times.get(name, 0.0) + later - when
    return times


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")
