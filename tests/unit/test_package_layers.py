"""The packages stand in layers, and no package imports one above it (issue 24).

A node runs pyflannel_runtime alone; pyflannel_controller (the cluster model, the renderer, the
inventory check, the wheelhouse, the lab) runs on the controller, on top of the runtime, and its
code never reaches a node (docs/architecture.md). Every import counts, as in
test_import_graph.py: module level, inside functions, and under TYPE_CHECKING.
"""

from __future__ import annotations

import re

import pytest

from .test_import_graph import import_graph

# Lowest first; a module may import its own layer and the ones below it. A name stands for the
# module or package of that name and everything under it; the longest name that matches wins.
NODE_LAYERS: tuple[tuple[str, ...], ...] = (
    # the package's constants, the Go-JSON core, atomic file writes
    (
        "pyflannel_runtime",
        "pyflannel_runtime.gojson",
        "pyflannel_runtime.fsutil",
        "pyflannel_runtime.memory",
    ),
    # flannel's wire formats
    ("pyflannel_runtime.wire",),
    # what each backend is, without running it
    ("pyflannel_runtime.backend_spec",),
    # the lease stores and the datapath
    (
        "pyflannel_runtime.subnet",
        "pyflannel_runtime.backend",
        "pyflannel_runtime.netlink",
        "pyflannel_runtime.netdev",
        "pyflannel_runtime.firewall",
        "pyflannel_runtime.cni",
        "pyflannel_runtime.ipam",
        "pyflannel_runtime.connectivity",
    ),
    # the agent, and the API the command line and the collection's modules share
    ("pyflannel_runtime.agent", "pyflannel_runtime.ops"),
    # the command lines
    ("pyflannel_runtime.cli",),
)
CONTROLLER_LAYERS: tuple[tuple[str, ...], ...] = (
    ("pyflannel_controller", "pyflannel_controller.model", "pyflannel_controller.rolling"),
    (
        "pyflannel_controller.render",
        "pyflannel_controller.inventory",
        "pyflannel_controller.wheelhouse",
    ),
    ("pyflannel_controller.cli", "pyflannel_controller.__main__"),
    ("pyflannel_lab",),
)
LAYERS = NODE_LAYERS + CONTROLLER_LAYERS
TOP_PACKAGES = ("pyflannel_runtime", "pyflannel_controller")


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    """The layer of the longest name that is the module or a package holding it. A top-level
    package's own name stands for its ``__init__`` alone: every module must be placed."""
    best: tuple[int, int] | None = None
    for index, names in enumerate(layers):
        for name in names:
            holds = module.startswith(name + ".") and name not in TOP_PACKAGES
            if (module == name or holds) and (best is None or len(name) > best[0]):
                best = (len(name), index)
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to one in {__name__}")
    return best[1]


def upward_imports(
    graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS
) -> list[str]:
    return sorted(
        f"{module} (layer {layer_of(module, layers)}) imports {imported} "
        f"(layer {layer_of(imported, layers)})"
        for module, imports in graph.items()
        for imported in imports
        if layer_of(imported, layers) > layer_of(module, layers)
    )


def test_every_module_has_a_layer() -> None:
    for module in import_graph():
        layer_of(module)


def test_no_package_imports_a_higher_one() -> None:
    assert upward_imports(import_graph()) == []


def test_node_code_never_imports_controller_code() -> None:
    leaks = [
        f"{module} imports {imported}"
        for module, imports in import_graph().items()
        if module.split(".")[0] == "pyflannel_runtime"
        for imported in imports
        if imported.split(".")[0] == "pyflannel_controller"
    ]
    assert leaks == []


def test_the_layers_are_the_documented_ones() -> None:
    """Wire formats < backend spec < stores and datapath < agent/ops < command lines, and the
    whole controller above the whole node."""
    order = [
        "pyflannel_runtime.wire.lease",
        "pyflannel_runtime.backend_spec.specs",
        "pyflannel_runtime.subnet.etcd.etcd",
        "pyflannel_runtime.ops.verify",
        "pyflannel_runtime.cli.main",
        "pyflannel_controller.model.cluster",
        "pyflannel_lab.hosts",
    ]
    layers = [layer_of(module) for module in order]
    assert layers == sorted(layers) and len(set(layers)) == len(layers)
    assert max(layer_of(m) for m in import_graph() if m.startswith("pyflannel_runtime")) < min(
        layer_of(m) for m in import_graph() if m.startswith("pyflannel_controller")
    )


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("pyflannel_runtime.wire.lease", "pyflannel_runtime.backend.vxlan.vxlan"),  # the old leak
        ("pyflannel_runtime.backend_spec.specs", "pyflannel_runtime.backend.registry"),
        ("pyflannel_runtime.subnet.kube.kube", "pyflannel_runtime.agent.main"),
        ("pyflannel_runtime.ops.files", "pyflannel_controller.render.render"),
    ],
)
def test_an_upward_import_is_found(module: str, imported: str) -> None:
    assert upward_imports({module: {imported}}) != []
    assert upward_imports({imported: {module}}) == []


def test_an_unplaced_module_is_named() -> None:
    with pytest.raises(KeyError, match=re.escape("pyflannel_runtime.newpackage.x is in no layer")):
        layer_of("pyflannel_runtime.newpackage.x")
