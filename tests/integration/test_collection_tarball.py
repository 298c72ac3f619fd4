"""The built collection works on its own: `ansible-galaxy collection build`, installed into an
empty directory, runs a module and a role by their FQCN from a playbook outside the repository
(the controller-side code imports pyflannel_runtime from the controller's environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PLAYBOOK = """
- name: A role and a module of the installed collection
  hosts: flannel_nodes
  gather_facts: false
  roles:
    - role: pyflannel.network.preflight
  tasks:
    - name: Write a file with the files module
      pyflannel.network.files:
        files: "{{ {out + '/written.conf': {'content': _flannel_cluster.flannel_backend_type + '\\n', 'mode': '0640'}} }}"
"""


@pytest.mark.root
def test_the_built_tarball_installed_elsewhere_runs_a_role_and_a_module(tmp_path: Path) -> None:
    built = tmp_path / "built"
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--output-path", built, ROOT],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (tarball,) = built.glob("pyflannel-network-*.tar.gz")
    with tarfile.open(tarball) as tar:
        top = {name.split("/")[0] for name in tar.getnames()}
    assert "roles" in top and "plugins" in top
    assert not top & {"pyflannel_runtime", "tests", "bench", "inventories", "collections", ".venv"}

    installed = tmp_path / "installed"
    # --no-deps: Galaxy is unreachable; the dependencies come with the `ansible` package.
    # --force: a copy installed elsewhere (molecule puts one in ~/.ansible) must not count.
    subprocess.run(
        [
            BIN / "ansible-galaxy",
            "collection",
            "install",
            "--no-deps",
            "--force",
            "-p",
            installed,
            tarball,
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "play.yml").write_text(PLAYBOOK)
    (work / "hosts.ini").write_text(
        "[flannel_nodes]\n"
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}"
        # etcd: the default datastore (kubernetes) wants a kubeconfig on the node
        " flannel_datastore=etcd\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_HOME": str(tmp_path / "home"),
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        [BIN / "ansible-playbook", "-i", "hosts.ini", "play.yml", "-e", f"out={work}"],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    written = work / "written.conf"
    assert written.read_text() == "vxlan\n"
    assert written.stat().st_mode & 0o777 == 0o640
