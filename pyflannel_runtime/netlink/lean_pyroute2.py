"""pyroute2 without its package's start-up imports, for the long-running agent (and for any
process that opens its handles through `netlink.netns.iproute`).

`pyroute2/__init__.py` imports every protocol family the library speaks (NDB with sqlite3,
IPDB, ipset, IPVS, nl80211, WireGuard, devlink, plan9, ...), which costs the agent about 6 MiB
of resident memory for code it never runs: it uses `IPRoute`, `AsyncIPRoute` and the rtnetlink
message classes alone. `defer_package_imports` puts a package object for pyroute2 in
`sys.modules` whose submodules still load from the installed package's directory, so
`from pyroute2.netlink.exceptions import NetlinkError` works unchanged. `IPRoute` and
`AsyncIPRoute` come from `pyroute2.iproute` (the platform's own, as the package picks them);
the first use of any other top-level name runs the real `__init__` into that same object, so
other code in the process sees the whole package as before.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

# The top-level names the runtime imports from pyroute2, and where they are defined.
LEAN_NAMES = {"IPRoute": "pyroute2.iproute", "AsyncIPRoute": "pyroute2.iproute"}
PACKAGE = "pyroute2"


def defer_package_imports() -> None:
    """Install the lean package object, unless pyroute2 is imported already (or missing)."""
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    package = types.ModuleType(PACKAGE)
    package.__spec__ = spec
    package.__file__ = spec.origin
    package.__path__ = list(spec.submodule_search_locations)
    package.__loader__ = spec.loader
    package.__package__ = PACKAGE
    whole_package = threading.RLock()
    whole_package_started = False

    def load_name(name: str) -> Any:
        nonlocal whole_package_started
        home = LEAN_NAMES.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
        elif name.startswith("__"):
            # Probes for optional dunders (`__all__`, `__wrapped__`, ...) are not a use.
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
        elif _is_submodule(package, name):
            # `from pyroute2 import config` in pyroute2's own modules: the submodule alone.
            value = importlib.import_module(f"{PACKAGE}.{name}")
        else:
            with whole_package:
                # Once: a name asked for while the real __init__ runs, before it defines the
                # name, is missing, as it would be without this module.
                if not whole_package_started:
                    whole_package_started = True
                    assert spec.loader is not None
                    spec.loader.exec_module(package)
            if name not in package.__dict__:
                raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
            value = package.__dict__[name]
        setattr(package, name, value)
        return value

    package.__getattr__ = load_name  # type: ignore[method-assign]
    # Atomic: of two threads that open their first handles at once, one object wins.
    sys.modules.setdefault(PACKAGE, package)


def _is_submodule(package: types.ModuleType, name: str) -> bool:
    return (
        importlib.machinery.PathFinder.find_spec(f"{PACKAGE}.{name}", package.__path__) is not None
    )
