"""pyflannel.network.cni_plugin: the launcher `pyflannel cni install` writes, and the reference
plugins linked into the bin dir, each written only when it differs."""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.pyflannel.network.plugins.modules import cni_plugin

from pyflannel_runtime.cni.install import launcher_script

from ..conftest import RunModule


def dirs(tmp_path: Path) -> dict[str, object]:
    plugins = tmp_path / "usr-lib-cni"
    plugins.mkdir()
    for name in ("bridge", "host-local"):
        (plugins / name).write_text("#!/bin/false\n")
    return {
        "bin_dir": str(tmp_path / "opt-cni-bin"),
        "plugins_dir": str(plugins),
        "link": ["bridge", "host-local"],
    }


def test_installs_then_reports_no_change(tmp_path: Path, run_module: RunModule) -> None:
    args = dirs(tmp_path)
    first = run_module(cni_plugin.main, args)
    bin_dir = Path(str(args["bin_dir"]))
    assert first["changed"] and first["plugin"] == str(bin_dir / "flannel")
    assert (bin_dir / "flannel").read_text() == launcher_script()
    assert os.stat(bin_dir / "flannel").st_mode & 0o777 == 0o755
    assert os.readlink(bin_dir / "bridge") == f"{args['plugins_dir']}/bridge"
    second = run_module(cni_plugin.main, args)
    assert not second["changed"] and second["changed_links"] == []


def test_check_mode_reports_a_repointed_link_and_touches_nothing(
    tmp_path: Path, run_module: RunModule
) -> None:
    args = dirs(tmp_path)
    run_module(cni_plugin.main, args)
    link = Path(str(args["bin_dir"])) / "bridge"
    link.unlink()
    link.symlink_to("/elsewhere/bridge")
    result = run_module(cni_plugin.main, args, check=True, diff=True)
    assert result["changed"] and result["changed_links"] == [str(link)]
    assert os.readlink(link) == "/elsewhere/bridge"
    assert result["diff"][0]["before"] == "/elsewhere/bridge\n"
    assert run_module(cni_plugin.main, args)["changed"]
    assert os.readlink(link) == f"{args['plugins_dir']}/bridge"


def test_a_missing_reference_plugin_fails(tmp_path: Path, run_module: RunModule) -> None:
    args = {**dirs(tmp_path), "link": ["portmap"]}
    result = run_module(cni_plugin.main, args)
    assert result["failed"] and "portmap does not exist" in result["msg"]
    assert not Path(str(args["bin_dir"]), "flannel").exists()
