"""The node runtime installs without the controller's dependencies (issue 11 item 5).

Every third-party import must be a declared dependency: the node runtime (pyflannel_runtime: the
agent, the CNI plugin, `pyflannel status`) only of ``[project] dependencies``; the controller's
code (pyflannel_controller) and the lab (pyflannel_lab) also of the ``controller`` extra. That node code never imports
controller code is test_package_layers.py's.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The node runtime, the controller's code and the lab: what runs where is test_package_layers.py's.
PACKAGES = (REPO / "pyflannel_runtime", REPO / "pyflannel_controller", REPO / "pyflannel_lab")
CONTROLLER_PACKAGES = {"pydantic", "pydantic_core", "jinja2", "yaml", "ansible"}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    node = {_name(r) for r in project["dependencies"]}
    controller = {_name(r) for r in project["optional-dependencies"]["controller"]}
    return node, controller


def distribution(top_level: str) -> str:
    names = importlib.metadata.packages_distributions().get(top_level)
    assert names, f"{top_level} is imported but installed by no distribution"
    return _name(names[0])


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_controller(module: str) -> bool:
    """Runs on the controller (or the development machine), with the controller's extra."""
    return module.split(".")[0] in ("pyflannel_controller", "pyflannel_lab")


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a ``try`` that handles ImportError (an optional import with its own message)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                names = ast.unparse(handler.type) if handler.type else ""
                if re.search(r"\b(ImportError|ModuleNotFoundError)\b", names):
                    return True
    return False


def imports(path: Path) -> Iterator[tuple[str, int]]:
    """Absolute modules imported anywhere in the file (function bodies too), except those
    under TYPE_CHECKING and those guarded by an ImportError handler."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test):
            continue
        if _guarded(node, parents):
            continue
        for module in modules:
            yield module, node.lineno


SOURCES = sorted(path for package in PACKAGES for path in package.rglob("*.py"))


def test_the_node_runtime_needs_no_controller_extra() -> None:
    node, controller = declared()
    assert not {distribution(p) for p in CONTROLLER_PACKAGES if p != "ansible"} & node
    assert not {"ansible", "ansible-core", "jinja2", "pydantic", "pyyaml"} & node
    assert {"ansible", "ansible-core", "jinja2", "pydantic", "pyyaml"} <= controller


@pytest.mark.parametrize("path", SOURCES, ids=[module_name(p) for p in SOURCES])
def test_every_import_is_declared_where_it_runs(path: Path) -> None:
    node, controller = declared()
    module = module_name(path)
    allowed = node | controller if is_controller(module) else node
    problems = []
    for imported, line in imports(path):
        top = imported.split(".")[0]
        if (
            top not in ("pyflannel_runtime", "pyflannel_controller", "pyflannel_lab")
            and top not in (*sys.stdlib_module_names, "__future__")
            and (distribution(top) not in allowed)
        ):
            problems.append(f"line {line}: {imported} ({distribution(top)}) is not declared")
    assert problems == []


# Raise ImportError for the controller's packages and code, as on a node that installed only the
# runtime's wheel.
BLOCKER = f"""
import sys
from importlib.abc import MetaPathFinder

class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(CONTROLLER_PACKAGES | {"pyflannel_controller"})!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""


def test_node_commands_run_without_the_controller_packages() -> None:
    probe = BLOCKER + (
        "import pyflannel_runtime.agent.main, pyflannel_runtime.cni.plugin, pyflannel_runtime.cli.status\n"
        "from pyflannel_runtime.cli.main import main\n"
        "assert main(['status', '--help']) == 0\n"
        "print('ran')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("ran\n")
    assert result.stderr == ""
