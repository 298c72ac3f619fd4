"""The code of an earlier git revision, for benches that measure "before" beside "after" in
one run: pyflannel_runtime as it was, unpacked from a `git archive` into a scratch directory.
A process started there (its working directory: first on the import path of `python -m` and
`python -c`) runs that code; AgentLab.start_agent's `cwd` does it for an agent."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def baseline_tree(revision: str) -> Iterator[Path]:
    """pyflannel_runtime as it was at `revision`, in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as scratch:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, "pyflannel_runtime"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        yield Path(scratch)
