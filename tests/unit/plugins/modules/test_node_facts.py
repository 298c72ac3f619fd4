"""pyflannel.network.node_facts on this machine: real `ip -json` output and a real backend
probe in a throwaway network namespace (root); the files' states a re-run decides by, and the
runtime's checks (this interpreter has the runtime, as the agent's virtualenv does)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import os
import pwd
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.pyflannel.network.plugins.modules import cni_plugin, node_facts
from ansible_collections.pyflannel.network.plugins.plugin_utils.host_files import as_wanted

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


def test_paths_report_type_mode_owner_and_a_digest_under_the_key(
    tmp_path: Path, run_module: RunModule
) -> None:
    env = tmp_path / "pyflanneld.env"
    env.write_text("FLANNELD_ETCD_PASSWORD=s3cret\n")
    env.chmod(0o600)
    (tmp_path / "link").symlink_to(env)
    asked = [str(env), str(tmp_path), str(tmp_path / "link"), str(tmp_path / "absent")]
    result = run_module(node_facts.main, {"paths": asked, "digest_key": "k1"})
    paths = result["ansible_facts"]["pyflannel_host"]["paths"]
    state = paths[str(env)]
    owner = pwd.getpwuid(os.getuid()).pw_name
    assert (state["type"], state["mode"], state["owner"], state["uid"]) == (
        "file",
        "0600",
        owner,
        os.getuid(),
    )
    content = b"FLANNELD_ETCD_PASSWORD=s3cret\n"
    assert state["digest"] == hmac.new(b"k1", content, hashlib.sha256).hexdigest()
    assert state["digest"] != hashlib.sha256(content).hexdigest()
    assert paths[str(tmp_path)]["type"] == "directory" and paths[str(tmp_path)]["digest"] is None
    assert paths[str(tmp_path / "link")]["type"] == "link"
    assert paths[str(tmp_path / "absent")] is None
    # The controller finds the file as wanted from the same content, mode and key only.
    assert as_wanted(state, content.decode(), "0600", owner, None, "k1")
    assert not as_wanted(state, content.decode(), "0600", owner, None, "k2")
    assert not as_wanted(state, content.decode(), "0644", owner, None, "k1")
    assert not as_wanted(state, "FLANNELD_ETCD_PASSWORD=other\n", "0600", None, None, "k1")
    assert not as_wanted(state, content.decode(), "0600", "pyft-nobody", None, "k1")


# What systemd 252 prints for a loaded unit, one that is not installed, and one it never heard of.
SYSTEMCTL_SHOW = """Id=pyflanneld.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled

Id=etcd.service
LoadState=not-found
ActiveState=inactive
UnitFileState=
"""


def test_unit_states_come_from_systemctl_show_by_unit_id() -> None:
    states = node_facts.parse_units(["etcd", "pyflanneld", "other.socket"], SYSTEMCTL_SHOW)
    assert states == {
        "pyflanneld": {"load": "loaded", "active": "active", "enabled": "enabled"},
        "etcd": {"load": "not-found", "active": "inactive", "enabled": ""},
        "other.socket": None,
    }


def test_without_the_runtime_the_checks_say_they_were_not_made(
    monkeypatch: pytest.MonkeyPatch, run_module: RunModule
) -> None:
    monkeypatch.setattr(node_facts, "RUNTIME_IMPORT_ERROR", "ModuleNotFoundError")
    result = run_module(node_facts.main, {"checks": {"datapath": True, "ipam": {}}})
    checks = result["ansible_facts"]["pyflannel_host"]["checks"]
    reason = "not made: the module ran without the pyflannel runtime"
    assert checks == {
        "runtime": False,
        "datapath": {"error": reason},
        "network_config": None,
        "leases": None,
        "cni_plugin": None,
        "ipam": {"error": reason},
    }
    # Not asked: nothing at all.
    assert run_module(node_facts.main, {})["ansible_facts"]["pyflannel_host"]["checks"] is None


def test_a_check_that_cannot_be_made_is_reported_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_module: RunModule
) -> None:
    # No agent environment file here: the agent's settings from the environment, an etcd that
    # does not answer.
    monkeypatch.setenv("FLANNELD_ETCD_ENDPOINTS", f"http://127.0.0.1:{closed_port()}")
    conflist = str(tmp_path / "10-flannel.conflist")
    asked = {
        "datapath": True,
        "network_config": True,
        "leases": True,
        "ipam": {"conflist": conflist},
    }
    result = run_module(node_facts.main, {"checks": asked})
    assert not result["failed"]
    checks = result["ansible_facts"]["pyflannel_host"]["checks"]
    assert checks["runtime"] is True
    assert not checks["datapath"]["clean"]
    assert checks["datapath"]["error"].startswith("cannot verify: ")
    assert checks["network_config"]["error"] and checks["leases"]["error"]
    assert not checks["ipam"]["clean"] and conflist in checks["ipam"]["error"]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_cni_plugin_check_says_what_the_cni_plugin_module_would_do(
    tmp_path: Path, run_module: RunModule
) -> None:
    plugins = tmp_path / "usr-lib-cni"
    plugins.mkdir()
    for name in ("bridge", "loopback"):
        (plugins / name).write_text("#!/bin/false\n")
    spec = {
        "bin_dir": str(tmp_path / "opt-cni-bin"),
        "plugins_dir": str(plugins),
        "link": ["bridge", "loopback"],
        "record": str(tmp_path / "cni-plugins.json"),
    }

    def checked() -> dict[str, Any]:
        result = run_module(node_facts.main, {"checks": {"cni_plugin": spec}}, check=True)
        found: dict[str, Any] = result["ansible_facts"]["pyflannel_host"]["checks"]["cni_plugin"]
        return found

    before = checked()
    assert before == {
        "bin_dir": spec["bin_dir"],
        "plugins_dir": spec["plugins_dir"],
        "link": ["bridge", "loopback"],
        "current": False,
    }
    assert run_module(cni_plugin.main, spec)["changed"]
    assert checked()["current"] is True
    assert not run_module(cni_plugin.main, spec, check=True)["changed"]
    os.unlink(os.path.join(spec["bin_dir"], "loopback"))
    assert checked()["current"] is False
    assert run_module(cni_plugin.main, spec, check=True)["changed"]


class _Health(http.server.BaseHTTPRequestHandler):
    """An etcd member's /health: the status and body the test sets on the server."""

    def do_GET(self) -> None:
        status, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_the_etcd_health_is_read_from_the_members_answer(
    health_server: http.server.HTTPServer, run_module: RunModule
) -> None:
    """How an answer reads (TLS, client certificates and a member that is down are
    tests/integration/test_node_facts_etcd.py's, with a real etcd)."""
    url = f"http://127.0.0.1:{health_server.server_address[1]}/health"

    def health(status: int, body: bytes) -> dict[str, Any]:
        health_server.answer = (status, body)  # type: ignore[attr-defined]
        result = run_module(node_facts.main, {"etcd_health": {"url": url}}, check=True)
        found: dict[str, Any] = result["ansible_facts"]["pyflannel_host"]["etcd_health"]
        return found

    assert health(200, b'{"health":"true","reason":""}') == {
        "url": url,
        "healthy": True,
        "reason": "",
    }
    # etcd answers 503 with its JSON when unhealthy: the status says it, as the role's uri does.
    assert health(503, b'{"health":"false","reason":"RAFT NO LEADER"}') == {
        "url": url,
        "healthy": False,
        "reason": "HTTP Error 503: Service Unavailable",
    }
    assert health(200, b'{"health":"false"}') == {
        "url": url,
        "healthy": False,
        "reason": "health 'false'",
    }
    # No JSON object, or one cut at the size read: nothing said about health.
    for body in (b"[1]", b"not json", b'{"health":"true"' + b" " * 5000 + b"}"):
        assert health(200, body)["healthy"] is False
