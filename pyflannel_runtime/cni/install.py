"""Installing the plugin as ``flannel`` in a CNI bin directory.

The installed file is a small launcher with an absolute shebang to this interpreter. It runs
Python with ``-I -S``: no site initialisation (the venv's .pth files alone cost more than the
plugin) and no user or environment paths, which a container runtime's environment could
otherwise inject. The package directory is put on sys.path explicitly instead, and the launcher
exits with ``posix._exit`` (``os._exit`` without importing ``os``) once the output is flushed,
skipping interpreter teardown.

The reference plugins the launcher delegates to are linked into the bin directory only where
no plugin of that name is; the links made are recorded (``LinkRecord``), so that a reset
removes exactly those and never a plugin someone else installed there.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyflannel_runtime
from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import read_small_file, write_atomic

PLUGIN_NAME = "flannel"
_LAUNCHER_MODE = 0o755
_LAUNCHER_DOC = '"""flannel CNI plugin (pyflannel); installed by pyflannel_runtime.cni.install."""'
# Where the collection's cni_plugin module records the links it made.
DEFAULT_LINK_RECORD = "/var/lib/pyflannel/cni-plugins.json"
_RECORD_LIMIT = 64 * 1024


def isolated_prelude(package_root: str | None = None) -> str:
    """The first lines the launcher runs under ``python -IS``: they make this package importable
    (tests that run code as the launcher does start with them too)."""
    root = package_root or os.path.dirname(
        os.path.dirname(os.path.abspath(pyflannel_runtime.__file__))
    )
    return f"import sys\nsys.path.insert(0, {root!r})\n"


def launcher_script(python: str | None = None, package_root: str | None = None) -> str:
    interpreter = python or sys.executable
    head = f"#!{interpreter} -IS\n{_LAUNCHER_DOC}\n"
    return (
        head + isolated_prelude(package_root) + "import posix\n"
        "from pyflannel_runtime.cni.plugin import main\n"
        "status = main()\n"
        "sys.stdout.flush()\n"
        "sys.stderr.flush()\n"
        "posix._exit(status)  # skips interpreter teardown: nothing is left to clean up\n"
    )


def install_plugin(bin_dir: str) -> str:
    """Write the ``flannel`` launcher into ``bin_dir`` atomically; returns its path."""
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, PLUGIN_NAME)
    write_atomic(path, launcher_script().encode(), _LAUNCHER_MODE)
    return path


def is_launcher(path: str) -> bool:
    """``path`` is a launcher written here (for any interpreter), not some other ``flannel``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return False
    lines = head.decode(errors="replace").splitlines()
    return len(lines) > 1 and lines[0].startswith("#!") and lines[1] == _LAUNCHER_DOC


@dataclass(frozen=True)
class LinkRecord:
    """The links into a CNI bin directory that pyflannel made: link path -> its target."""

    links: Mapping[str, str]

    @classmethod
    def load(cls, path: str) -> LinkRecord:
        """The record at ``path``; empty when there is none. Raises ValueError (naming the
        file) when it is not one."""
        try:
            data = read_small_file(path, _RECORD_LIMIT)
        except OSError as err:
            if err.errno == errno.ENOENT:
                return cls({})
            raise ValueError(str(err)) from None
        try:
            links = json.loads(data)["links"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} is no record of CNI plugin links: {err}") from None
        if not isinstance(links, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in links.items()
        ):
            raise ValueError(f"{path} is no record of CNI plugin links: links is no string map")
        return cls(dict(links))

    def text(self) -> str:
        return json.dumps({"links": dict(sorted(self.links.items()))}, indent=2) + "\n"

    def present(self) -> list[str]:
        """The recorded links that are still there as made (someone else's file that replaced
        one since is not ours)."""
        return [
            path
            for path, target in sorted(self.links.items())
            if os.path.islink(path) and os.readlink(path) == target
        ]


@dataclass(frozen=True)
class LinkPlan:
    make: list[tuple[str, str]]  # (link, target): missing, or ours and pointing elsewhere
    foreign: list[str]  # a plugin of that name not ours: left alone
    record: LinkRecord  # every link of ours once ``make`` is done


class LinkError(PyflannelError, ValueError):
    """A reference plugin to link is not there."""


def plan_install(
    bin_dir: str, plugins_dir: str, names: Iterable[str], recorded: LinkRecord
) -> LinkPlan:
    """The links to make for ``names``: none when the plugins already live in ``bin_dir``.
    Raises LinkError for a plugin ``plugins_dir`` lacks."""
    if os.path.realpath(bin_dir) == os.path.realpath(plugins_dir):
        names = []
    for name in names:
        target = os.path.join(plugins_dir, name)
        if not os.path.exists(target):
            raise LinkError(
                f"link: {target} does not exist (is containernetworking-plugins installed?)"
            )
    return plan_links(bin_dir, plugins_dir, names, recorded)


def make_links(plan: LinkPlan) -> None:
    """Each planned link, replacing what is there in one rename."""
    for path, target in plan.make:
        temp = f"{path}.{os.getpid()}.tmp"
        os.symlink(target, temp)
        os.replace(temp, path)


def removal(plugin: str, record_path: str, recorded: LinkRecord) -> tuple[list[str], list[str]]:
    """What a reset removes: our links still as made, and every path to unlink (those links,
    the launcher when it is ours, the record when there is one)."""
    links = recorded.present()
    paths = [*links, *([plugin] if is_launcher(plugin) else [])]
    if os.path.exists(record_path):
        paths.append(record_path)
    return links, paths


def plan_links(
    bin_dir: str, plugins_dir: str, names: Iterable[str], recorded: LinkRecord
) -> LinkPlan:
    """Which of ``plugins_dir``'s plugins to link into ``bin_dir`` (reads only links): where
    nothing of that name is, or where a recorded link of ours points elsewhere. Anything else
    of that name is not ours and stays, a file that replaced one of our links included."""
    make: list[tuple[str, str]] = []
    foreign: list[str] = []
    links = dict(recorded.links)
    for name in names:
        path, target = os.path.join(bin_dir, name), os.path.join(plugins_dir, name)
        there = os.path.lexists(path)
        if not there or (path in recorded.links and os.path.islink(path)):
            links[path] = target
            if not there or os.readlink(path) != target:
                make.append((path, target))
        else:
            links.pop(path, None)
            foreign.append(path)
    return LinkPlan(make, foreign, LinkRecord(links))
