"""``ansible-test sanity`` on the collection as it ships (scripts/sanity runs this).

The collection tarball is built (or taken from ``--tarball PATH``) and unpacked at
ansible_collections/pyflannel/network in a temporary directory (ansible-test wants that path),
and ansible-test runs there, on exactly what the tarball holds (its tests/sanity ignore files
too), with Python 3.11 in its own virtualenvs (``--venv``).

ansible-test bootstraps pip into each virtualenv with a script it downloads from a host this
machine cannot reach, unless ``~/.ansible/test/cache/get_pip_<version>.py`` exists. When it does
not, this writes a stand-in there: it installs ansible-test's pip version from a wheel that pip
fetches here from the package index, beside the stand-in. Every other requirement ansible-test
installs itself, from the package index.

Exit status: ansible-test's. Arguments besides ``--tarball`` go to ``ansible-test sanity``
(``--test pylint``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PYTHON = "3.11"
CACHE = Path("~/.ansible/test/cache").expanduser()
WHEELS = CACHE / "get_pip_wheels"

STAND_IN = '''"""A stand-in for get-pip.py, written by pyflannel's scripts/sanity.py: pip {version} from the
wheel beside this file (pip runs from its own wheel), then whatever else ansible-test asks for."""

import os
import subprocess
import sys

WHEELS = {wheels!r}
# get-pip.py's own options; ansible-test wants neither setuptools nor wheel.
packages = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
pip = os.path.join(WHEELS, {wheel!r}, "pip")
sys.exit(subprocess.call([sys.executable, pip, "install", "--no-index", "--find-links", WHEELS, *packages]))
'''


def pip_version() -> str:
    """The pip version ansible-test bootstraps into its virtualenvs for Python 3.11."""
    from ansible_test._internal.python_requirements import get_venv_packages

    return str(get_venv_packages(SimpleNamespace(version=PYTHON))["pip"])


def write_stand_in() -> None:
    version = pip_version()
    script = CACHE / f"get_pip_{version.replace('.', '_')}.py"
    if script.exists():
        return
    wheel = f"pip-{version}-py3-none-any.whl"
    if not (WHEELS / wheel).exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--dest", str(WHEELS), f"pip=={version}"],
            check=True,
        )  # fmt: skip
    script.parent.mkdir(parents=True, exist_ok=True)
    temp = script.with_suffix(".tmp")
    temp.write_text(STAND_IN.format(version=version, wheels=str(WHEELS), wheel=wheel))
    temp.replace(script)


def build(scratch: Path) -> Path:
    built = scratch / "built"
    subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "build",
            "--output-path",
            str(built),
            str(ROOT),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (tarball,) = built.glob("pyflannel-network-*.tar.gz")
    return tarball


def collection_tree(scratch: Path, tarball: Path) -> Path:
    """The tarball unpacked where ansible-test wants it, and nothing added."""
    tree = scratch / "ansible_collections" / "pyflannel" / "network"
    tree.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(tree, filter="data")
    return tree


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="ansible-test sanity on the collection as it ships", allow_abbrev=False
    )
    parser.add_argument("--tarball", type=Path, help="a built collection tarball to test")
    ours, args = parser.parse_known_args(argv)
    started = time.monotonic()
    write_stand_in()
    with tempfile.TemporaryDirectory(prefix="pyflannel-sanity-") as scratch:
        tarball = ours.tarball.resolve() if ours.tarball else build(Path(scratch))
        tree = collection_tree(Path(scratch), tarball)
        done = subprocess.run(
            [str(BIN / "ansible-test"), "sanity", "--venv", "--python", PYTHON, "--color", "no",
             *args],
            cwd=tree,
            check=False,
        )  # fmt: skip
    print(f"sanity: ansible-test sanity took {time.monotonic() - started:.0f} s", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
