"""The agent's wheelhouse builder: what it builds from, and what it leaves in the source tree."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.wheelhouse import (
    WheelhouseError,
    build_for_hosts,
    build_wheelhouse,
    local_target,
    manylinux_platforms,
    source_digest,
    target_of,
)

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "pyflannel"
version = "0.0.1"
readme = "README.md"

[tool.setuptools.packages.find]
include = ["pyflannel_runtime*"]
"""


def _project(root: Path) -> Path:
    (root / "pyflannel_runtime").mkdir(parents=True)
    (root / "pyflannel_runtime" / "__init__.py").write_text('"""A stand-in package."""\n')
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "README.md").write_text("# stand-in\n")
    (root / "notes.txt").write_text("not part of the wheel\n")
    return root


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_build_leaves_the_source_tree_as_it_was_and_is_cached(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    before = _tree(source)
    built = build_wheelhouse(source, tmp_path / "cache")
    assert _tree(source) == before  # no build/, no *.egg-info
    with tarfile.open(built.archive) as tar:
        assert tar.getnames() == ["pyflannel-0.0.1-py3-none-any.whl"]
        member = tar.extractfile(tar.getnames()[0])
        assert member is not None
        with zipfile.ZipFile(member) as wheel:
            metadata = wheel.read("pyflannel-0.0.1.dist-info/METADATA").decode()
    assert built.project_wheel == "pyflannel-0.0.1-py3-none-any.whl"
    assert "The node runtime of pyflannel" in metadata and "stand-in" not in metadata
    again = build_wheelhouse(source, tmp_path / "cache")
    assert again == built
    assert again.archive.stat().st_mtime_ns == built.archive.stat().st_mtime_ns


def test_the_digest_covers_what_goes_into_the_wheel_and_nothing_else(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    digest = source_digest(source, "3.11")
    (source / "notes.txt").write_text("edited\n")
    assert source_digest(source, "3.11") == digest
    # the docs: the nodes' wheel carries a README of its own, so no agent restarts for them
    (source / "README.md").write_text("# the repository's README, edited\n")
    assert source_digest(source, "3.11") == digest
    (source / "pyproject.toml").write_text(PYPROJECT + "\n")
    changed = source_digest(source, "3.11")
    assert changed != digest
    (source / "pyflannel_runtime" / "__init__.py").write_text('"""Edited."""\n')
    assert source_digest(source, "3.11") not in {digest, changed}
    assert source_digest(source, "3.12") != source_digest(source, "3.11")


@given(minor=st.integers(min_value=5, max_value=80), machine=st.sampled_from(["x86_64", "aarch64"]))
def test_a_glibc_runs_the_manylinux_tags_of_itself_and_every_older_glibc(
    minor: int, machine: str
) -> None:
    tags = manylinux_platforms(f"glibc 2.{minor}", machine)
    pep600 = [tag for tag in tags if tag.startswith("manylinux_2_")]
    assert pep600 == [f"manylinux_2_{m}_{machine}" for m in range(minor, 4, -1)]
    # The legacy names right after the PEP 600 tag they alias, when that glibc is covered.
    for legacy, alias in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)):
        if minor >= alias:
            assert tags[tags.index(f"manylinux_2_{alias}_{machine}") + 1] == f"{legacy}_{machine}"
        else:
            assert f"{legacy}_{machine}" not in tags
    assert len(tags) == len(set(tags))


@pytest.mark.parametrize("libc", ["", "musl 1.2.4", "glibc 3.1", "glibc 2", "glibc 2.x"])
def test_no_manylinux_tags_for_another_c_library(libc: str) -> None:
    with pytest.raises(WheelhouseError, match=r"glibc 2\.x only"):
        manylinux_platforms(libc, "x86_64")


TRIXIE = {
    "implementation": "cpython",
    "python": "3.13",
    "abiflags": "",
    "machine": "x86_64",
    "libc": "glibc 2.41",
}


def test_a_nodes_interpreter_names_its_wheel_tags() -> None:
    target = target_of(TRIXIE)
    assert target.key == "cp313-cp313-manylinux_2_41_x86_64"
    assert target.pip_options()[:6] == [
        "--python-version",
        "3.13",
        "--implementation",
        "cp",
        "--abi",
        "cp313",
    ]
    assert target.pip_options()[6:10] == [
        "--platform",
        "manylinux_2_41_x86_64",
        "--platform",
        "manylinux_2_40_x86_64",
    ]
    assert target_of({**TRIXIE, "abiflags": "t"}).abi == "cp313t"
    with pytest.raises(WheelhouseError, match="'pypy'"):
        target_of({**TRIXIE, "implementation": "pypy"})
    with pytest.raises(WheelhouseError, match="not a Python version: '3'"):
        target_of({**TRIXIE, "python": "3"})


def test_each_interpreter_gets_its_own_build(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    here = build_wheelhouse(source, tmp_path / "cache")
    assert here.target == local_target().key
    trixie = build_wheelhouse(source, tmp_path / "cache", target_of(TRIXIE))
    assert (trixie.python, trixie.target) == ("3.13", "cp313-cp313-manylinux_2_41_x86_64")
    assert trixie.digest != here.digest and trixie.archive != here.archive
    with tarfile.open(trixie.archive) as tar:
        assert tar.getnames() == ["pyflannel-0.0.1-py3-none-any.whl"]
    assert build_wheelhouse(source, tmp_path / "cache", target_of(TRIXIE)) == trixie


def test_hosts_with_one_interpreter_share_one_build(tmp_path: Path) -> None:
    source = _project(tmp_path / "src")
    bookworm = {**TRIXIE, "python": "3.11", "libc": "glibc 2.36"}
    hosts = build_for_hosts(
        source, tmp_path / "cache", {"node1": bookworm, "node2": bookworm, "node3": TRIXIE}
    )
    assert hosts["node1"] == hosts["node2"] != hosts["node3"]
    assert [hosts[name].python for name in ("node1", "node3")] == ["3.11", "3.13"]
    assert len(list((tmp_path / "cache").iterdir())) == 2
    with pytest.raises(WheelhouseError, match="node4: no manylinux wheels"):
        build_for_hosts(source, tmp_path / "cache", {"node4": {**TRIXIE, "libc": "musl 1.2.5"}})
