"""The role scenarios (molecule/etcd, cni, agent), as `scripts/molecule` runs them: each boots
lab hosts of its own from the cached image, converges its roles by FQCN on fresh hosts, checks
that a second converge changes nothing, verifies and destroys the hosts again. Each scenario's
wall time is printed. Its lab hosts are named apart from the backend scenarios' (test_molecule.py),
so that the two modules run side by side."""

from __future__ import annotations

import time

import pytest

from tests.integration.molecule_run import ROLE_SCENARIOS, actions, molecule_test, report

pytestmark = [pytest.mark.root, pytest.mark.podman]

LAB = "roles"


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("scenario", ROLE_SCENARIOS)
def test_role_scenario(scenario: str, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    status, lines = molecule_test([scenario], LAB)
    output = "\n".join(line for _, line in lines)
    assert status == 0, output[-8000:]
    done = {
        (name, action) for _, name, action, outcome in actions(lines) if "Successful" in outcome
    }
    assert {(scenario, "converge"), (scenario, "idempotence"), (scenario, "verify")} <= done, (
        output[-8000:]
    )
    report(capsys, f"molecule {scenario}: {time.monotonic() - started:.0f} s")
