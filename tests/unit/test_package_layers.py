"""The packages stand in layers, and every rule docs/architecture.md states about them holds.

A node runs pyflannel_runtime alone; pyflannel_controller (the cluster model, the renderer, the
inventory check, the wheelhouse) runs on the controller, on top of the runtime, and its code
never reaches a node; the lab (pyflannel_lab) is development tooling on top of both, which
nothing installed imports. Every import counts, as in test_import_graph.py: module level, inside
functions, and under TYPE_CHECKING.

Each rule is a function of an import graph, so that a test can hand it a graph that breaks the
rule and see it named; docs/architecture.md names the test that guards each rule, and its figure
is checked against the layers below and the package tree on disk.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

from .test_import_graph import import_graph

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "pyflannel_runtime"
CONTROLLER = "pyflannel_controller"
LAB = "pyflannel_lab"
# A top-level package's own name stands for its ``__init__`` alone, so every module must be
# placed; the lab is one unit, its own name standing for all of it.
TOP_PACKAGES = (RUNTIME, CONTROLLER)

# Lowest first. A module may import its own unit (the longest name that holds it), and the
# layers below its own; never a layer above, and never a neighbour: another unit of its layer.
NODE_LAYERS: tuple[tuple[str, ...], ...] = (
    (RUNTIME,),  # the package's constants and the error base
    (f"{RUNTIME}.gojson",),  # Go's encoding/json
    (f"{RUNTIME}.fsutil", f"{RUNTIME}.memory"),  # atomic files; malloc arenas
    (f"{RUNTIME}.wire",),  # flannel's wire formats
    (f"{RUNTIME}.backend_spec",),  # what each backend is, without running it
    # the kernel: netlink messages, interface selection, masquerade and forward rules
    (f"{RUNTIME}.netlink", f"{RUNTIME}.netdev", f"{RUNTIME}.firewall"),
    # the lease stores, the backends and the CNI plugin, each in sub-layers of its own
    (f"{RUNTIME}.subnet", f"{RUNTIME}.backend", f"{RUNTIME}.cni"),
    (f"{RUNTIME}.ipam",),  # a node's pod addresses, through the CNI plugin's store
    (f"{RUNTIME}.connectivity",),  # the connectivity suite
    (f"{RUNTIME}.agent",),  # pyflanneld
    (f"{RUNTIME}.ops",),  # the API the command line and the collection's modules share
    (f"{RUNTIME}.cli",),  # pyflannel
)
CONTROLLER_LAYERS: tuple[tuple[str, ...], ...] = (
    (CONTROLLER, f"{CONTROLLER}.model", f"{CONTROLLER}.rolling"),
    (f"{CONTROLLER}.render", f"{CONTROLLER}.inventory", f"{CONTROLLER}.wheelhouse"),
    (f"{CONTROLLER}.cli",),
    (f"{CONTROLLER}.__main__",),
)
LAB_LAYERS: tuple[tuple[str, ...], ...] = ((LAB,),)
LAYERS = NODE_LAYERS + CONTROLLER_LAYERS + LAB_LAYERS
# Inside a unit, the same rule again: its own modules (the package's name) lowest.
SUBLAYERS: dict[str, tuple[tuple[str, ...], ...]] = {
    f"{RUNTIME}.subnet": (
        (f"{RUNTIME}.subnet",),  # the manager interface, allocation, the watcher
        (f"{RUNTIME}.subnet.etcd", f"{RUNTIME}.subnet.kube"),  # one package per store
    ),
    f"{RUNTIME}.backend": (
        (f"{RUNTIME}.backend",),  # base, drift, peers, the programmer, HostDatapath
        (f"{RUNTIME}.backend.vxlan", f"{RUNTIME}.backend.hostgw", f"{RUNTIME}.backend.udp"),
        (f"{RUNTIME}.backend.registry",),  # builds any backend by name
    ),
}

STORES = (f"{RUNTIME}.subnet",)
DATAPATH = tuple(f"{RUNTIME}.{name}" for name in ("backend", "netlink", "netdev", "firewall"))
COMMAND_LINE = f"{RUNTIME}.cli"
CNI_PLUGIN = f"{RUNTIME}.cni.plugin"
CLUSTER_MODEL = f"{CONTROLLER}.model"
BACKEND_SPEC = f"{RUNTIME}.backend_spec"
# What the backend spec may import: the wire formats, the Go-JSON core and the package root.
PURE = (BACKEND_SPEC, f"{RUNTIME}.wire", f"{RUNTIME}.gojson")


def within(module: str, names: Iterable[str]) -> bool:
    """The module is one of `names` or lies in one of those packages."""
    return any(module == name or module.startswith(name + ".") for name in names)


def _longest(
    module: str, layers: tuple[tuple[str, ...], ...], exact: Iterable[str]
) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for index, names in enumerate(layers):
        for name in names:
            holds = module.startswith(name + ".") and name not in exact
            if (module == name or holds) and (best is None or len(name) > len(best[1])):
                best = (index, name)
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to one in {__name__}")
    return best


@dataclass(frozen=True)
class Place:
    """Where a module stands: its layer and unit, and inside a unit with sub-layers its
    sub-layer and sub-unit (else 0 and the unit)."""

    layer: int
    unit: str
    sublayer: int
    subunit: str


def place(module: str) -> Place:
    layer, unit = _longest(module, LAYERS, TOP_PACKAGES)
    if unit not in SUBLAYERS:
        return Place(layer, unit, 0, unit)
    sublayer, subunit = _longest(module, SUBLAYERS[unit], ())
    return Place(layer, unit, sublayer, subunit)


def layered_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Every import of a higher layer or of a neighbour, inside a unit's sub-layers too."""
    found = []
    for module, imports in graph.items():
        here = place(module)
        for imported in imports:
            there = place(imported)
            if there.unit == here.unit:
                ours, theirs = (here.sublayer, here.subunit), (there.sublayer, there.subunit)
            else:
                ours, theirs = (here.layer, here.unit), (there.layer, there.unit)
            if theirs[0] > ours[0]:
                found.append(f"{module} ({ours[1]}) imports {imported} ({theirs[1]}), above it")
            elif theirs[0] == ours[0] and theirs[1] != ours[1]:
                found.append(f"{module} ({ours[1]}) imports {imported} ({theirs[1]}), a neighbour")
    return sorted(found)


def closure(graph: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """The modules `start` loads, itself included."""
    seen, todo = {start}, [start]
    while todo:
        for imported in graph.get(todo.pop(), ()):
            if imported not in seen:
                seen.add(imported)
                todo.append(imported)
    return seen


def inside(*names: str) -> Callable[[str], bool]:
    return lambda module: within(module, names)


def imports_of(
    graph: Mapping[str, Iterable[str]],
    importer: Callable[[str], bool],
    banned: Callable[[str], bool],
) -> list[str]:
    """Each import, by a module `importer` takes, of a module `banned` takes."""
    return sorted(
        f"{module} imports {imported}"
        for module, imports in graph.items()
        if importer(module)
        for imported in imports
        if banned(imported)
    )


def loads_of(
    graph: Mapping[str, Iterable[str]], loader: Callable[[str], bool], banned: Callable[[str], bool]
) -> list[str]:
    """Each module `banned` takes that a module `loader` takes loads, however far down."""
    return sorted(
        f"{module} loads {loaded}"
        for module in graph
        if loader(module)
        for loaded in closure(graph, module)
        if banned(loaded)
    )


def plugin_imports() -> dict[str, set[str]]:
    """The collection's plugins (installed with the collection) and what each imports."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        names = found.setdefault(f"plugins/{path.relative_to(ROOT / 'plugins')}", set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return found


STORE_OR_DATAPATH = inside(*STORES, *DATAPATH)
RULES: dict[str, Callable[[Mapping[str, Iterable[str]]], list[str]]] = {
    "layers": layered_imports,
    "stores": lambda graph: loads_of(graph, inside(*STORES), inside(*DATAPATH)),
    "cni": lambda graph: loads_of(graph, lambda m: m == CNI_PLUGIN, STORE_OR_DATAPATH),
    "cli importers": lambda graph: imports_of(
        graph,
        lambda m: within(m, (RUNTIME,)) and not within(m, (COMMAND_LINE,)),
        inside(COMMAND_LINE),
    ),
    "cli door": lambda graph: imports_of(graph, inside(COMMAND_LINE), STORE_OR_DATAPATH),
    "node": lambda graph: imports_of(graph, inside(RUNTIME), inside(CONTROLLER, LAB)),
    "lab": lambda graph: imports_of(graph, lambda m: not within(m, (LAB,)), inside(LAB)),
    "model": lambda graph: loads_of(graph, inside(CLUSTER_MODEL), STORE_OR_DATAPATH),
    "spec": lambda graph: loads_of(
        graph, inside(BACKEND_SPEC), lambda m: m != RUNTIME and not within(m, PURE)
    ),
}


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        place(module)


def test_no_package_imports_a_higher_one_or_a_neighbour() -> None:
    assert layered_imports(import_graph()) == []


def test_a_store_never_imports_a_datapath() -> None:
    assert RULES["stores"](import_graph()) == []


def test_the_cni_plugin_imports_no_store_and_no_datapath() -> None:
    graph = import_graph()
    assert f"{RUNTIME}.cni.commands" in closure(graph, CNI_PLUGIN)  # the closure is walked
    assert RULES["cni"](graph) == []


def test_nothing_in_the_runtime_imports_the_command_line() -> None:
    assert RULES["cli importers"](import_graph()) == []


def test_the_command_line_reaches_stores_and_datapaths_through_ops() -> None:
    assert RULES["cli door"](import_graph()) == []


def test_node_code_never_imports_controller_code() -> None:
    assert RULES["node"](import_graph()) == []


def test_nothing_installed_imports_the_lab() -> None:
    """Neither package a wheel installs, nor the collection's plugins."""
    graph = {**import_graph(), **plugin_imports()}
    assert any(name.startswith("plugins/modules/") for name in graph)
    assert RULES["lab"](graph) == []


def test_the_cluster_model_loads_no_backend() -> None:
    assert RULES["model"](import_graph()) == []


def test_the_backend_spec_is_pure() -> None:
    assert RULES["spec"](import_graph()) == []


# Imports that break the layers, and how: one that climbs is named while the same import the
# other way is fine; one of a neighbour is named either way.
ABOVE, NEIGHBOUR = "above it", "a neighbour"
BREACHES = [
    (f"{RUNTIME}.wire.lease", f"{RUNTIME}.backend.vxlan.vxlan", ABOVE),
    (f"{RUNTIME}.backend_spec.specs", f"{RUNTIME}.backend.registry", ABOVE),
    (f"{RUNTIME}.subnet.kube.kube", f"{RUNTIME}.agent.main", ABOVE),
    (f"{RUNTIME}.cni.commands", f"{RUNTIME}.ipam.node", ABOVE),
    (f"{RUNTIME}.ipam.node", f"{RUNTIME}.connectivity.probes", ABOVE),
    (f"{RUNTIME}.agent.main", f"{RUNTIME}.ops.verify", ABOVE),
    (f"{RUNTIME}.ops.files", f"{CONTROLLER}.render.render", ABOVE),
    (f"{CONTROLLER}.model.cluster", f"{CONTROLLER}.render.render", ABOVE),
    (f"{CONTROLLER}.cli", f"{LAB}.hosts", ABOVE),
    # inside a unit: what the backends share never imports a backend, nor one the registry
    (f"{RUNTIME}.backend.programmer", f"{RUNTIME}.backend.vxlan.peers", ABOVE),
    (f"{RUNTIME}.backend.vxlan.vxlan", f"{RUNTIME}.backend.registry", ABOVE),
    (f"{RUNTIME}.subnet.watcher", f"{RUNTIME}.subnet.kube.nodes", ABOVE),
    # the kernel's packages; the stores, the backends and the CNI plugin; two backends, two
    # stores; two of the controller's middle layer
    (f"{RUNTIME}.firewall.rules", f"{RUNTIME}.netdev.types", NEIGHBOUR),
    (f"{RUNTIME}.subnet.etcd.etcd", f"{RUNTIME}.backend.peers", NEIGHBOUR),
    (f"{RUNTIME}.cni.plugin", f"{RUNTIME}.subnet.manager", NEIGHBOUR),
    (f"{RUNTIME}.backend.udp.udp", f"{RUNTIME}.backend.vxlan.device", NEIGHBOUR),
    (f"{RUNTIME}.subnet.kube.kube", f"{RUNTIME}.subnet.etcd.client", NEIGHBOUR),
    (f"{CONTROLLER}.inventory", f"{CONTROLLER}.render.render", NEIGHBOUR),
]
# A graph that breaks each of the other rules, as the rule's checker must name it.
BROKEN = [
    # a store reaching a datapath, directly or through a module below it
    ("stores", {f"{RUNTIME}.subnet.etcd.etcd": {f"{RUNTIME}.netlink.netns"}}),
    ("stores", {f"{RUNTIME}.subnet.kube.kube": {f"{RUNTIME}.wire.lease"}, f"{RUNTIME}.wire.lease": {f"{RUNTIME}.firewall.rules"}}),
    # the CNI plugin loading a store or a backend, however far down
    ("cni", {CNI_PLUGIN: {f"{RUNTIME}.cni.commands"}, f"{RUNTIME}.cni.commands": {f"{RUNTIME}.subnet.etcd.client"}}),
    ("cni", {CNI_PLUGIN: {f"{RUNTIME}.backend.registry"}}),
    # the command line imported from below it
    ("cli importers", {f"{RUNTIME}.ops.verify": {f"{RUNTIME}.cli.status"}}),
    ("cli importers", {f"{RUNTIME}.agent.main": {f"{RUNTIME}.cli.main"}}),
    # the command line past ops
    ("cli door", {f"{RUNTIME}.cli.main": {f"{RUNTIME}.subnet.etcd.etcd"}}),
    ("cli door", {f"{RUNTIME}.cli.status": {f"{RUNTIME}.netlink.dump"}}),
    # node code reaching the controller or the lab
    ("node", {f"{RUNTIME}.ops.files": {f"{CONTROLLER}.render.render"}}),
    ("node", {f"{RUNTIME}.agent.main": {f"{LAB}.netns_lab"}}),
    # something installed importing the lab
    ("lab", {f"{CONTROLLER}.wheelhouse": {f"{LAB}.paths"}}),
    ("lab", {"plugins/action/preflight.py": {f"{LAB}.hosts"}}),
    # the cluster model loading a backend or a store, however far down
    ("model", {f"{CONTROLLER}.model.cluster_fields": {f"{RUNTIME}.backend.vxlan.offload_verdict"}}),
    ("model", {f"{CONTROLLER}.model.cluster": {f"{RUNTIME}.backend_spec.specs"}, f"{RUNTIME}.backend_spec.specs": {f"{RUNTIME}.subnet.allocation"}}),
    # the backend spec doing I/O
    ("spec", {f"{RUNTIME}.backend_spec.tx_offload": {f"{RUNTIME}.fsutil"}}),
]  # fmt: skip


@pytest.mark.parametrize(("module", "imported", "how"), BREACHES)
def test_an_import_across_the_layers_is_named(module: str, imported: str, how: str) -> None:
    (problem,) = layered_imports({module: {imported}})
    assert problem.startswith(f"{module} (") and problem.endswith(f", {how}")
    backwards = layered_imports({imported: {module}})
    assert backwards == [] if how == ABOVE else backwards[0].endswith(f", {NEIGHBOUR}")


@pytest.mark.parametrize(
    ("rule", "graph"), BROKEN, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BROKEN)]
)
def test_each_rule_names_what_breaks_it(rule: str, graph: dict[str, set[str]]) -> None:
    assert RULES[rule](graph) != []


def test_an_unplaced_module_is_named() -> None:
    with pytest.raises(KeyError, match=re.escape(f"{RUNTIME}.newpackage.x is in no layer")):
        place(f"{RUNTIME}.newpackage.x")
    with pytest.raises(KeyError, match=re.escape(f"{CONTROLLER}.newmodule is in no layer")):
        place(f"{CONTROLLER}.newmodule")


# --- docs/architecture.md's figure: the layers as drawn, and the package tree as it is --------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# A line that starts with one of these words opens the figure's part of that top package.
SECTIONS = {"NODE": RUNTIME, "CONTROLLER": CONTROLLER, "LAB": LAB}
# ``x/`` a package, ``x.py`` a module, ``x/*.py`` a package's own modules, relative to the
# top package of the part they stand in.
PATH = re.compile(r"(?<![\w./*])((?:\w+/)*(?:\w+/|\w+\.py|\*\.py))(?![\w/])")


def figure(text: str) -> list[str]:
    """The lines of the document's first code block."""
    return text.split("```", 2)[1].split("\n")[1:]


def figure_paths(lines: list[str]) -> dict[tuple[str, str], int]:
    """(top package, path) -> the first line that names it, below its part's opening line."""
    found: dict[tuple[str, str], int] = {}
    top = ""
    for number, line in enumerate(lines):
        words = line.split()
        if words and words[0] in SECTIONS:
            top = SECTIONS[words[0]]
        for match in PATH.finditer(line) if top else ():
            found.setdefault((top, match.group(1)), number)
    return found


def path_of(name: str, own: bool = False) -> tuple[str, str]:
    """(top package, path) as the figure names a layer's name."""
    top = name.split(".")[0]
    if name == top:
        return top, "__init__.py" if top in TOP_PACKAGES else f"{top}/"
    relative = name[len(top) + 1 :].replace(".", "/")
    if own:
        return top, f"{relative}/*.py"
    return top, f"{relative}/" if (ROOT / top / relative).is_dir() else f"{relative}.py"


def figure_problems(lines: list[str]) -> list[str]:
    """Where the figure does not draw the layers: a layer's names on one line, each layer on
    a line above the one below it; inside a unit with sub-layers (its own modules drawn as
    ``x/*.py``), the same."""
    drawn = figure_paths(lines)
    problems = []

    def check(stack: tuple[tuple[str, ...], ...], unit: str | None) -> None:
        rows = []
        for names in stack:
            at = set()
            for name in names:
                path = path_of(name, own=name == unit)
                if path in drawn:
                    at.add(drawn[path])
                else:
                    problems.append(f"the figure does not name {path[1]} ({name})")
            if len(at) > 1:
                problems.append(f"the figure draws {', '.join(names)} on more than one line")
            rows += [(min(at), names)] if at else []
        for (low, low_names), (high, high_names) in pairwise(rows):
            if high >= low:
                problems.append(
                    f"the figure draws {', '.join(high_names)} below {', '.join(low_names)}"
                )

    for part in (NODE_LAYERS, CONTROLLER_LAYERS, LAB_LAYERS):
        check(part, None)
    for unit, stack in SUBLAYERS.items():
        check(stack, unit)
    return problems


def packages_on_disk() -> list[tuple[str, str]]:
    """(top package, path) of every package below the three top packages."""
    return [
        (top, f"{init.parent.relative_to(ROOT / top)}/")
        for top in SECTIONS.values()
        for init in sorted((ROOT / top).rglob("*/__init__.py"))
    ]


def test_the_figure_draws_the_layers() -> None:
    assert figure_problems(figure(ARCHITECTURE.read_text())) == []


def test_the_figure_is_the_package_tree() -> None:
    drawn = figure_paths(figure(ARCHITECTURE.read_text()))
    assert [f"{top}/{path}" for top, path in packages_on_disk() if (top, path) not in drawn] == []
    absent = [
        f"{top}/{path}"
        for top, path in drawn
        if path != f"{top}/" and not (ROOT / top / path.removesuffix("*.py")).exists()
    ]
    assert absent == []


def test_a_figure_out_of_order_or_short_of_a_package_is_named() -> None:
    lines = figure(ARCHITECTURE.read_text())
    ops, agent = (
        next(i for i, line in enumerate(lines) if re.search(rf"(?<![\w/]){name}/", line))
        for name in ("ops", "agent")
    )
    swapped = list(lines)
    swapped[ops], swapped[agent] = lines[agent], lines[ops]
    assert f"the figure draws {RUNTIME}.ops below {RUNTIME}.agent" in figure_problems(swapped)
    dropped = [line.replace("backend/hostgw/", "") for line in lines]
    assert (
        f"the figure does not name backend/hostgw/ ({RUNTIME}.backend.hostgw)"
        in figure_problems(dropped)
    )
