"""The built collection works on its own: `ansible-galaxy collection build`, installed into an
empty directory, runs a module and a role by their FQCN from a playbook outside the repository
(the controller-side code imports pyflannel_runtime from the controller's environment; the
module runs with the agent's virtualenv's Python, here this project's, although the host's
interpreter is one without the runtime). The tarball carries the runtime's source, which the
runtime role builds the nodes' wheelhouse from, its playbooks, and the sanity tests' ignore
files (tests/sanity, for ansible-test, as collections on Galaxy ship them); not the lab
harness, the other tests, the project's tooling or its caches. (tests/integration/test_site.py
provisions lab hosts with the installed tarball's pyflannel.network.site.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.integration.collection_tarball import install, members, run_outside

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
# The project's tooling (molecule's settings in .config), and the in-tree wrappers of playbooks/.
NOT_SHIPPED = {"bench", "scripts", "molecule", "inventories", "collections", ".venv", ".config"}
NOT_SHIPPED |= {"site.yml", "reset.yml", "remove-node.yml"}

PLAYBOOK = """
- name: A role and a module of the installed collection
  hosts: flannel_nodes
  gather_facts: false
  roles:
    - role: pyflannel.network.preflight
  tasks:
    - name: Write a file with the files module
      pyflannel.network.files:
        files:
          - path: "{{ out }}/written.conf"
            content: "{{ _flannel_cluster.flannel_backend_type }}\\n"
            mode: "0640"
"""


def test_the_tarball_ships_the_collection_and_the_sanity_ignore_files_only(
    collection_tarball: Path,
) -> None:
    names = members(collection_tarball)
    top = {name.split("/")[0] for name in names}
    assert {"pyflannel_runtime", "pyproject.toml", "README.md", "playbooks"} <= top
    assert {"playbooks/site.yml", "playbooks/reset.yml", "playbooks/remove_node.yml"} <= set(names)
    assert "pyflannel_runtime/agent/main.py" in names
    assert not [name for name in names if name.startswith("pyflannel_lab")]
    assert not top & NOT_SHIPPED
    assert "changelogs/changelog.yaml" in names
    assert "changelogs/.plugin-cache.yaml" not in names
    ignore_files = {f"tests/sanity/{path.name}" for path in (ROOT / "tests/sanity").iterdir()}
    assert "tests/sanity/ignore-2.19.txt" in ignore_files
    shipped_tests = {name for name in names if name.startswith("tests/")} - {"tests/sanity"}
    assert shipped_tests == ignore_files, "build_ignore in galaxy.yml: of tests/, only tests/sanity"


@pytest.mark.root
def test_the_built_tarball_installed_elsewhere_runs_a_role_and_a_module(
    collection_tarball: Path, tmp_path: Path
) -> None:
    installed = install(tmp_path, collection_tarball)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "play.yml").write_text(PLAYBOOK)
    (work / "hosts.ini").write_text(
        "[flannel_nodes]\n"
        "localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3"
        f" flannel_agent_venv={VENV}"
        # etcd: the default datastore (kubernetes) wants a kubeconfig on the node
        " flannel_datastore=etcd\n"
    )
    done = run_outside(work, installed, "-i", "hosts.ini", "play.yml", "-e", f"out={work}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    written = work / "written.conf"
    assert written.read_text() == "vxlan\n"
    assert written.stat().st_mode & 0o777 == 0o640
