"""pyflannel.network.cni_plugin: the launcher `pyflannel cni install` writes, and the reference
plugins linked into the bin dir where none is, each written only when it differs; state=absent
removes the launcher and the links the record names, and nothing else."""

from __future__ import annotations

import json
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
        "record": str(tmp_path / "var-lib-pyflannel" / "cni-plugins.json"),
    }


def test_installs_then_reports_no_change(tmp_path: Path, run_module: RunModule) -> None:
    args = dirs(tmp_path)
    first = run_module(cni_plugin.main, args)
    bin_dir = Path(str(args["bin_dir"]))
    assert first["changed"] and first["plugin"] == str(bin_dir / "flannel")
    assert (bin_dir / "flannel").read_text() == launcher_script()
    assert os.stat(bin_dir / "flannel").st_mode & 0o777 == 0o755
    assert os.readlink(bin_dir / "bridge") == f"{args['plugins_dir']}/bridge"
    assert json.loads(Path(str(args["record"])).read_text()) == {
        "links": {
            str(bin_dir / "bridge"): f"{args['plugins_dir']}/bridge",
            str(bin_dir / "host-local"): f"{args['plugins_dir']}/host-local",
        }
    }
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


def test_a_plugin_someone_else_installed_stays_and_is_not_recorded(
    tmp_path: Path, run_module: RunModule
) -> None:
    """kubespray unpacks the CNI plugins into /opt/cni/bin: its bridge is not ours to replace."""
    args = dirs(tmp_path)
    bin_dir = Path(str(args["bin_dir"]))
    bin_dir.mkdir()
    (bin_dir / "bridge").write_text("kubespray's bridge\n")
    result = run_module(cni_plugin.main, args)
    assert result["foreign"] == [str(bin_dir / "bridge")]
    assert result["changed_links"] == [str(bin_dir / "host-local")]
    assert (bin_dir / "bridge").read_text() == "kubespray's bridge\n"
    assert list(json.loads(Path(str(args["record"])).read_text())["links"]) == [
        str(bin_dir / "host-local")
    ]
    removed = run_module(cni_plugin.main, {**args, "state": "absent"})
    assert removed["changed"] and removed["changed_links"] == [str(bin_dir / "host-local")]
    assert sorted(os.listdir(bin_dir)) == ["bridge"]
    assert (bin_dir / "bridge").read_text() == "kubespray's bridge\n"


def test_absent_removes_the_launcher_and_the_recorded_links_only(
    tmp_path: Path, run_module: RunModule
) -> None:
    args = dirs(tmp_path)
    run_module(cni_plugin.main, args)
    bin_dir = Path(str(args["bin_dir"]))
    # Someone else's plugin beside ours, and one of our links replaced by someone's file.
    (bin_dir / "portmap").write_text("someone's portmap\n")
    (bin_dir / "host-local").unlink()
    (bin_dir / "host-local").write_text("someone's host-local\n")
    absent = {**args, "state": "absent"}

    predicted = run_module(cni_plugin.main, absent, check=True, diff=True)
    assert predicted["changed"] and predicted["changed_links"] == [str(bin_dir / "bridge")]
    assert sorted(d["before_header"] for d in predicted["diff"]) == sorted(
        [str(bin_dir / "bridge"), str(bin_dir / "flannel"), str(args["record"])]
    )
    assert (bin_dir / "flannel").exists() and Path(str(args["record"])).exists()

    assert run_module(cni_plugin.main, absent)["changed"]
    assert sorted(os.listdir(bin_dir)) == ["host-local", "portmap"]
    assert not Path(str(args["record"])).exists()
    again = run_module(cni_plugin.main, absent)
    assert not again["changed"] and again["changed_links"] == []


def test_absent_keeps_a_flannel_plugin_that_is_not_the_launcher(
    tmp_path: Path, run_module: RunModule
) -> None:
    args = {**dirs(tmp_path), "state": "absent"}
    bin_dir = Path(str(args["bin_dir"]))
    bin_dir.mkdir()
    (bin_dir / "flannel").write_text("#!/bin/sh\n# flannel's own Go plugin\n")
    result = run_module(cni_plugin.main, args)
    assert not result["changed"] and (bin_dir / "flannel").exists()


def test_a_record_that_is_not_one_fails_without_touching_anything(
    tmp_path: Path, run_module: RunModule
) -> None:
    args = dirs(tmp_path)
    record = Path(str(args["record"]))
    record.parent.mkdir()
    record.write_text("[]\n")
    result = run_module(cni_plugin.main, {**args, "state": "absent"})
    assert result["failed"] and result["msg"].startswith(f"record: {record} is no record")
    assert not Path(str(args["bin_dir"])).exists()
