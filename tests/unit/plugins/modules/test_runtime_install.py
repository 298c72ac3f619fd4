"""pyflannel.network.runtime_install: a hostile archive is refused before anything is unpacked,
what the virtualenv holds beyond the wheelhouse is found by normalized name, and a real install
(a virtualenv without pip, this interpreter's pip installing into it from outside) makes,
updates, slims and records the virtualenv, leaving no unpacked wheel or archive behind; the
action plugin copies the archive to the host (a local ansible-playbook run), and in check mode
copies and installs nothing."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from ansible_collections.pyflannel.network.plugins.module_utils.wheelhouse_record import (
    RECORD_NAME,
)
from ansible_collections.pyflannel.network.plugins.modules import runtime_install

from tests.unit.plugins.test_example_inventory import ansible_playbook

from ..conftest import RunModule


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("name", "kind", "link"),
    [
        ("pyroute2-0.9.4-py3-none-any.whl", tarfile.REGTYPE, ""),
        ("wheels/pyroute2-0.9.4-py3-none-any.whl", tarfile.REGTYPE, ""),
        ("wheels", tarfile.DIRTYPE, ""),
        (".", tarfile.DIRTYPE, ""),
    ],
)
def test_files_and_directories_inside_the_target_may_be_unpacked(
    name: str, kind: bytes, link: str
) -> None:
    assert runtime_install.refused_member(member(name, kind, link), "/var/cache/w") is None


@pytest.mark.parametrize(
    ("name", "kind", "link", "why"),
    [
        ("../escape.whl", tarfile.REGTYPE, "", "outside"),
        ("wheels/../../escape.whl", tarfile.REGTYPE, "", "outside"),
        ("/etc/cron.d/evil", tarfile.REGTYPE, "", "outside"),
        ("..", tarfile.DIRTYPE, "", "outside"),
        ("link.whl", tarfile.SYMTYPE, "/etc/shadow", "not a regular file"),
        ("hard.whl", tarfile.LNKTYPE, "/etc/shadow", "not a regular file"),
        ("dev", tarfile.CHRTYPE, "", "not a regular file"),
        ("fifo", tarfile.FIFOTYPE, "", "not a regular file"),
    ],
)
def test_links_devices_and_paths_outside_the_target_are_refused(
    name: str, kind: bytes, link: str, why: str
) -> None:
    refused = runtime_install.refused_member(member(name, kind, link), "/var/cache/w")
    assert refused is not None and refused.startswith(f"{name}: {why}")


def test_what_the_wheelhouse_does_not_hold_is_stale_by_normalized_name() -> None:
    listed = [
        {"name": "pyflannel", "version": "0.2.0"},
        {"name": "PyRoute2", "version": "0.9.4"},
        {"name": "prometheus_client", "version": "0.21.0"},
        {"name": "numpy", "version": "2.1.0"},
        {"name": "pip", "version": "23.0.1"},
        {"name": "Typing.Extensions", "version": "4.12"},
    ]
    wanted = ["pyflannel", "pyroute2", "prometheus-client", "msgspec"]
    stale = runtime_install.stale(listed, wanted)
    assert stale == ["numpy", "pip", "typing-extensions"]
    assert runtime_install.stale(listed[:3], wanted) == []


def tar_of(path: Path, members: dict[str, bytes], hostile: tarfile.TarInfo | None = None) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
        if hostile is not None:
            tar.addfile(hostile)
    return path


def args(
    tmp_path: Path, archive: Path, digest: str = "d" * 64, **more: object
) -> dict[str, object]:
    return {
        "archive": str(archive),
        "venv": str(tmp_path / "venv"),
        "digest": digest,
        "requirement": "demo-1.0-py3-none-any.whl",
        "project_wheel": "demo-1.0-py3-none-any.whl",
        "distributions": ["demo"],
        "unpack_dir": str(tmp_path / "cache/wheelhouse"),
        **more,
    }


def test_a_hostile_archive_is_refused_before_anything_is_unpacked_or_made(
    tmp_path: Path, run_module: RunModule
) -> None:
    archive = tar_of(
        tmp_path / "wheelhouse.tar",
        {"demo-1.0-py3-none-any.whl": b"wheel"},
        member("../../escape", tarfile.SYMTYPE, "/etc/shadow"),
    )
    result = run_module(runtime_install.main, args(tmp_path, archive))
    assert result["failed"]
    assert result["msg"] == (
        "refusing the wheelhouse archive: ../../escape: not a regular file or directory"
    )
    # Nothing unpacked is left, no virtualenv made, the copy of the archive removed.
    assert os.listdir(tmp_path / "cache/wheelhouse") == []
    assert not (tmp_path / "venv").exists() and not archive.exists()


def test_check_mode_says_what_a_real_run_does_and_touches_nothing(
    tmp_path: Path, run_module: RunModule
) -> None:
    archive = tar_of(tmp_path / "wheelhouse.tar", {"demo-1.0-py3-none-any.whl": b"wheel"})
    result = run_module(runtime_install.main, args(tmp_path, archive), check=True, diff=True)
    assert result["changed"] and result["venv_created"] and result["removed"] == []
    record = str(tmp_path / "venv" / RECORD_NAME)
    assert result["diff"] == {
        "before_header": record,
        "after_header": record,
        "before": "",
        "after": "d" * 64 + "\n",
    }
    assert archive.exists() and not (tmp_path / "venv").exists()
    assert not (tmp_path / "cache").exists()


def test_arguments_are_checked(tmp_path: Path, run_module: RunModule) -> None:
    result = run_module(runtime_install.main, {"archive": str(tmp_path / "w.tar")})
    assert result["failed"]
    assert result["msg"].startswith("missing required arguments: ")
    for name in ("digest", "distributions", "project_wheel", "requirement", "venv"):
        assert name in result["msg"]


def wheel(directory: Path, name: str, body: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: one module of its name."""
    path = directory / f"{name}-1.0-py3-none-any.whl"
    info = f"{name}-1.0.dist-info"
    metadata = "Metadata-Version: 2.1\nName: {}\nVersion: 1.0\n{}".format(
        name, "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    files = {
        f"{name}.py": body,
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{file},,\n" for file in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(file, text)
    return path


def wheelhouse(tmp_path: Path, name: str, wheels: list[Path]) -> Path:
    return tar_of(tmp_path / name, {w.name: w.read_bytes() for w in wheels})


def venv_holds(venv: Path) -> tuple[set[str], str]:
    listed = subprocess.run(
        [str(venv / "bin/python"), "-c", "import demo; print(demo.BUILD)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    names = {p.name.split("-")[0] for p in venv.glob("lib/python*/site-packages/*.dist-info")}
    return names, listed


def test_an_install_makes_the_virtualenv_and_an_update_forces_the_build_in_and_slims_it(
    tmp_path: Path, run_module: RunModule
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    first = wheelhouse(
        tmp_path,
        "first.tar",
        [wheel(wheels, "demo", "BUILD = 1\n", ("other",)), wheel(wheels, "other", "")],
    )
    venv = tmp_path / "venv"
    done = run_module(
        runtime_install.main, args(tmp_path, first, "a" * 64, distributions=["demo", "other"])
    )
    assert done["changed"] and done["venv_created"] and done["removed"] == []
    assert venv_holds(venv) == ({"demo", "other"}, "1")
    assert not (venv / "bin/pip").exists()
    assert (venv / RECORD_NAME).read_text() == "a" * 64 + "\n"
    assert stat.S_IMODE((venv / RECORD_NAME).stat().st_mode) == 0o644
    assert os.listdir(tmp_path / "cache/wheelhouse") == [] and not first.exists()

    # The same version number with new code, no longer needing `other`.
    (wheels / "demo-1.0-py3-none-any.whl").unlink()
    second = wheelhouse(tmp_path, "second.tar", [wheel(wheels, "demo", "BUILD = 2\n")])
    done = run_module(runtime_install.main, args(tmp_path, second, "b" * 64), diff=True)
    assert done["changed"] and not done["venv_created"] and done["removed"] == ["other"]
    assert done["diff"]["before"] == "a" * 64 + "\n"
    assert venv_holds(venv) == ({"demo"}, "2")
    assert (venv / RECORD_NAME).read_text() == "b" * 64 + "\n"

    # Installed: nothing to do, and the copy of the archive is removed all the same.
    again = wheelhouse(tmp_path, "again.tar", [wheels / "demo-1.0-py3-none-any.whl"])
    done = run_module(runtime_install.main, args(tmp_path, again, "b" * 64))
    assert not done["changed"] and not again.exists()


def test_a_failing_pip_says_what_it_printed(tmp_path: Path, run_module: RunModule) -> None:
    # The requirement names a wheel the archive does not hold.
    archive = tar_of(tmp_path / "wheelhouse.tar", {"readme.txt": b"no wheels here"})
    result = run_module(runtime_install.main, args(tmp_path, archive))
    assert result["failed"] and result["rc"] != 0
    assert result["msg"].startswith("installing the runtime failed (rc ")
    assert "demo-1.0-py3-none-any.whl" in result["msg"]
    assert os.listdir(tmp_path / "cache/wheelhouse") == [] and not archive.exists()


PLAYBOOK = """
- name: The runtime from its wheelhouse
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Install it
      pyflannel.network.runtime_install: {args}
"""


def test_the_action_plugin_copies_the_archive_over_and_leaves_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    archive = wheelhouse(tmp_path, "wheelhouse.tar", [wheel(wheels, "demo", "BUILD = 1\n")])
    remote_tmp = tmp_path / "remote-tmp"
    monkeypatch.setenv("ANSIBLE_REMOTE_TMP", str(remote_tmp))
    playbook = tmp_path / "install.yml"
    playbook.write_text(PLAYBOOK.format(args=json.dumps(args(tmp_path, archive))))
    python = f"ansible_python_interpreter={sys.executable}"

    checked = ansible_playbook("-i", "localhost,", "-e", python, "--check", str(playbook))
    assert checked.returncode == 0 and "changed=1" in checked.stdout, checked.stdout
    assert not (tmp_path / "venv").exists()

    done = ansible_playbook("-i", "localhost,", "-e", python, str(playbook))
    assert done.returncode == 0 and "changed=1" in done.stdout, done.stdout + done.stderr
    assert venv_holds(tmp_path / "venv") == ({"demo"}, "1")
    # The controller's archive stays; the host's copy went with the task's temporary directory.
    assert archive.exists() and list(remote_tmp.iterdir()) == []
    assert os.listdir(tmp_path / "cache/wheelhouse") == []
