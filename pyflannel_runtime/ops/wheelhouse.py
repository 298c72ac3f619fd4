"""The agent's wheelhouse: the project wheel and its dependencies, built once on the controller.

Nodes install the agent offline from this one archive (``pip install --no-index``), so they
need no index access. A build is cached under the digest of everything that goes into it (the
source tree's package files and pyproject.toml, and the interpreter it is built for), so
repeated playbook runs, tests and molecule scenarios share one build; a finished build is moved
into place atomically, and concurrent builders of the same digest agree on one result.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ARCHIVE_NAME = "wheelhouse.tar"
PROJECT = "pyflannel"
_SOURCE_FILES = ("pyproject.toml", "README.md")
_SOURCE_PACKAGE = "pyflannel_runtime"
_SKIPPED_DIRS = {"__pycache__"}


class WheelhouseError(Exception):
    """The wheelhouse could not be built; ``str()`` holds pip's last lines."""


@dataclass(frozen=True)
class Wheelhouse:
    archive: Path
    # What a node records as installed: the source digest of a build (the same whichever cache
    # built it), the archive's sha256 for a prebuilt one.
    digest: str
    project_wheel: str  # the project's own wheel's file name inside the archive
    python: str  # "3.11": the interpreter the wheels were built for


def _source_files(source: Path) -> list[Path]:
    """The files that make the wheel."""
    files = [source / name for name in _SOURCE_FILES]
    for root, dirs, names in os.walk(source / _SOURCE_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        files += [Path(root) / name for name in sorted(names) if not name.endswith(".pyc")]
    return files


def source_digest(source: Path, python: str) -> str:
    """sha256 over the files that make the wheel, by relative path, and the target Python."""
    digest = hashlib.sha256(f"python {python}\n".encode())
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


def _loaded(directory: Path, python: str, digest: str | None = None) -> Wheelhouse | None:
    archive = directory / ARCHIVE_NAME
    if not archive.is_file():
        return None
    with tarfile.open(archive) as tar:
        names = [Path(name).name for name in tar.getnames()]
    project = [n for n in names if n.startswith(f"{PROJECT}-") and n.endswith(".whl")]
    if len(project) != 1:
        return None
    return Wheelhouse(archive, digest or _file_digest(archive), project[0], python)


def build_wheelhouse(source: Path, cache_dir: Path) -> Wheelhouse:
    """The wheelhouse for ``source`` and this interpreter, from the cache or built now."""
    python = "{}.{}".format(*sys.version_info[:2])
    source = source.resolve()
    if not (source / "pyproject.toml").is_file() or not (source / _SOURCE_PACKAGE).is_dir():
        raise WheelhouseError(f"{source} is not the pyflannel source tree (no pyproject.toml)")
    digest = source_digest(source, python)
    target = cache_dir / digest
    cached = _loaded(target, python, digest)
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
        wheels = work / "wheels"
        # The project's own wheel and every dependency it declares for nodes.
        _pip("wheel", "--quiet", "--wheel-dir", str(wheels), str(copy))
        _project_wheel(wheels)
        staged = work / "result"
        staged.mkdir()
        with tarfile.open(staged / ARCHIVE_NAME, "w") as tar:
            for wheel in sorted(wheels.glob("*.whl")):
                tar.add(wheel, arcname=wheel.name)
        try:
            staged.rename(target)
        except OSError:
            if _loaded(target, python, digest) is None:  # not another builder's finished result
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = _loaded(target, python, digest)
    if built is None:
        raise WheelhouseError(f"{target} holds no usable wheelhouse")
    return built


def load_wheelhouse(archive: Path) -> Wheelhouse:
    """A prebuilt archive (``flannel_wheelhouse``): checked, not rebuilt. Its Python is not
    recorded in it, so it is taken to be this interpreter's."""
    python = "{}.{}".format(*sys.version_info[:2])
    loaded = _loaded(archive.parent, python) if archive.name == ARCHIVE_NAME else None
    if loaded is None:
        raise WheelhouseError(f"{archive} is not a wheelhouse built by pyflannel (wheelhouse.tar)")
    return loaded
