"""The agent's wheelhouse: the project wheel and its dependencies, built once on the controller.

Nodes install the agent offline from this one archive (``pip install --no-index``), so they
need no index access. A wheelhouse holds what the nodes' settings use, nothing more: the
runtime and its dependencies, plus the extras (pyproject.toml) that ``node_extras`` picks from
the cluster's settings. A wheelhouse is built for one target interpreter, named by the wheel tags
it accepts (``Target``: Python version, implementation, ABI, platforms), not for the
controller's own: pip downloads the dependencies' binary wheels for those tags, so a Debian 12
controller serves Debian 13 nodes (Python 3.13, a newer glibc) and a fleet of both gets one
wheelhouse per interpreter. A build is cached under the digest of everything that goes into it
(the source tree's package files and pyproject.toml, the target and the extras), so repeated
playbook runs, tests and molecule scenarios share one build; a finished build is moved into
place atomically, and concurrent builders of the same digest agree on one result.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyflannel_runtime import PyflannelError

ARCHIVE_NAME = "wheelhouse.tar"
PROJECT = "pyflannel"
_SOURCE_FILES = ("pyproject.toml",)
# pyproject.toml names README.md as the long description. The nodes' wheel gets this text
# instead of the repository's README, so that a change to the docs alone leaves the wheel and
# its digest as they were and restarts no agent.
_NODE_README = (
    "# pyflannel\n\nThe node runtime of pyflannel: pyflanneld, the flannel CNI plugin and\n"
    "`pyflannel status`. The project's README is in the repository and the collection.\n"
)
_SOURCE_PACKAGE = "pyflannel_runtime"
_SKIPPED_DIRS = {"__pycache__"}
# The oldest glibc a manylinux tag names (manylinux1), and the legacy names of PEP 600's tags.
_OLDEST_GLIBC_MINOR = 5
_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


class WheelhouseError(PyflannelError):
    """The wheelhouse could not be built; ``str()`` holds pip's last lines."""


# The runtime's extras (pyproject.toml) and the cluster settings that make a node run them.
KUBE_EXTRA = "kube"  # the Kubernetes datastore's HTTP client and kubeconfig reader
UDP_EXTRA = "udp"  # numpy, for the udp backend's segmentation offload


def node_extras(cluster: Mapping[str, Any]) -> tuple[str, ...]:
    """The extras the nodes of a cluster run, from its settings (the cluster model's, as the
    preflight's cluster facts carry them: ``flannel_datastore``, ``flannel_backend_type``).

    A node of the etcd datastore runs none whatever its backend but udp; `kubernetes` goes to
    no node (the runtime's own client covers token, client-certificate, basic, exec-plugin
    and in-cluster auth)."""
    try:
        datastore, backend = cluster["flannel_datastore"], cluster["flannel_backend_type"]
    except KeyError as err:
        raise WheelhouseError(f"the cluster's settings lack {err.args[0]}") from None
    extras = []
    if datastore == "kubernetes":
        extras.append(KUBE_EXTRA)
    if backend == "udp":
        extras.append(UDP_EXTRA)
    return tuple(extras)


def distribution_name(wheel: str) -> str:
    """A wheel's project, normalized as pip lists it for comparing (PEP 503)."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


@dataclass(frozen=True)
class Wheelhouse:
    archive: Path
    # What a node records as installed: the source digest of a build (the same whichever cache
    # built it), for a prebuilt one the archive's sha256 (with the extras, when there are any).
    digest: str
    project_wheel: str  # the project's own wheel's file name inside the archive
    python: str  # "3.11": the interpreter the wheels were built for
    target: str  # the target's key ("cp311-cp311-manylinux_2_36_x86_64"), or "" if unknown
    extras: tuple[str, ...] = ()  # the runtime's extras a node installs from it
    # The projects of the archive's wheels (``distribution_name``): what a node's virtualenv
    # holds once installed; anything else in it is left from other settings.
    distributions: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        """What a node installs: the project's wheel, with its extras."""
        return (
            f"{self.project_wheel}[{','.join(self.extras)}]" if self.extras else self.project_wheel
        )


@dataclass(frozen=True)
class Target:
    """An interpreter, as pip picks wheels for it (PEP 425 tags)."""

    python: str  # "3.13"
    implementation: str  # "cp"
    abi: str  # "cp313"
    platforms: tuple[str, ...]  # most specific first

    @property
    def key(self) -> str:
        """``cp313-cp313-manylinux_2_41_x86_64``: equal keys accept the same wheels."""
        return f"{self.implementation}{self.python.replace('.', '')}-{self.abi}-{self.platforms[0]}"

    def pip_options(self) -> list[str]:
        platforms = [arg for name in self.platforms for arg in ("--platform", name)]
        return [
            "--python-version",
            self.python,
            "--implementation",
            self.implementation,
            "--abi",
            self.abi,
            *platforms,
        ]


def manylinux_platforms(libc: str, machine: str) -> tuple[str, ...]:
    """The manylinux tags a glibc runs (PEP 600, and the legacy names), newest first.

    ``libc`` as glibc reports itself (``os.confstr("CS_GNU_LIBC_VERSION")``: "glibc 2.41").
    """
    name, _, version = libc.partition(" ")
    major, _, minor = version.partition(".")
    if name != "glibc" or major != "2" or not minor.isdigit():
        raise WheelhouseError(f"no manylinux wheels for a C library {libc!r} (glibc 2.x only)")
    tags: list[str] = []
    for glibc_minor in range(int(minor), _OLDEST_GLIBC_MINOR - 1, -1):
        tags.append(f"manylinux_2_{glibc_minor}_{machine}")
        if glibc_minor in _LEGACY_MANYLINUX:
            tags.append(f"{_LEGACY_MANYLINUX[glibc_minor]}_{machine}")
    return tuple(tags)


def target_of(interpreter: Mapping[str, str]) -> Target:
    """The target of an interpreter as node_facts reports it (``implementation``, ``python``,
    ``abiflags``, ``machine``, ``libc``)."""
    implementation = interpreter.get("implementation", "")
    if implementation != "cpython":
        raise WheelhouseError(f"no wheelhouse for Python implementation {implementation!r}")
    python = interpreter.get("python", "")
    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise WheelhouseError(f"not a Python version: {python!r}")
    return Target(
        python=python,
        implementation="cp",
        abi=f"cp{python.replace('.', '')}{interpreter.get('abiflags', '')}",
        platforms=manylinux_platforms(interpreter.get("libc", ""), interpreter.get("machine", "")),
    )


def local_target() -> Target:
    """The controller's own interpreter."""
    python = "{}.{}".format(*sys.version_info[:2])
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    return target_of(
        {
            "implementation": sys.implementation.name,
            "python": python,
            "abiflags": sys.abiflags,
            "machine": platform.machine(),
            "libc": libc,
        }
    )


def _source_files(source: Path) -> list[Path]:
    """The files that make the wheel."""
    files = [source / name for name in _SOURCE_FILES]
    for root, dirs, names in os.walk(source / _SOURCE_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        files += [Path(root) / name for name in sorted(names) if not name.endswith(".pyc")]
    return files


def source_digest(source: Path, target: str, extras: tuple[str, ...] = ()) -> str:
    """sha256 over the files that make the wheel, by relative path, the target's key and the
    extras."""
    digest = hashlib.sha256(f"python {target}\nextras {','.join(extras)}\n".encode())
    digest.update(f"README.md\0{_NODE_README}\0".encode())
    for path in _source_files(source):
        digest.update(f"{path.relative_to(source)}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise WheelhouseError(f"pip {args[0]} failed:\n{tail}")


def _project_wheel(wheels: Path) -> str:
    names = sorted(p.name for p in wheels.glob(f"{PROJECT}-*.whl"))
    if len(names) != 1:
        raise WheelhouseError(f"expected one {PROJECT} wheel in {wheels}, found {names}")
    return names[0]


def _loaded(
    directory: Path,
    python: str,
    target: str,
    extras: tuple[str, ...],
    digest: str | None = None,
) -> Wheelhouse | None:
    archive = directory / ARCHIVE_NAME
    if not archive.is_file():
        return None
    with tarfile.open(archive) as tar:
        names = [Path(name).name for name in tar.getnames()]
    project = [n for n in names if n.startswith(f"{PROJECT}-") and n.endswith(".whl")]
    if len(project) != 1:
        return None
    if digest is None:
        digest = _file_digest(archive)
        if extras:
            digest = hashlib.sha256(f"{digest} {','.join(extras)}".encode()).hexdigest()
    distributions = tuple(sorted({distribution_name(n) for n in names if n.endswith(".whl")}))
    return Wheelhouse(archive, digest, project[0], python, target, extras, distributions)


def build_wheelhouse(
    source: Path, cache_dir: Path, target: Target | None = None, extras: tuple[str, ...] = ()
) -> Wheelhouse:
    """The wheelhouse for ``source``, ``target`` (default this interpreter) and the runtime's
    ``extras``, from the cache or built now."""
    target = target or local_target()
    source = source.resolve()
    if not (source / "pyproject.toml").is_file() or not (source / _SOURCE_PACKAGE).is_dir():
        raise WheelhouseError(f"{source} is not the pyflannel source tree (no pyproject.toml)")
    extras = tuple(sorted(set(extras)))
    digest = source_digest(source, target.key, extras)
    done = cache_dir / digest
    cached = _loaded(done, target.python, target.key, extras, digest)
    if cached is not None:
        return cached

    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=cache_dir))
    try:
        # pip builds the project in place (build/, *.egg-info): it builds a copy of exactly the
        # digested files, so the source tree stays as it was and the wheel is what was digested.
        copy = work / "source"
        for path in _source_files(source):
            (copy / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy / path.relative_to(source))
        (copy / "README.md").write_text(_NODE_README)
        wheels = work / "wheels"
        # The project's own wheel (pure Python, for any target), then the binary wheels of
        # every dependency it declares for nodes, and those of the extras, as the target takes
        # them. pip evaluates the dependencies' environment markers for its own interpreter,
        # not the target's.
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(copy))
        project = wheels / _project_wheel(wheels)
        wanted = f"{project}[{','.join(extras)}]" if extras else str(project)
        _pip(
            "download",
            "--quiet",
            "--only-binary=:all:",
            *target.pip_options(),
            "--dest",
            str(wheels),
            wanted,
        )
        staged = work / "result"
        staged.mkdir()
        with tarfile.open(staged / ARCHIVE_NAME, "w") as tar:
            for wheel in sorted(wheels.glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
        try:
            staged.rename(done)
        except OSError:
            # not another builder's finished result
            if _loaded(done, target.python, target.key, extras, digest) is None:
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = _loaded(done, target.python, target.key, extras, digest)
    if built is None:
        raise WheelhouseError(f"{done} holds no usable wheelhouse")
    return built


def build_for_hosts(
    source: Path,
    cache_dir: Path,
    interpreters: Mapping[str, Mapping[str, str]],
    extras: tuple[str, ...] = (),
) -> dict[str, Wheelhouse]:
    """Each host's wheelhouse, by host name, from its interpreter (as node_facts reports it)
    and the extras the cluster's settings use: one build per distinct target, shared by the
    hosts that have it."""
    targets = {}
    for host, interpreter in sorted(interpreters.items()):
        try:
            targets[host] = target_of(interpreter)
        except WheelhouseError as err:
            raise WheelhouseError(f"{host}: {err}") from None
    built = {
        target.key: build_wheelhouse(source, cache_dir, target, extras)
        for target in {target.key: target for target in targets.values()}.values()
    }
    return {host: built[target.key] for host, target in targets.items()}


def load_wheelhouse(archive: Path, extras: tuple[str, ...] = ()) -> Wheelhouse:
    """A prebuilt archive (``flannel_wheelhouse``): checked, not rebuilt; nodes install the
    runtime with ``extras`` from it, so it must hold theirs. Its target is not recorded in it,
    so its Python is taken to be this interpreter's."""
    python = "{}.{}".format(*sys.version_info[:2])
    extras = tuple(sorted(set(extras)))
    loaded = _loaded(archive.parent, python, "", extras) if archive.name == ARCHIVE_NAME else None
    if loaded is None:
        raise WheelhouseError(f"{archive} is not a wheelhouse built by pyflannel (wheelhouse.tar)")
    return loaded
