"""The collection's Prometheus alerting rules: `promtool check rules` passes, and `promtool test
rules` runs their unit tests (tests/prometheus/pyflannel.rules.test.yml), which hold each alert
both firing and not firing. Debian's prometheus package provides promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "roles/agent/files/prometheus/pyflannel.rules.yml"
RULE_TESTS = ROOT / "tests/prometheus/pyflannel.rules.test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    assert found is not None, "promtool (Debian's prometheus) is missing: ./scripts/bootstrap"
    return subprocess.run(
        [found, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )


def alert_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_the_rules_unit_tests_pass() -> None:
    done = promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert [RULE_TESTS.parent / path for path in tests["rule_files"]] == [
        RULE_TESTS.parent / "../../roles/agent/files/prometheus/pyflannel.rules.yml"
    ]
    firing, quiet = set(), set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = alert_names()
    assert len(names) == 6 and len(set(names)) == 6
    assert firing == set(names) and quiet == set(names)
