"""Every molecule scenario (molecule/<scenario>/), as `scripts/molecule` runs them.

The role scenarios (etcd, cni, agent) each boot lab hosts of their own from the cached image,
converge their roles by FQCN on fresh hosts, check that a second converge changes nothing,
verify and destroy the hosts again. The backend scenarios (default, the vxlan backend with etcd,
then host-gw, udp and the Kubernetes datastore) are one `molecule test` run on shared hosts
(their molecule.yml: shared_state): created once, each scenario converging, re-converging and
verifying in turn (a backend switch, then a datastore switch), destroyed once. Each
scenario's wall time is printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

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
MOLECULE_LAB_STATE = ROOT / ".lab" / "molecule"

pytestmark = [pytest.mark.root, pytest.mark.podman]


def molecule_env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def molecule_test(scenarios: list[str]) -> tuple[int, list[tuple[float, str]]]:
    """`molecule test -s ...`: its exit status and its output, each line with when it came."""
    argv = ["molecule", "test"] + [arg for s in scenarios for arg in ("-s", s)]
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=molecule_env(),
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


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("scenario", ROLE_SCENARIOS)
def test_role_scenario(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    status, lines = molecule_test([scenario])
    output = "\n".join(line for _, line in lines)
    assert status == 0, output[-8000:]
    done = {
        (name, action) for _, name, action, outcome in actions(lines) if "Successful" in outcome
    }
    assert {(scenario, "converge"), (scenario, "idempotence"), (scenario, "verify")} <= done, (
        output[-8000:]
    )
    report(capsys, f"molecule {scenario}: {time.monotonic() - started:.0f} s")


@pytest.mark.timeout(2400)
def test_backend_scenarios_on_shared_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    double = kube_api_double_dir()
    try:
        status, lines = molecule_test(BACKEND_SCENARIOS)
    finally:
        # Only a killed molecule leaves these; its own failure path runs cleanup and destroy.
        subprocess.run(
            [sys.executable, "-m", "tests.fakes.kube_api_process", "stop", str(double)],
            cwd=ROOT,
            check=True,
        )
        subprocess.run(
            [sys.executable, "-m", "pyflannel_lab", "hosts", "down"],
            cwd=ROOT,
            env=dict(molecule_env(), PYFLANNEL_LAB_STATE=str(MOLECULE_LAB_STATE)),
            check=True,
        )
    output = "\n".join(line for _, line in lines)
    assert status == 0, output[-8000:]
    steps = actions(lines)
    done = [(name, action) for _, name, action, outcome in steps if "Successful" in outcome]
    # One create and one destroy (counted where they start: molecule's closing summary lists
    # every action again), every scenario's converge, idempotence and verify between.
    started = [(name, action) for _, name, action, outcome in steps if outcome == "Executing"]
    shared = [("default", "create"), ("default", "destroy")]
    assert [a for a in started if a[1] in ("create", "destroy")] == shared, output[-8000:]
    assert set(shared) <= set(done), output[-8000:]
    for scenario in BACKEND_SCENARIOS:
        for action in ("converge", "idempotence", "verify"):
            assert (scenario, action) in done, (scenario, action, output[-8000:])
    times = wall_times(steps)
    report(
        capsys,
        "molecule on shared hosts: "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in times.items())
        + f"; in all {steps[-1][0] - steps[0][0]:.0f} s",
    )


def kube_api_double_dir() -> Path:
    """Where the kubernetes scenario keeps its Node API test double (its molecule.yml)."""
    config = yaml.safe_load((ROOT / "molecule" / "kubernetes" / "molecule.yml").read_text())
    path = config["ansible"]["env"]["MOLECULE_KUBE_API_DOUBLE"]
    return Path(path.replace("${MOLECULE_PROJECT_DIRECTORY}", str(ROOT)))


def test_every_scenario_runs_in_ci() -> None:
    assert set(BACKEND_SCENARIOS) <= set(SCENARIOS)
    for scenario in SCENARIOS:
        config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())
        # A scenario sharing hosts outside the backend run would share them with a role scenario.
        assert bool(config.get("shared_state")) == (scenario in BACKEND_SCENARIOS), scenario


def test_every_role_has_a_scenario() -> None:
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    converged = set()
    for scenario in SCENARIOS:
        config = yaml.safe_load((ROOT / "molecule" / scenario / "molecule.yml").read_text())
        converged |= set(config["ansible"]["env"]["MOLECULE_ROLES"].split(","))
    # preflight runs in every converge and runtime under cni and agent.
    assert roles - converged <= {"preflight", "runtime"}, roles - converged
    assert {"preflight", "runtime"} <= roles
