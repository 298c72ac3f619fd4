"""Installing the plugin as ``flannel`` in a CNI bin directory.

The installed file is a small launcher with an absolute shebang to this interpreter. It runs
Python with ``-I -S``: no site initialisation (the venv's .pth files alone cost more than the
plugin) and no user or environment paths, which a container runtime's environment could
otherwise inject. The package directory is put on sys.path explicitly instead, and the launcher
exits with ``os._exit`` once the output is flushed, skipping interpreter teardown.
"""

from __future__ import annotations

import os
import sys

import pyflannel_runtime
from pyflannel_runtime.fsutil import write_atomic

PLUGIN_NAME = "flannel"
_LAUNCHER_MODE = 0o755


def isolated_prelude(package_root: str | None = None) -> str:
    """The first lines the launcher runs under ``python -IS``: they make this package importable
    (tests that run code as the launcher does start with them too)."""
    root = package_root or os.path.dirname(
        os.path.dirname(os.path.abspath(pyflannel_runtime.__file__))
    )
    return f"import sys\nsys.path.insert(0, {root!r})\n"


def launcher_script(python: str | None = None, package_root: str | None = None) -> str:
    interpreter = python or sys.executable
    return (
        f"#!{interpreter} -IS\n"
        '"""flannel CNI plugin (pyflannel); installed by pyflannel_runtime.cni.install."""\n'
        + isolated_prelude(package_root)
        + "import os\n"
        "from pyflannel_runtime.cni.plugin import main\n"
        "status = main()\n"
        "sys.stdout.flush()\n"
        "sys.stderr.flush()\n"
        "os._exit(status)  # skips interpreter teardown: nothing is left to clean up\n"
    )


def install_plugin(bin_dir: str) -> str:
    """Write the ``flannel`` launcher into ``bin_dir`` atomically; returns its path."""
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, PLUGIN_NAME)
    write_atomic(path, launcher_script().encode(), _LAUNCHER_MODE)
    return path
