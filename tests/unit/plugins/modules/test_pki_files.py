"""pyflannel.network.pki_files: only what differs is written, atomically, with exact modes,
owner and group; a private key's content never shows; the action plugin reads src on the
controller (a local ansible-playbook run, as the etcd role uses it)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.pyflannel.network.plugins.modules import pki_files

from tests.unit.plugins.test_example_inventory import ansible_playbook

from ..conftest import RunModule

# Whoever runs the tests owns the files, so that they also run without root.
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name
CERTIFICATE = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleQ\n-----END PRIVATE KEY-----\n"


def entries(tmp_path: Path, key: str = KEY) -> list[dict[str, object]]:
    ours = {"owner": OWNER, "group": GROUP}
    return [
        {"dest": str(tmp_path / "etc/pki/ca.crt"), "content": CERTIFICATE, **ours},
        {
            "dest": str(tmp_path / "etc/pki/client.key"),
            "content": key,
            "mode": "0600",
            "private": True,
            **ours,
        },
    ]


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_exact_modes_and_parents_then_reports_no_change(
    tmp_path: Path, run_module: RunModule
) -> None:
    files = entries(tmp_path)
    old_umask = os.umask(0o077)
    try:
        first = run_module(pki_files.main, {"files": files, "directory_mode": "0750"})
    finally:
        os.umask(old_umask)
    crt, key = (str(entry["dest"]) for entry in files)
    assert first["changed"] and first["changed_files"] == [crt, key]
    # Parents first, each with the mode asked for whatever the umask.
    assert first["created_directories"] == [str(tmp_path / "etc"), str(tmp_path / "etc/pki")]
    assert mode(tmp_path / "etc") == mode(tmp_path / "etc/pki") == 0o750
    assert Path(crt).read_text() == CERTIFICATE and mode(crt) == 0o644
    assert Path(key).read_text() == KEY and mode(key) == 0o600
    # No temporary file left beside them.
    assert sorted(p.name for p in (tmp_path / "etc/pki").iterdir()) == ["ca.crt", "client.key"]
    again = run_module(pki_files.main, {"files": files, "directory_mode": "0750"})
    assert again == {
        "failed": False,
        "changed": False,
        "changed_files": [],
        "created_directories": [],
    }


def test_a_mode_change_alone_is_a_change(tmp_path: Path, run_module: RunModule) -> None:
    files = entries(tmp_path)
    run_module(pki_files.main, {"files": files})
    key = str(files[1]["dest"])
    os.chmod(key, 0o644)
    result = run_module(pki_files.main, {"files": files}, diff=True)
    assert result["changed_files"] == [key] and mode(key) == 0o600
    (diff,) = result["diff"]
    assert diff["before"].startswith("mode 0644,") and diff["after"].startswith("mode 0600,")


def test_check_mode_predicts_writes_nothing_and_the_diff_hides_the_key(
    tmp_path: Path, run_module: RunModule
) -> None:
    fresh = run_module(pki_files.main, {"files": entries(tmp_path)}, check=True, diff=True)
    assert fresh["changed"] and fresh["created_directories"] == [
        str(tmp_path / "etc"),
        str(tmp_path / "etc/pki"),
    ]
    assert not (tmp_path / "etc").exists()
    run_module(pki_files.main, {"files": entries(tmp_path)})
    changed = entries(tmp_path, key=KEY.replace("c2Vj", "bmV3"))
    result = run_module(pki_files.main, {"files": changed}, check=True, diff=True)
    key = str(changed[1]["dest"])
    assert result["changed_files"] == [key] and Path(key).read_text() == KEY
    (diff,) = result["diff"]
    assert "c2Vj" not in json.dumps(diff) and "bmV3" not in json.dumps(diff)
    assert diff["before"] == diff["after"] == "(private: content not shown)\n"
    certificate = entries(tmp_path)[:1]
    certificate[0]["content"] = CERTIFICATE.replace("MIIB", "MIIC")
    (shown,) = run_module(pki_files.main, {"files": certificate}, check=True, diff=True)["diff"]
    assert (shown["before"], shown["after"]) == (CERTIFICATE, certificate[0]["content"])


def test_bad_input_fails_before_anything_is_written(tmp_path: Path, run_module: RunModule) -> None:
    files = entries(tmp_path)
    no_such_group = [files[0], {**files[1], "group": "no-such-group-pyflannel"}]
    result = run_module(pki_files.main, {"files": no_such_group})
    assert result["failed"] and "this host has no group 'no-such-group-pyflannel'" in result["msg"]
    result = run_module(pki_files.main, {"files": [files[0], {**files[1], "mode": "rw"}]})
    assert result["failed"] and "is not an octal mode" in result["msg"]
    result = run_module(pki_files.main, {"files": [{**files[0], "dest": "relative/ca.crt"}]})
    assert result["failed"] and "absolute path" in result["msg"]
    result = run_module(pki_files.main, {"files": [files[0], files[0]]})
    assert result["failed"] and "given more than once" in result["msg"]
    assert not (tmp_path / "etc").exists()


def test_a_private_keys_content_stays_out_of_what_the_module_returns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The real exit_json: what Ansible receives, module arguments (shown with -v) included.
    args = {"files": entries(tmp_path), "_ansible_diff": True}
    with patch_module_args(args), pytest.raises(SystemExit):
        pki_files.main()
    returned = capsys.readouterr().out
    assert "invocation" in returned and "MIIB" in returned
    assert "c2VjcmV0LWtleQ" not in returned
    assert json.loads(returned)["changed"]


PLAYBOOK = """
- name: Files from the controller
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Put them in place
      pyflannel.network.pki_files:
        files: {files}
"""


def play(tmp_path: Path, files: list[dict[str, object]], *args: str) -> tuple[int, str]:
    playbook = tmp_path / "pki.yml"
    playbook.write_text(PLAYBOOK.format(files=json.dumps(files)))
    # This interpreter runs the module too: interpreter discovery may find another on the machine.
    python = f"ansible_python_interpreter={sys.executable}"
    done = ansible_playbook("-i", "localhost,", "-e", python, *args, str(playbook))
    return done.returncode, done.stdout + done.stderr


def test_the_action_plugin_reads_src_on_the_controller(tmp_path: Path) -> None:
    pki = tmp_path / "controller"
    pki.mkdir()
    (pki / "ca.crt").write_text(CERTIFICATE)
    (pki / "client.key").write_text(KEY)
    host = tmp_path / "host"
    ours = {"owner": OWNER, "group": GROUP}
    files = [
        {"src": str(pki / "ca.crt"), "dest": str(host / "ca.crt"), **ours},
        {
            "src": str(pki / "client.key"),
            "dest": str(host / "client.key"),
            "mode": "0600",
            "private": True,
            **ours,
        },
    ]
    rc, out = play(tmp_path, files, "--diff", "-v")
    assert rc == 0, out
    assert (host / "ca.crt").read_text() == CERTIFICATE and mode(host / "ca.crt") == 0o644
    assert (host / "client.key").read_text() == KEY and mode(host / "client.key") == 0o600
    assert "changed=1" in out and "c2VjcmV0LWtleQ" not in out
    rc, out = play(tmp_path, files)
    assert rc == 0 and "changed=0" in out, out
    (pki / "binary.der").write_bytes(b"\x30\x82\xff")
    rc, out = play(tmp_path, [{"src": str(pki / "binary.der"), "dest": str(host / "x"), **ours}])
    assert rc == 2 and "binary.der: not UTF-8 text" in out, out
    rc, out = play(tmp_path, [{"src": str(pki / "missing.crt"), "dest": str(host / "y"), **ours}])
    assert rc == 2 and "missing.crt" in out, out
    assert not (host / "x").exists() and not (host / "y").exists()
