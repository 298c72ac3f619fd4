"""pyflannel.network.node_facts on this machine: real `ip -json` output and a real backend
probe in a throwaway network namespace (root)."""

from __future__ import annotations

import os
import subprocess

import pytest
from ansible_collections.pyflannel.network.plugins.modules import node_facts

from pyflannel_controller.inventory import NodeFacts
from pyflannel_controller.wheelhouse import local_target, target_of

from ..conftest import RunModule


@pytest.mark.root
def test_facts_describe_the_links_and_the_kernel(run_module: RunModule) -> None:
    before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    result = run_module(node_facts.main, {"route_to": ["127.0.0.1"]}, check=True)
    facts = result["ansible_facts"]["pyflannel_host"]
    assert not result["changed"]
    names = {link["name"] for link in facts["links"]}
    assert "lo" in names
    assert facts["routes"]["127.0.0.1"]["oif"] == next(
        link["index"] for link in facts["links"] if link["name"] == "lo"
    )
    assert facts["backends"]["vxlan"] == {"supported": True, "reason": ""}
    assert facts["runtime"] == {"python": None, "wheelhouse": None}
    # The probe's device lived in its own namespace: the host's links are unchanged.
    after = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert before.stdout == after.stdout
    parsed = NodeFacts.from_fact(facts)
    assert len(parsed.links) == len(facts["links"])


def test_the_runtime_stamp_is_reported(tmp_path: os.PathLike[str], run_module: RunModule) -> None:
    venv = os.path.join(tmp_path, "venv")
    os.makedirs(os.path.join(venv, "bin"))
    open(os.path.join(venv, "bin", "python"), "w").close()
    with open(os.path.join(venv, node_facts.WHEELHOUSE_STAMP), "w") as stamp:
        stamp.write("abc123\n")
    result = run_module(node_facts.main, {"venv": venv})
    runtime = result["ansible_facts"]["pyflannel_host"]["runtime"]
    assert runtime == {"python": os.path.join(venv, "bin", "python"), "wheelhouse": "abc123"}


def test_installed_packages_come_from_dpkg(run_module: RunModule) -> None:
    result = run_module(node_facts.main, {"packages": ["etcd-server", "pyflannel-no-such-pkg"]})
    packages = result["ansible_facts"]["pyflannel_host"]["packages"]
    expected = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "etcd-server"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert packages == {"etcd-server": expected, "pyflannel-no-such-pkg": None}


def test_files_are_reported_as_regular_files_or_not(
    tmp_path: os.PathLike[str], run_module: RunModule
) -> None:
    kubeconfig = os.path.join(tmp_path, "kubelet.conf")
    open(kubeconfig, "w").close()
    missing = os.path.join(tmp_path, "absent.conf")
    args = {"files": [kubeconfig, missing, str(tmp_path)]}
    facts = run_module(node_facts.main, args, check=True)["ansible_facts"]["pyflannel_host"]
    assert facts["files"] == {kubeconfig: True, missing: False, str(tmp_path): False}
    assert NodeFacts.from_fact(facts).files == facts["files"]


def test_the_interpreter_is_reported_as_the_wheelhouse_builder_reads_it(
    run_module: RunModule,
) -> None:
    """What the controller builds the node's wheelhouse for: here, this machine's Python."""
    result = run_module(node_facts.main, {})
    interpreter = result["ansible_facts"]["pyflannel_host"]["interpreter"]
    assert target_of(interpreter) == local_target()
