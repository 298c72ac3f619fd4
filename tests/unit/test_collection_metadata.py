"""The ansible-core the collection admits, said in one voice.

- The ``controller`` extra takes every ansible-core that ``requires_ansible`` (meta/runtime.yml)
  admits, and the project's own tests (the ``dev`` extra) run its floor.
- tests/sanity has an ignore file for each ansible-core minor release from that floor on.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import ansible.release
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


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
