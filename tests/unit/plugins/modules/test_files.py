"""pyflannel.network.files: only what differs is written, atomically, with exact modes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.pyflannel.network.plugins.module_utils import runtime
from ansible_collections.pyflannel.network.plugins.modules import files

from ..conftest import RunModule


def listed(by_path: dict[str, dict[str, object]]) -> list[dict[str, object]]:
    """The module's list of files from a mapping of path to the rest of each entry."""
    return [{"path": path, **spec} for path, spec in by_path.items()]


def wanted(tmp_path: Path) -> dict[str, dict[str, object]]:
    return {
        str(tmp_path / "etc/pyflannel/pyflanneld.env"): {"content": "A=1\n", "mode": "0600"},
        str(tmp_path / "etc/systemd/system/pyflanneld.service"): {
            "content": "[Unit]\n",
            "mode": "0644",
        },
    }


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_then_reports_no_change(tmp_path: Path, run_module: RunModule) -> None:
    files_ = wanted(tmp_path)
    old_umask = os.umask(0o077)
    try:
        first = run_module(files.main, {"files": listed(files_)})
    finally:
        os.umask(old_umask)
    assert first["changed"] and sorted(first["changed_files"]) == sorted(files_)
    env, unit = sorted(files_)
    assert Path(env).read_text() == "A=1\n" and mode(env) == 0o600
    assert mode(unit) == 0o644  # exact, whatever the umask
    assert run_module(files.main, {"files": listed(files_)}) == {
        "failed": False,
        "changed": False,
        "changed_files": [],
    }


def test_check_mode_predicts_and_writes_nothing_and_diff_shows_both(
    tmp_path: Path, run_module: RunModule
) -> None:
    files_ = wanted(tmp_path)
    run_module(files.main, {"files": listed(files_)})
    env = next(p for p in files_ if p.endswith(".env"))
    changed = {**files_, env: {"content": "A=2\n", "mode": "0600"}}
    result = run_module(files.main, {"files": listed(changed)}, check=True, diff=True)
    assert result["changed"] and result["changed_files"] == [env]
    assert Path(env).read_text() == "A=1\n"
    (diff,) = result["diff"]
    assert (diff["before"], diff["after"]) == ("A=1\n", "A=2\n")


def test_a_mode_change_alone_is_a_change(tmp_path: Path, run_module: RunModule) -> None:
    files_ = wanted(tmp_path)
    run_module(files.main, {"files": listed(files_)})
    env = next(p for p in files_ if p.endswith(".env"))
    os.chmod(env, 0o644)
    result = run_module(files.main, {"files": listed(files_)})
    assert result["changed_files"] == [env] and mode(env) == 0o600


def test_bad_input_fails_before_anything_is_written(tmp_path: Path, run_module: RunModule) -> None:
    target = tmp_path / "a"
    result = run_module(
        files.main, {"files": [{"path": str(target), "content": "x", "mode": "rw"}]}
    )
    assert result["failed"] and "is not an octal mode" in result["msg"]
    result = run_module(files.main, {"files": [{"path": "relative/path", "content": "x"}]})
    assert result["failed"] and "absolute path" in result["msg"]
    twice = [{"path": str(target), "content": "x"}, {"path": str(target), "content": "y"}]
    result = run_module(files.main, {"files": twice})
    assert result["failed"] and "given more than once" in result["msg"]
    result = run_module(files.main, {"files": [{"path": str(target)}]})
    assert result["failed"] and "content" in result["msg"]
    assert not target.exists()


def test_without_the_runtime_the_module_says_which_interpreter(
    tmp_path: Path, run_module: RunModule
) -> None:
    with mock.patch.object(
        runtime, "RUNTIME_IMPORT_ERROR", "ModuleNotFoundError: pyflannel_runtime"
    ):
        result = run_module(files.main, {"files": listed(wanted(tmp_path))})
    assert result["failed"]
    assert "pyflannel_runtime" in result["msg"] and "ansible_python_interpreter" in result["msg"]
    assert not any(Path(p).exists() for p in wanted(tmp_path))


def test_sensitive_content_stays_out_of_what_the_module_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "users:\n- name: flannel\n  user: {token: s3cr3t-token}\n"
    target = str(tmp_path / "kubeconfig")
    args = {"files": [{"path": target, "content": secret, "mode": "0600", "sensitive": True}]}
    # The real exit_json: what Ansible receives, module arguments (shown with -v) included.
    with patch_module_args({**args, "_ansible_diff": True}), pytest.raises(SystemExit):
        files.main()
    returned = capsys.readouterr().out
    assert json.loads(returned)["changed_files"] == [target]
    assert "s3cr3t-token" not in returned and "invocation" in returned
    assert Path(target).read_text() == secret and mode(target) == 0o600
