"""The code of an earlier git revision, for benches that measure "before" beside "after" in
one run: pyflannel_runtime as it was, unpacked from a `git archive` into a scratch directory.
A process started there (its working directory: first on the import path of `python -m` and
`python -c`) runs that code; AgentLab.start_agent's `cwd` does it for an agent."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run in a tree: every module of its pyflannel_runtime imported (those whose optional library
# is not installed left out), then the bytecode of everything that imported written.
_COMPILE_IMPORTED = """
import compileall, importlib, pkgutil, sys
import pyflannel_runtime
for found in pkgutil.walk_packages(
    pyflannel_runtime.__path__, "pyflannel_runtime.", onerror=lambda name: None
):
    try:
        importlib.import_module(found.name)
    except ImportError:
        pass
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and path.endswith(".py"):
        compileall.compile_file(path, quiet=2)
"""


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


def compile_ahead(tree: Path) -> None:
    """Write the bytecode of `tree`'s pyflannel_runtime and of every library it imports, as pip
    does when it installs them on a node. An agent started there then loads its modules as a
    node's does, instead of compiling each from source at every start (as it would where the
    environment was installed without bytecode and PYTHONDONTWRITEBYTECODE is set). That
    compiling costs each agent more CPU than the rest of its start (0.1-0.17 s of 0.25-0.33 s
    from start to routes at 25 peers), the more the more modules its tree has: a bench
    comparing two trees' starts would mostly compare their sizes."""
    subprocess.run([sys.executable, "-c", _COMPILE_IMPORTED], cwd=tree, check=True)
