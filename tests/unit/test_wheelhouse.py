"""The agent's wheelhouse builder: what it builds from, and what it leaves in the source tree."""

from __future__ import annotations

import tarfile
from pathlib import Path

from pyflannel_runtime.ops.wheelhouse import build_wheelhouse, source_digest

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "pyflannel"
version = "0.0.1"
readme = "README.md"

[tool.setuptools.packages.find]
include = ["pyflannel_runtime*"]
"""


def _project(root: Path) -> Path:
    (root / "pyflannel_runtime").mkdir(parents=True)
    (root / "pyflannel_runtime" / "__init__.py").write_text('"""A stand-in package."""\n')
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "README.md").write_text("# stand-in\n")
    (root / "notes.txt").write_text("not part of the wheel\n")
    return root


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_build_leaves_the_source_tree_as_it_was_and_is_cached(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    before = _tree(source)
    built = build_wheelhouse(source, tmp_path / "cache")
    assert _tree(source) == before  # no build/, no *.egg-info
    with tarfile.open(built.archive) as tar:
        assert tar.getnames() == ["pyflannel-0.0.1-py3-none-any.whl"]
    assert built.project_wheel == "pyflannel-0.0.1-py3-none-any.whl"
    again = build_wheelhouse(source, tmp_path / "cache")
    assert again == built
    assert again.archive.stat().st_mtime_ns == built.archive.stat().st_mtime_ns


def test_the_digest_covers_what_goes_into_the_wheel_and_nothing_else(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    digest = source_digest(source, "3.11")
    (source / "notes.txt").write_text("edited\n")
    assert source_digest(source, "3.11") == digest
    (source / "README.md").write_text("# the wheel's long description\n")
    changed = source_digest(source, "3.11")
    assert changed != digest
    (source / "pyflannel_runtime" / "__init__.py").write_text('"""Edited."""\n')
    assert source_digest(source, "3.11") not in {digest, changed}
    assert source_digest(source, "3.12") != source_digest(source, "3.11")
