"""Citations a reader can follow: every test the project's documents name exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md"))
TEST_REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_test_a_document_names_exists(doc: Path) -> None:
    references = TEST_REFERENCE.findall(doc.read_text())
    assert references, f"{doc.name} names no test"
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not (REPO / path).is_file() or name not in _functions(REPO / path)
    ]
    assert missing == []
