"""Citations a reader can follow: every test the project's documents name exists, and nothing
cites a document that is not in the repository (the reference files code once cited by section
number)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.pytest_names import pytest_names

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
TEST_REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(\w+(?:::\w+)*)")


REPOSITORY_PATH = re.compile(
    r"`((?:pyflannel_runtime|pyflannel_controller|tests|bench|docs|scripts)/[\w./-]*)`"
)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_repository_path_a_document_names_exists(doc: Path) -> None:
    paths = REPOSITORY_PATH.findall(doc.read_text())
    assert [p for p in paths if not (REPO / p).exists()] == []


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_test_a_document_names_exists(doc: Path) -> None:
    references = TEST_REFERENCE.findall(doc.read_text())
    assert references, f"{doc.name} names no test"
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not (REPO / path).is_file() or name not in pytest_names(REPO / path)
    ]
    assert missing == []


# Documents outside the repository that code and docs used to cite by section number, and the
# reference files they came from. The patterns are spelt with escapes so that this file does not
# match itself.
OUTSIDE_CITATION = re.compile(
    "|".join(
        (
            "\u00a7\\s*\\d",  # a section sign before a number
            "spec \u00a7",
            "lab" + "-recipes",
            "flannel" + "-spec",
            "shared/(?:reference|design)",
        )
    )
)


def _repository_files() -> list[Path]:
    """The repository's files, tracked or new, without what .gitignore names (build and test
    output, the venv, the lab's cache) or the collection's symlink back to the root."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    paths = (REPO / name for name in listed.split("\0") if name)
    return sorted(p for p in paths if p.is_file() and not p.is_symlink())


def test_nothing_cites_a_document_outside_the_repository() -> None:
    offending = []
    for path in _repository_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary files cite nothing
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_CITATION.search(line):
                offending.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert offending == [], "cite flannel's source or docs/compatibility.md instead"


@pytest.mark.parametrize(
    "line",
    [
        '"""The watcher (spec \u00a73.5)."""',
        "# see \u00a7 6.2",
        "# lab" + "-recipes, section 1",
        "# /work/shared/" + "reference/flannel" + "-spec.md",
    ],
)
def test_the_check_recognises_outside_citations(line: str) -> None:
    assert OUTSIDE_CITATION.search(line)


def test_flannel_references_are_not_outside_citations() -> None:
    assert not OUTSIDE_CITATION.search(
        "(flannel-io/flannel pkg/lease/lease.go: LeaseWatcher; docs/compatibility.md)"
    )
