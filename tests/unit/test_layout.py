"""Everything imports by its full name: tests are packages, and nothing edits the import path.

The one exception is the CNI plugin's launcher, which runs Python isolated (``-IS``: neither
PYTHONPATH nor site-packages apply) and so must put the package on the path itself
(``pyflannel_runtime.cni.install.isolated_prelude``).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "pyflannel_runtime" / "cni" / "install.py"
PATH_EDIT = re.compile(r"\bsys\.path\b(?!_)")


def _python_files() -> list[Path]:
    roots = (
        "pyflannel_runtime",
        "pyflannel_controller",
        "pyflannel_lab",
        "tests",
        "bench",
        "plugins",
        "scripts",
    )
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


def test_only_the_cni_launcher_puts_anything_on_the_import_path() -> None:
    editing = [
        str(path.relative_to(REPO))
        for path in _python_files()
        if path != LAUNCHER and path != Path(__file__) and PATH_EDIT.search(path.read_text())
    ]
    assert editing == []


def test_every_test_directory_is_a_package() -> None:
    directories = {path.parent for path in (REPO / "tests").rglob("*.py")}
    assert [d for d in sorted(directories) if not (d / "__init__.py").is_file()] == []
