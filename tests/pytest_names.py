"""The tests a test module holds, named as pytest names them, for the checks that the docs name
only tests that exist (tests/unit/test_docs.py, tests/unit/test_citations.py)."""

from __future__ import annotations

import ast
from pathlib import Path


def pytest_names(path: Path) -> set[str]:
    """`test_x` for a function, `Class::test_x` for a method, inherited ones too (from base
    classes in the same module)."""
    tree = ast.parse(path.read_text(), str(path))
    functions = ast.FunctionDef | ast.AsyncFunctionDef
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}

    def methods(name: str) -> set[str]:
        node = classes[name]
        own = {item.name for item in node.body if isinstance(item, functions)}
        bases = {base.id for base in node.bases if isinstance(base, ast.Name)} & set(classes)
        return own.union(*(methods(base) for base in bases))

    return {node.name for node in tree.body if isinstance(node, functions)} | {
        f"{name}::{method}" for name in classes for method in methods(name)
    }
