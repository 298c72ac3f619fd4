"""What the collection's node modules cost a host in imports, for two trees side by side: a
base (a git revision, main by default) and this working tree.

A module run on a node is an AnsiballZ payload run with the agent's virtualenv Python: it imports
ansible.module_utils.basic (the same for every tree), the module, the collection's module_utils
it uses and the runtime code each of its paths imports inside functions. For each module of
plugins/modules that imports the runtime, a fresh interpreter imports what the module's code names
in any import statement (module level and inside functions, following the collection's own
module_utils: the most a run can import), and opens and closes a pyroute2 handle in its own
network namespace when the module's runs read the kernel, as the runtime opens one. The first
figure is that child's CPU time after ansible.module_utils.basic (`time.process_time`), the second
the number of modules it loaded; the medians over the rounds, the two trees alternating which
goes first, as this VM's vCPU speed swings from second to second.

    PYTHONPATH=. python bench/bench_module_imports.py [--base main] [--rounds 9]
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = "ansible_collections.pyflannel.network."
# The modules whose runs read the host's kernel with a pyroute2 handle (the runtime's
# netlink.netns.iproute, or pyroute2's own before): the datapath check (node_facts, routes) and
# the connectivity suite's run (its host's own addresses).
READS_KERNEL = {"node_facts", "routes", "connectivity"}

PROBE = r"""
import importlib, json, sys, time
import ansible.module_utils.basic
before = set(sys.modules)
started = time.process_time()
names, kernel = json.loads(sys.argv[1])
for name in names:
    try:
        importlib.import_module(name)
    except ImportError:
        # `from package import name` where name is no module: the package is imported.
        pass
if kernel:
    from pyflannel_runtime.netlink.netns import iproute
    iproute(None).close()
print(json.dumps({"cpu": time.process_time() - started, "loaded": len(set(sys.modules) - before)}))
"""


def _imports(nodes: list[ast.AST]) -> Iterator[tuple[str, list[str]]]:
    """Each import statement's module and the names it takes from it (absolute imports only:
    the modules and module_utils use no relative ones)."""
    for node in (n for top in nodes for n in ast.walk(top)):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            yield node.module, [alias.name for alias in node.names]


def _code(path: Path, functions: list[str] | None) -> list[ast.AST]:
    """The file's statements outside functions and classes, and the named functions (every
    statement when `functions` is None)."""
    tree = ast.parse(path.read_text(), str(path))
    if functions is None:
        return [tree]
    defined = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node for node in tree.body if not isinstance(node, defined) or node.name in functions]


def module_imports(tree: Path, module: str) -> list[str]:
    """What a module's code imports: every import statement of the module's file, and of the
    collection's module_utils the module level and the functions the module takes from them."""
    todo: list[tuple[Path, list[str] | None]] = [
        (tree / "plugins" / "modules" / f"{module}.py", None)
    ]
    seen: set[tuple[Path, str | None]] = set()
    names: list[str] = []
    while todo:
        path, functions = todo.pop()
        for name, taken in _imports(_code(path, functions)):
            if not name.startswith(COLLECTION):
                names.extend(n for n in (name, *(f"{name}.{t}" for t in taken)) if n not in names)
                continue
            util = tree.joinpath(*name[len(COLLECTION) :].split(".")).with_suffix(".py")
            wanted = [t for t in taken if (util, t) not in seen]
            if util.exists() and (wanted or (util, None) not in seen):
                seen.update({(util, None), *((util, t) for t in wanted)})
                todo.append((util, wanted))
    return names


def node_modules(tree: Path) -> list[str]:
    """The modules that import the runtime (they run with the agent's virtualenv on a node)."""
    found = []
    for path in sorted((tree / "plugins" / "modules").glob("*.py")):
        if any(n.startswith("pyflannel_runtime") for n in module_imports(tree, path.stem)):
            found.append(path.stem)
    return found


def probe(tree: Path, module: str) -> dict[str, float]:
    names = [f"{COLLECTION}plugins.modules.{module}", *module_imports(tree, module)]
    env = {"PYTHONPATH": f"{tree / 'collections'}:{tree}", "PATH": "/usr/bin:/bin"}
    # A network namespace of its own: the handle it opens reads nothing of the host's.
    done = subprocess.run(
        [
            "unshare",
            "--net",
            sys.executable,
            "-c",
            PROBE,
            json.dumps([names, module in READS_KERNEL]),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd="/",
    )
    found: dict[str, float] = json.loads(done.stdout)
    return found


def export(revision: str, into: Path) -> Path:
    """The tree of a git revision, as files (the collection's link included)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryFile() as held:
        held.write(archive)
        held.seek(0)
        with tarfile.open(fileobj=held) as tar:
            tar.extractall(into, filter="tar")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = export(args.base, Path(scratch))
        trees = {"base": base, "tree": ROOT}
        modules = sorted(set(node_modules(base)) | set(node_modules(ROOT)))
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for module in modules:
            # Uncounted: writes the base tree's bytecode caches, as an installed runtime has.
            probe(base, module)
        for round_no in range(args.rounds):
            order = list(trees.items()) if round_no % 2 == 0 else list(reversed(trees.items()))
            for module in modules:
                for label, tree in order:
                    results.setdefault((module, label), []).append(probe(tree, module))

    def median(module: str, label: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(module, label)])

    print(
        f"imports of a node module's code after ansible.module_utils.basic, medians of "
        f"{args.rounds} rounds: CPU ms (modules loaded), {args.base} -> this tree"
    )
    totals = {"base": 0.0, "tree": 0.0}
    for module in modules:
        cpu = {label: median(module, label, "cpu") * 1e3 for label in trees}
        loaded = {label: median(module, label, "loaded") for label in trees}
        totals = {label: totals[label] + cpu[label] for label in trees}
        print(
            f"  {module:18} {cpu['base']:6.1f} ms ({loaded['base']:4.0f}) -> "
            f"{cpu['tree']:6.1f} ms ({loaded['tree']:4.0f})  ratio {cpu['tree'] / cpu['base']:.2f}"
        )
    print(f"module_imports_cpu_ms_base: {totals['base']:.1f}")
    print(f"module_imports_cpu_ms_tree: {totals['tree']:.1f}")
    print(f"module_imports_ratio: {totals['tree'] / totals['base']:.2f}")


if __name__ == "__main__":
    main()
