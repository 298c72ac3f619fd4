"""A re-run's skips on the controller, through local ansible-playbook runs: node_facts runs with
the agent's virtualenv's Python when there is one (and makes the runtime's checks), else with the
host's; the files and pki_files actions run no module where node_facts found every file as
wanted, and run it where anything differs. A module that runs where its interpreter cannot start
fails the play: that is how these tests see whether it ran."""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pyflannel.network.plugins.module_utils.file_state import file_digest
from ansible_collections.pyflannel.network.plugins.plugin_utils.host_files import unchanged

from tests.unit.plugins.test_example_inventory import ansible_playbook

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name
# The virtualenv this test runs in has pyflannel_runtime, as the agent's does.
VENV = str(Path(sys.executable).parent.parent)

PLAYBOOK = """
- name: A node's files, known and written
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{{{ host_python }}}}"
  tasks:
    - name: The node's state
      pyflannel.network.node_facts:
        venv: "{{{{ venv }}}}"
        paths: {paths}
        digest_key: "{{{{ key }}}}"
        checks:
          cni_plugin: {{}}

    - name: The agent's files
      pyflannel.network.files:
        venv: "{{{{ venv }}}}"
        files: {files}
        known_states: "{{{{ ansible_facts.pyflannel_host.paths }}}}"
        digest_key: "{{{{ key }}}}"
      register: written

    - name: The certificates, by a module that cannot start here
      pyflannel.network.pki_files:
        files: {pki}
        known_states: "{{{{ ansible_facts.pyflannel_host.paths }}}}"
        digest_key: "{{{{ key }}}}"
      vars:
        ansible_python_interpreter: /nonexistent/python
      register: certificates
      when: pki_too | bool

    - name: Keep the results
      vars:
        ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
      ansible.builtin.copy:
        content: "{{{{ {{'facts': ansible_facts.pyflannel_host, 'written': written,
                       'certificates': certificates}} | to_json }}}}"
        dest: "{results}"
        mode: "0600"
"""


def play(tmp_path: Path, venv: str, python: str, pki_too: bool = False) -> dict[str, Any]:
    files = [
        {"path": str(tmp_path / "pyflanneld.env"), "content": "FLANNELD_IFACE=eth0\n"},
        {"path": str(tmp_path / "net-conf.json"), "content": "{}\n", "mode": "0600"},
    ]
    pki = [{"dest": str(tmp_path / "ca.crt"), "content": "CA\n", "owner": OWNER, "group": GROUP}]
    paths = [entry["path"] for entry in files] + [pki[0]["dest"]]
    results = tmp_path / "results.json"
    results.unlink(missing_ok=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        PLAYBOOK.format(
            paths=json.dumps(paths),
            files=json.dumps(files),
            pki=json.dumps(pki),
            results=results,
        )
    )
    done = ansible_playbook(
        "-i", "localhost,",
        "-e", f"host_python={python}",
        "-e", f"venv={venv}", "-e", "key=k3y", "-e", f"pki_too={pki_too}",
        str(playbook),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "k3y" not in done.stdout, "the digest key shows"
    found: dict[str, Any] = json.loads(results.read_text())
    return found


def test_files_known_as_wanted_run_no_module_and_a_difference_runs_it(tmp_path: Path) -> None:
    first = play(tmp_path, VENV, sys.executable)
    assert first["written"]["changed"]
    assert (tmp_path / "net-conf.json").stat().st_mode & 0o777 == 0o600
    # No virtualenv: node_facts runs with the host's Python, and the files module would fail to
    # start; nothing differs, so it does not run.
    (tmp_path / "ca.crt").write_text("CA\n")
    again = play(tmp_path, str(tmp_path / "no-venv"), sys.executable, pki_too=True)
    assert not again["written"]["changed"] and again["written"]["changed_files"] == []
    assert not again["certificates"]["changed"]
    # A mode that differs: the module runs (and cannot start without its virtualenv).
    (tmp_path / "net-conf.json").chmod(0o644)
    with pytest.raises(AssertionError, match="pyflannel_runtime is not installed on this host"):
        play(tmp_path, str(tmp_path / "no-venv"), sys.executable)


def test_node_facts_takes_the_virtualenvs_python_when_there_is_one(tmp_path: Path) -> None:
    # The host's own Python cannot start: only the virtualenv's can have run node_facts.
    with_venv = play(tmp_path, VENV, "/nonexistent/python")["facts"]
    assert with_venv["checks"]["runtime"] and with_venv["checks"]["cni_plugin"]["current"] is False
    # No virtualenv: the host's own Python.
    without = play(tmp_path, str(tmp_path / "no-venv"), sys.executable)["facts"]
    assert without["runtime"] == {"python": None, "wheelhouse": None}


def test_only_an_exact_known_state_stands_for_a_file() -> None:
    state = {"type": "file", "mode": "0640", "uid": 0, "gid": 42, "owner": "root", "group": "etcd"}
    states = {"/k": {**state, "digest": file_digest(b"key\n", "s")}}
    wanted = {"dest": "/k", "content": "key\n", "mode": "0640", "group": "etcd"}
    defaults = {"owner": "root", "group": "root"}
    assert unchanged([wanted], states, "s", path_key="dest", defaults=defaults)
    assert unchanged([{**wanted, "group": 42, "owner": 0}], states, "s", path_key="dest")
    for differs in ({"mode": "0600"}, {"group": "root"}, {"content": "other\n"}, {"dest": "/x"}):
        assert not unchanged([{**wanted, **differs}], states, "s", path_key="dest")
    assert not unchanged([wanted], states, "other key", path_key="dest")
    # Defaults count: the module's owner and group are root's.
    assert not unchanged([{**wanted, "group": None}], states, "s", "dest", defaults)
    # No digest (too large, not a file), no states, no files, anything malformed: the module runs.
    assert not unchanged([wanted], {"/k": {**state, "digest": None}}, "s", path_key="dest")
    assert not unchanged([wanted], None, "s", path_key="dest")
    assert not unchanged([], states, "s", path_key="dest")
    assert not unchanged("files", states, "s", path_key="dest")
    assert not unchanged([{**wanted, "mode": "rw"}], states, "s", path_key="dest")
