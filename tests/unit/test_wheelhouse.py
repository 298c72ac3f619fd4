"""The agent's wheelhouse builder: what it builds from, the extras it picks from the cluster's
settings, and what it leaves in the source tree."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.model.cluster_settings import ClusterSettings
from pyflannel_controller.wheelhouse import (
    WheelhouseError,
    build_for_hosts,
    build_wheelhouse,
    distribution_name,
    load_wheelhouse,
    local_target,
    manylinux_platforms,
    node_extras,
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


@pytest.mark.parametrize(
    ("datastore", "backend", "extras"),
    [
        ("etcd", "vxlan", ()),
        ("etcd", "host-gw", ()),
        ("etcd", "udp", ("udp",)),
        ("kubernetes", "vxlan", ("kube",)),
        ("kubernetes", "host-gw", ("kube",)),
        ("kubernetes", "udp", ("kube", "udp")),
    ],
)
def test_a_nodes_extras_come_from_the_clusters_datastore_and_backend(
    datastore: str, backend: str, extras: tuple[str, ...]
) -> None:
    settings = {"flannel_datastore": datastore, "flannel_backend_type": backend}
    assert node_extras(settings) == extras


def test_the_extras_are_picked_from_the_cluster_model_as_the_preflight_dumps_it() -> None:
    # The preflight's cluster facts: the model's settings, dumped (plugins/action/preflight.py).
    etcd = ClusterSettings(flannel_datastore="etcd").model_dump(mode="json", exclude={"nodes"})
    assert node_extras(etcd) == ()
    assert node_extras({**etcd, "flannel_backend_type": "udp"}) == ("udp",)
    # flannel's own default datastore, as the model's
    assert node_extras(ClusterSettings().model_dump(mode="json")) == ("kube",)
    with pytest.raises(WheelhouseError, match="lack flannel_backend_type"):
        node_extras({"flannel_datastore": "etcd"})


def _extra_dependency(directory: Path) -> Path:
    """A wheel of a stand-in dependency, made by hand (no index, no build)."""
    directory.mkdir()
    wheel = directory / "pyflannel_standin_dep-1.0-py3-none-any.whl"
    info = "pyflannel_standin_dep-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("pyflannel_standin_dep/__init__.py", "")
        archive.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: pyflannel-standin-dep\nVersion: 1.0\n"
        )
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return directory


def test_a_build_holds_the_extras_asked_for_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _project(tmp_path / "src")
    with (source / "pyproject.toml").open("a") as pyproject:
        pyproject.write('\n[project.optional-dependencies]\nkube = ["pyflannel-standin-dep"]\n')
    monkeypatch.setenv("PIP_FIND_LINKS", str(_extra_dependency(tmp_path / "links")))
    plain = build_wheelhouse(source, tmp_path / "cache")
    kube = build_wheelhouse(source, tmp_path / "cache", extras=("kube",))
    assert (plain.extras, plain.distributions) == ((), ("pyflannel",))
    assert plain.requirement == "pyflannel-0.0.1-py3-none-any.whl"
    assert (kube.extras, kube.distributions) == (("kube",), ("pyflannel", "pyflannel-standin-dep"))
    assert kube.requirement == "pyflannel-0.0.1-py3-none-any.whl[kube]"
    # Another archive, and another record on the node: a node whose settings change installs it.
    assert kube.digest != plain.digest and kube.archive != plain.archive
    with tarfile.open(kube.archive) as tar:
        assert sorted(tar.getnames()) == [
            "pyflannel-0.0.1-py3-none-any.whl",
            "pyflannel_standin_dep-1.0-py3-none-any.whl",
        ]
    assert source_digest(source, "3.11", ("kube",)) != source_digest(source, "3.11")
    # A prebuilt archive is installed with the extras the nodes' settings use; its digest is
    # the archive's sha256 alone, or with them.
    prebuilt, prebuilt_kube = (
        load_wheelhouse(plain.archive),
        load_wheelhouse(plain.archive, ("kube",)),
    )
    assert prebuilt.requirement == plain.project_wheel
    assert prebuilt_kube.requirement == f"{plain.project_wheel}[kube]"
    assert len({prebuilt.digest, prebuilt_kube.digest, plain.digest}) == 3


def test_wheel_names_are_compared_as_pip_lists_projects() -> None:
    assert distribution_name("PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.whl") == "pyyaml"
    assert distribution_name("pyflannel_standin_dep-1.0-py3-none-any.whl") == (
        "pyflannel-standin-dep"
    )
