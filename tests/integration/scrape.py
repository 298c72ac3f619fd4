"""An agent's /metrics as the tests read it: each sample by its PromQL selector, and what
`promtool check metrics` (Debian's prometheus package) says of the text."""

from __future__ import annotations

import shutil
import subprocess

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, float]:
    """Every sample by name and labels as PromQL selects it, labels sorted:
    ``pyflannel_drift_repairs_total{kind="route"}``, ``pyflannel_ready``."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def promtool_problems(text: str) -> str:
    """What `promtool check metrics` reports (empty: nothing), with its exit status."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool (Debian's prometheus) is missing: ./scripts/bootstrap"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return (
        ""
        if done.returncode == 0 and not done.stdout + done.stderr
        else (f"exit {done.returncode}: {done.stdout}{done.stderr}")
    )
