"""The collection as other people get it: ``ansible-galaxy collection build`` of this tree,
installed into a directory of its own, and ``ansible-playbook`` run from a directory outside the
repository against that installation alone (no ansible.cfg, no collections/ link)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from pyflannel_lab.playbook import PlaybookRun, parse_recap

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def build(scratch: Path) -> Path:
    """The collection tarball, built under `scratch`."""
    built = scratch / "built"
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--output-path", built, ROOT],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=scratch,
    )
    (tarball,) = built.glob("pyflannel-network-*.tar.gz")
    return tarball


def members(tarball: Path) -> list[str]:
    with tarfile.open(tarball) as tar:
        return tar.getnames()


def install(scratch: Path, tarball: Path, into: str = "installed") -> Path:
    """`tarball` installed under `scratch`/`into`; returns that collections path."""
    installed = scratch / into
    # --no-deps: Galaxy is unreachable; the dependencies come with the `ansible` package.
    # --force: a copy installed elsewhere (molecule puts one in ~/.ansible) must not count.
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "install", "--no-deps", "--force", "-p", installed,
         tarball],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=scratch,
    )  # fmt: skip
    return installed


def run_outside(work: Path, installed: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook ARGS`` in `work`, with only the installed collection (and the
    `ansible` package's) to find."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_LOCAL_TEMP": str(work / ".tmp"),
        "ANSIBLE_HOME": str(work / ".home"),
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [BIN / "ansible-playbook", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        check=False,
    )


def play_outside(work: Path, installed: Path, *args: str | Path) -> PlaybookRun:
    """`run_outside`, timed, with its PLAY RECAP read."""
    started = time.monotonic()
    done = run_outside(work, installed, *args)
    seconds = time.monotonic() - started
    return PlaybookRun(
        done.returncode, done.stdout + done.stderr, seconds, parse_recap(done.stdout)
    )
