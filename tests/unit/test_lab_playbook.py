"""The lab's ansible-playbook runner, under the stdin a CI runner or a background job gives it."""

from __future__ import annotations

import subprocess
import sys

from pyflannel_lab.playbook import ROOT

# ansible-playbook refuses to start when it inherits a non-blocking stdin (ansible's
# cli/__init__.py: check_blocking_io); the runner must not hand it the caller's.
NON_BLOCKING_CALLER = """
import os
os.set_blocking(0, False)
from pyflannel_lab.playbook import run_playbook
run = run_playbook("--version")
print(run.returncode)
print(run.output)
"""


def test_runs_when_the_caller_stdin_is_non_blocking() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NON_BLOCKING_CALLER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    returncode, _, output = done.stdout.partition("\n")
    assert returncode == "0", output
    assert "ansible-playbook [core 2." in output
