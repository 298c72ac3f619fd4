"""The collection's version and the ansible-core it admits, each said in one voice.

- ``galaxy.yml``, ``pyproject.toml`` and the runtime's ``__version__`` (what ``pyflanneld
  --version`` and ``pyflannel --version`` print) carry one version; no plugin, module option or
  role says it was added in a newer one.
- A released version is whole: once ``changelogs/changelog.yaml`` has the version ``galaxy.yml``
  names, no fragment waits under ``changelogs/fragments``, or a tarball would carry that version's
  label over changes its release notes lack.
- The ``controller`` extra takes every ansible-core that ``requires_ansible`` (meta/runtime.yml)
  admits, and the project's own tests (the ``dev`` extra) run its floor.
- tests/sanity has an ignore file for each ansible-core minor release from that floor on.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import ansible.release
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import pyflannel_runtime

ROOT = Path(__file__).resolve().parents[2]
# A documentation key in YAML (a plugin's DOCUMENTATION or RETURN, a doc fragment, a sidecar
# .yml, a role's argument specs), its value bare or quoted.
VERSION_ADDED = re.compile(r"""^\s*version_added:\s*["']?([^"'\s#]+)""", re.MULTILINE)
# Folds the fragments that wait into the release galaxy.yml names, with today's date, and lists
# any plugin added in it since (--reload-plugins).
FOLD = "antsibull-changelog release --version {version} --update-existing --reload-plugins"


def galaxy() -> dict[str, object]:
    loaded = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def collection_version() -> str:
    return str(galaxy()["version"])


def project() -> dict[str, object]:
    loaded = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(loaded, dict)
    return loaded


def requires_ansible() -> SpecifierSet:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    return SpecifierSet(runtime["requires_ansible"])


def floor(specifiers: SpecifierSet) -> Version:
    (lower,) = [Version(s.version) for s in specifiers if s.operator == ">="]
    return lower


def extra(name: str, distribution: str) -> Requirement:
    extras = project()["optional-dependencies"]
    assert isinstance(extras, dict)
    (requirement,) = [Requirement(r) for r in extras[name] if Requirement(r).name == distribution]
    return requirement


def versions_added() -> Iterator[tuple[str, str]]:
    """(file:line, version) for every ``version_added`` the collection's docs carry."""
    documented = [
        path
        for path in sorted((ROOT / "plugins").rglob("*"))
        if path.suffix in {".py", ".yml", ".yaml"} and "__pycache__" not in path.parts
    ]
    documented += sorted(ROOT.glob("roles/*/meta/*.yml"))
    for path in documented:
        text = path.read_text()
        for match in VERSION_ADDED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield f"{path.relative_to(ROOT)}:{line}", match.group(1)


def test_galaxy_pyproject_and_the_runtime_carry_one_version() -> None:
    versions = {
        "galaxy.yml": collection_version(),
        "pyproject.toml": project()["version"],
        "pyflannel_runtime.__version__": pyflannel_runtime.__version__,
    }
    assert len(set(versions.values())) == 1, versions


def test_nothing_is_added_in_a_version_newer_than_the_collection() -> None:
    current = Version(collection_version())
    added = dict(versions_added())
    # Every module and filter says when it came: a scan that misses one has lost its way.
    plugins = {str(path.relative_to(ROOT)) for path in ROOT.glob("plugins/*/*.py")}
    dated = {where.split(":")[0] for where in added}
    for kind in ("modules", "filter"):
        assert {p for p in plugins if p.startswith(f"plugins/{kind}/")} <= dated, kind
    newer = {where: version for where, version in added.items() if Version(version) > current}
    assert not newer, f"newer than galaxy.yml's version {current}: {newer}"


def test_a_released_version_has_no_fragment_waiting() -> None:
    version = collection_version()
    released = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"]
    waiting = sorted(
        path.name
        for path in (ROOT / "changelogs" / "fragments").iterdir()
        if path.suffix in {".yml", ".yaml"}
    )
    if version in released:
        assert not waiting, (
            f"{version} is in changelogs/changelog.yaml, and these fragments are not: {waiting}."
            f" Until {version} has gone out, fold them into it (`{FOLD.format(version=version)}`);"
            " after, raise the version in galaxy.yml, pyproject.toml and"
            " pyflannel_runtime/__init__.py"
        )


def test_the_controller_extra_admits_every_ansible_core_requires_ansible_does() -> None:
    core = extra("controller", "ansible-core")
    assert [s.operator for s in core.specifier] == [">="], f"a lower bound only: {core}"
    assert floor(core.specifier) == floor(requires_ansible())
    assert not [
        s for s in extra("controller", "ansible").specifier if s.operator not in {">=", "!="}
    ], "the ansible package unbounded above, as ansible-core"


def test_the_projects_own_tests_run_the_oldest_ansible_core_admitted() -> None:
    assert floor(requires_ansible()) in extra("dev", "ansible-core").specifier


def test_there_is_a_sanity_ignore_file_for_every_ansible_core_from_the_floor_on() -> None:
    names = sorted(path.name for path in (ROOT / "tests" / "sanity").iterdir())
    lowest = floor(requires_ansible())
    installed = Version(ansible.release.__version__)
    newest = max(Version(name.removeprefix("ignore-").removesuffix(".txt")) for name in names)
    # One per minor release, none missing between the floor and the newest (ansible-test reads
    # only its own version's), and one for the ansible-core running these tests.
    expected = [
        f"ignore-{lowest.major}.{minor}.txt" for minor in range(lowest.minor, newest.minor + 1)
    ]
    assert names == sorted(expected), names
    assert f"ignore-{installed.major}.{installed.minor}.txt" in names
