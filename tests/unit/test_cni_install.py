"""Planning the reference plugins' links into a CNI bin directory, and what a reset removes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pyflannel_runtime.cni.install import (
    LinkError,
    LinkRecord,
    install_plugin,
    make_links,
    plan_install,
    removal,
)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir, plugins = tmp_path / "bin", tmp_path / "plugins"
    bin_dir.mkdir()
    plugins.mkdir()
    for name in ("bridge", "host-local"):
        (plugins / name).write_text("#!/bin/sh\n")
    return bin_dir, plugins


def test_links_are_planned_made_and_then_nothing_is_left_to_make(
    dirs: tuple[Path, Path],
) -> None:
    bin_dir, plugins = dirs
    plan = plan_install(str(bin_dir), str(plugins), ["bridge", "host-local"], LinkRecord({}))
    assert [link for link, _ in plan.make] == [str(bin_dir / "bridge"), str(bin_dir / "host-local")]
    make_links(plan)
    assert os.readlink(bin_dir / "bridge") == str(plugins / "bridge")
    assert (
        plan_install(str(bin_dir), str(plugins), ["bridge", "host-local"], plan.record).make == []
    )


def test_plugins_already_in_the_bin_directory_need_no_links(dirs: tuple[Path, Path]) -> None:
    _, plugins = dirs
    plan = plan_install(str(plugins), str(plugins), ["bridge", "missing"], LinkRecord({}))
    assert (plan.make, plan.foreign, plan.record) == ([], [], LinkRecord({}))


def test_a_plugin_the_plugins_directory_lacks_is_named(dirs: tuple[Path, Path]) -> None:
    bin_dir, plugins = dirs
    with pytest.raises(LinkError, match="portmap does not exist"):
        plan_install(str(bin_dir), str(plugins), ["bridge", "portmap"], LinkRecord({}))
    assert list(bin_dir.iterdir()) == []


def test_removal_takes_our_links_and_launcher_and_leaves_a_replaced_link(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, plugins = dirs
    plan = plan_install(str(bin_dir), str(plugins), ["bridge", "host-local"], LinkRecord({}))
    make_links(plan)
    record = tmp_path / "record.json"
    record.write_text(plan.record.text())
    (bin_dir / "host-local").unlink()
    (bin_dir / "host-local").write_text("someone else's\n")
    plugin = install_plugin(str(bin_dir))
    links, paths = removal(plugin, str(record), plan.record)
    assert links == [str(bin_dir / "bridge")]
    assert paths == [str(bin_dir / "bridge"), plugin, str(record)]
    (bin_dir / "flannel").write_text("#!/bin/sh\n# not ours\n")
    assert removal(plugin, str(tmp_path / "none.json"), plan.record)[1] == [str(bin_dir / "bridge")]
