"""Every bench script starts: its imports resolve and its options parse (`--help`), so a
change elsewhere that breaks a bench fails here rather than at its next run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted((ROOT / "bench").glob("bench_*.py"))


def test_every_bench_script_imports_and_parses_its_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = {
        bench.name: subprocess.Popen(
            [sys.executable, str(bench), "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for bench in BENCHES
    }
    failed = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=120)
        if process.returncode != 0 or not out.startswith("usage:"):
            failed[name] = err.strip().splitlines()[-1:] or out[:200]
    assert len(BENCHES) >= 13
    assert failed == {}
