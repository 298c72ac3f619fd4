"""The collection's plugins reach the runtime through one door.

The rule, by where a plugin runs:
- On a node (plugins/modules, plugins/module_utils), in the agent's virtualenv: only
  ``pyflannel_runtime.ops`` (the node API: settings and lease-store factories, checks, repairs,
  installs) and the package root (``PyflannelError``, the one type a module catches). The node's
  stores, datapath, agent and CNI code stay behind ops, free to change.
- On the controller (plugins/action, plugins/filter, plugin_utils), in Ansible's environment:
  the same, plus the controller package (``pyflannel_controller``: the cluster model, render,
  the inventory check, the wheelhouse), the pure layers below everything (``wire``, the
  ``backend_spec``), and the few I/O-free helpers a filter formats or computes with:
  connectivity's summary views, fsutil's bounded read. Never the node's stores, netlink,
  agent, CNI or IPAM code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PACKAGE = "pyflannel_runtime"

# The package root counts as itself alone; the others with everything below them.
NODE_DOOR = (PACKAGE, f"{PACKAGE}.ops")
CONTROLLER_DOOR = (
    *NODE_DOOR,
    f"{PACKAGE}.wire",
    f"{PACKAGE}.backend_spec",
    f"{PACKAGE}.connectivity.causes",
    f"{PACKAGE}.connectivity.scenarios",
    f"{PACKAGE}.connectivity.summary",
    f"{PACKAGE}.fsutil",
)
NODE_SIDE = ("modules", "module_utils")
CONTROLLER_SIDE = ("action", "filter", "plugin_utils")


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def runtime_imports(source: str) -> Iterator[str]:
    """Every pyflannel_runtime module the source imports, at module level or in a function;
    ``from pyflannel_runtime import ops`` counts as ``pyflannel_runtime.ops``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [
                f"{node.module}.{alias.name}"
                if _is_module(f"{node.module}.{alias.name}")
                else node.module
                for alias in node.names
            ]
        else:
            continue
        yield from (name for name in names if name.split(".")[0] == PACKAGE)


def outside_the_door(source: str, door: tuple[str, ...]) -> list[str]:
    return sorted(
        {
            name
            for name in runtime_imports(source)
            if name != PACKAGE
            and not any(
                name == allowed or name.startswith(f"{allowed}.")
                for allowed in door
                if allowed != PACKAGE
            )
        }
    )


def plugin_files() -> list[tuple[Path, tuple[str, ...]]]:
    found = []
    for side, door in ((NODE_SIDE, NODE_DOOR), (CONTROLLER_SIDE, CONTROLLER_DOOR)):
        for kind in side:
            found += [(path, door) for path in sorted((PLUGINS / kind).glob("*.py"))]
    return found


def test_every_plugin_directory_has_a_side() -> None:
    sides = {path.name for path in PLUGINS.iterdir() if path.is_dir() and path.name[0] not in "._"}
    assert sides - {"doc_fragments"} == {*NODE_SIDE, *CONTROLLER_SIDE}


@pytest.mark.parametrize(
    ("path", "door"),
    plugin_files(),
    ids=lambda v: str(v.relative_to(PLUGINS)) if isinstance(v, Path) else "",
)
def test_plugins_reach_the_runtime_through_the_door(path: Path, door: tuple[str, ...]) -> None:
    assert outside_the_door(path.read_text(), door) == []


def test_an_import_past_the_door_is_named() -> None:
    source = (
        "from pyflannel_runtime import PyflannelError\n"
        "from pyflannel_runtime import subnet\n"
        "def main():\n"
        "    from pyflannel_runtime.ops.agent_settings import lease_store\n"
        "    from pyflannel_runtime.subnet.etcd.etcd import EtcdError\n"
        "    import pyflannel_runtime.agent.stores\n"
        "    from pyflannel_runtime.wire.netconf import ConfigError\n"
    )
    assert outside_the_door(source, NODE_DOOR) == [
        "pyflannel_runtime.agent.stores",
        "pyflannel_runtime.subnet",
        "pyflannel_runtime.subnet.etcd.etcd",
        "pyflannel_runtime.wire.netconf",
    ]
    assert outside_the_door(source, CONTROLLER_DOOR) == [
        "pyflannel_runtime.agent.stores",
        "pyflannel_runtime.subnet",
        "pyflannel_runtime.subnet.etcd.etcd",
    ]
