"""Every molecule scenario (molecule/<scenario>/), as `scripts/molecule` runs it: each boots its
own lab hosts from the cached image, converges the collection's roles by FQCN, checks that a
second converge changes nothing, verifies and destroys the hosts again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))

pytestmark = [pytest.mark.root, pytest.mark.podman]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    done = subprocess.run(
        ["molecule", "test", "-s", scenario],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    assert "idempotence" in output.lower()


def test_every_role_has_a_scenario() -> None:
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}
    converged = set()
    for scenario in SCENARIOS:
        text = (ROOT / "molecule" / scenario / "molecule.yml").read_text()
        converged |= {
            r.strip()
            for line in text.splitlines()
            if "MOLECULE_ROLES" in line
            for r in line.split(":", 1)[1].split(",")
        }
    # preflight runs in every converge and runtime under cni and agent.
    assert roles - converged <= {"preflight", "runtime"}, roles - converged
    assert {"preflight", "runtime"} <= roles
