"""The backend scenarios (molecule/default, host-gw, udp, kubernetes), as `scripts/molecule`
runs them: one `molecule test` run on shared hosts (their molecule.yml: shared_state), created
once, each scenario converging, re-converging and verifying in turn (the vxlan backend with
etcd, then host-gw, udp and the Kubernetes datastore: a backend switch, then a datastore
switch), destroyed once. Each scenario's wall time is printed. The role scenarios are
test_molecule_roles.py's, on lab hosts of another name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.molecule_run import (
    BACKEND_SCENARIOS,
    ROOT,
    SCENARIOS,
    actions,
    lab_state,
    molecule_env,
    molecule_test,
    report,
    scenario_config,
    wall_times,
)

pytestmark = [pytest.mark.root, pytest.mark.podman]

LAB = "backends"


@pytest.mark.timeout(2400)
def test_backend_scenarios_on_shared_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    double = kube_api_double_dir()
    try:
        status, lines = molecule_test(BACKEND_SCENARIOS, LAB)
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
            env=dict(molecule_env(LAB), PYFLANNEL_LAB_STATE=str(lab_state(LAB))),
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
    env = scenario_config("kubernetes")["ansible"]["env"]
    path = env["MOLECULE_KUBE_API_DOUBLE"]
    return Path(path.replace("${MOLECULE_PROJECT_DIRECTORY}", str(ROOT)))


def test_every_scenario_runs_in_ci() -> None:
    assert set(BACKEND_SCENARIOS) <= set(SCENARIOS)
    for scenario in SCENARIOS:
        config = scenario_config(scenario)
        # A scenario sharing hosts outside the backend run would share them with a role scenario.
        assert bool(config.get("shared_state")) == (scenario in BACKEND_SCENARIOS), scenario


def test_every_role_has_a_scenario() -> None:
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    converged = set()
    for scenario in SCENARIOS:
        config = scenario_config(scenario)
        converged |= set(config["ansible"]["env"]["MOLECULE_ROLES"].split(","))
    # preflight runs in every converge and runtime under cni and agent.
    assert roles - converged <= {"preflight", "runtime"}, roles - converged
    assert {"preflight", "runtime"} <= roles
