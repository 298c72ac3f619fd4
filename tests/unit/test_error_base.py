"""Every error the runtime (and the controller package, and the lab) raises to a caller derives from
pyflannel_runtime.PyflannelError, so an adapter (a collection module, a command line) catches
one type. Private exceptions (a leading
underscore) are control flow inside one module and never reach a caller."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable
from types import ModuleType

import pyflannel_controller
import pyflannel_lab
import pyflannel_runtime
from pyflannel_runtime import PyflannelError


def runtime_modules() -> list[ModuleType]:
    return [
        importlib.import_module(info.name)
        for package in (pyflannel_runtime, pyflannel_controller, pyflannel_lab)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
        if not info.name.endswith(".__main__")  # runs its command line when imported
    ]


def errors_outside_the_base(modules: Iterable[ModuleType]) -> list[str]:
    """The public exception classes the modules define that do not derive from the base."""
    return sorted(
        f"{module.__name__}.{name}"
        for module in modules
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
        and not issubclass(value, PyflannelError)
    )


def test_every_public_runtime_error_derives_from_the_base() -> None:
    modules = runtime_modules()
    assert len(modules) > 100  # the walk reached the whole package
    assert any(m.__name__.startswith("pyflannel_lab.") for m in modules)
    assert errors_outside_the_base(modules) == []


def test_the_walk_names_an_error_outside_the_base() -> None:
    module = ModuleType("pyflannel_runtime.example")
    exec(
        "from pyflannel_runtime import PyflannelError\n"
        "class Stray(ValueError): pass\n"
        "class Kept(PyflannelError, ValueError): pass\n"
        "class _Private(Exception): pass\n"
        "Imported = KeyError\n",
        vars(module),
    )
    assert errors_outside_the_base([module]) == ["pyflannel_runtime.example.Stray"]


def test_errors_keep_the_builtin_bases_callers_catch() -> None:
    from pyflannel_runtime.fsutil import PathError
    from pyflannel_runtime.subnet.kube.kube import KubeSubnetError
    from pyflannel_runtime.wire.netconf import ConfigError

    assert issubclass(ConfigError, ValueError)
    assert issubclass(PathError, OSError)
    assert issubclass(KubeSubnetError, RuntimeError)
