"""`pyflannel status` against real agents, leases and kernels: AgentLabs (etcd + pyflanneld)
for etcd mode with vxlan and udp, the Kubernetes API double for kube mode, and a namespace
whose etcd and agent are reachable only from inside it."""

from __future__ import annotations

import errno
import http.server
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.etcd_server import free_port
from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime import __version__
from pyflannel_runtime.cli.main import main
from pyflannel_runtime.netlink.netns import run_in_netns
from tests.fakes.kube_api import FakeKubeApi

RUN_CLI = "import sys; from pyflannel_runtime.cli.main import main; sys.exit(main(sys.argv[1:]))"
P = "flannel.alpha.coreos.com/"


@pytest.fixture(scope="module")
def lab() -> Iterator[AgentLab]:
    with AgentLab({"Type": "vxlan"}, prefix="pst") as running:
        running.start_all()
        yield running


def status(lab: AgentLab, host: LabHost, *extra: str) -> subprocess.CompletedProcess[str]:
    """`pyflannel status` run inside the host's namespace, as an operator on the node would,
    with the agent's settings (no environment file: this machine's is not the lab's)."""
    assert lab.etcd is not None
    return lab.net.run(
        host.ns,
        sys.executable,
        "-c",
        RUN_CLI,
        "status",
        f"--etcd-endpoints={lab.etcd.endpoint}",
        f"--subnet-file={lab.subnet_file(host)}",
        "--healthz-port=8081",
        "--agent-env=",
        *extra,
        check=False,
    )


@pytest.mark.root
@pytest.mark.etcd
def test_every_peer_shows_programmed_on_every_host(lab: AgentLab) -> None:
    for host in lab.net.hosts:
        done = status(lab, host)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.startswith(f"Agent ready (pyflanneld {__version__}, up ")
        assert "\nChecked on this host:\n  flannel.1 has MTU 1450\n" in done.stdout
        assert done.stdout.endswith(
            "\n3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready\n"
        )
        report = json.loads(status(lab, host, "-o", "json").stdout)
        assert report["agent"]["state"] == "ready" and report["agent"]["backend"] == "vxlan"
        own = [lease["subnet"] for lease in report["leases"] if lease["own"]]
        assert own == [str(host.subnet)]
        peers = {
            lease["subnet"]: lease["datapath"] for lease in report["leases"] if not lease["own"]
        }
        assert peers == {str(h.subnet): "programmed" for h in lab.net.hosts if h is not host}
        assert report["ok"] is True and report["stale"] == []


@pytest.mark.root
@pytest.mark.etcd
def test_a_route_deleted_by_hand_shows_missing_until_the_agent_repairs_it(lab: AgentLab) -> None:
    host, peer = lab.net.hosts[0], lab.net.hosts[1]
    lab.stop_agent(host)  # its 1 s reconcile would repair the route at once
    try:
        lab.net.ip(host.ns, "route", "del", str(peer.subnet))
        lab.net.ip(host.ns, "neigh", "replace", "10.244.9.0", "lladdr", "0a:58:0a:f4:09:00",
                   "dev", "flannel.1", "nud", "permanent")  # fmt: skip
        done = status(lab, host)
        assert done.returncode == 1, done.stdout + done.stderr
        route = f"route {peer.subnet} via {peer.subnet.network_address} dev flannel.1 onlink"
        assert f"  {peer.subnet}: {route}\n" in done.stdout
        assert "  neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1\n" in done.stdout
        assert done.stdout.startswith("Agent down: nothing answers on 127.0.0.1:8081: ")
        assert done.stdout.endswith("3 leases, 1 peer programmed, 1 missing, 1 stale; agent down\n")
        report = json.loads(status(lab, host, "--output=json").stdout)
        missing = {lease["subnet"]: lease["missing"] for lease in report["leases"]}
        assert missing[str(peer.subnet)] == [route]
        assert report["stale"] == ["neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1"]
        assert report["ok"] is False
    finally:
        lab.start_agent(host)
        lab.wait_ready(host)
    repaired = status(lab, host, "--wait", "20")
    assert repaired.returncode == 0, "the agent's reconcile repairs both: " + repaired.stdout
    assert repaired.stdout.endswith(
        "3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready\n"
    )


@pytest.mark.root
@pytest.mark.etcd
def test_unreadable_leases_are_listed_as_rejected(lab: AgentLab) -> None:
    host = lab.net.hosts[0]
    key = "/coreos.com/network/subnets/10.244.15.0-24"
    lab.etcdctl("put", key, "{not json")
    try:
        done = status(lab, host)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "\nRejected (never programmed):\n  10.244.15.0-24: " in done.stdout
        assert done.stdout.endswith(
            "3 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready\n"
        )
        report = json.loads(status(lab, host, "--output=json").stdout)
        assert [u["name"] for u in report["unreadable"]] == ["10.244.15.0-24"]
        assert report["summary"]["rejected"] == 1 and report["ok"] is False
    finally:
        lab.etcdctl("del", key)
    assert status(lab, host).returncode == 0


@pytest.mark.root
@pytest.mark.etcd
def test_a_stopped_agent_is_down_and_fails_the_status_though_its_datapath_stays(
    lab: AgentLab,
) -> None:
    host = lab.net.hosts[2]
    lab.stop_agent(host)
    try:
        done = status(lab, host)
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stdout.startswith(
            "Agent down: nothing answers on 127.0.0.1:8081: connection refused\n"
        )
        assert done.stdout.endswith(
            "\n3 leases, 2 peers programmed, 0 missing, 0 stale; agent down\n"
        )
        report = json.loads(status(lab, host, "-o", "json").stdout)
        assert report["agent"]["state"] == "down" and report["ok"] is False
        # Waited for, it stays down: the last check is shown when the time is up.
        waited = status(lab, host, "--wait", "1")
        assert waited.returncode == 1, waited.stdout + waited.stderr
        assert waited.stdout == done.stdout
        assert waited.stderr.endswith("pyflannel status: not healthy after 1s\n"), waited.stderr
        # Asked as for an agent with no health server: no pid file (a clean exit removes it)
        # and no agent process in the host's namespace.
        healthz_off = status(lab, host, "--healthz-port=0")
        assert healthz_off.returncode == 1, healthz_off.stdout + healthz_off.stderr
        assert healthz_off.stdout.startswith(
            f"Agent down: no pid file at {pid_file(lab, host)} and no flanneld or pyflanneld "
            "process in this network namespace\n"
        )
    finally:
        lab.start_agent(host)
        lab.wait_ready(host)


@pytest.mark.root
@pytest.mark.etcd
def test_status_wait_returns_once_a_stopped_agent_is_back(lab: AgentLab) -> None:
    host = lab.net.hosts[1]
    lab.stop_agent(host)
    assert lab.etcd is not None
    try:
        waiting = subprocess.Popen(
            ["ip", "netns", "exec", host.ns, sys.executable, "-c", RUN_CLI, "status",
             f"--etcd-endpoints={lab.etcd.endpoint}", f"--subnet-file={lab.subnet_file(host)}",
             "--healthz-port=8081", "--agent-env=", "--wait=120", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert waiting.stderr is not None
        first = waiting.stderr.readline()  # said once the first check found the agent down
        assert first.startswith("pyflannel status: waiting, ") and first.endswith(
            ": 3 leases, 2 peers programmed, 0 missing, 0 stale; agent down\n"
        ), first
    finally:
        lab.start_agent(host)
        lab.wait_ready(host)
    out, rest = waiting.communicate(timeout=150)
    assert waiting.returncode == 0, first + rest
    report = json.loads(out)
    assert report["ok"] is True and report["agent"]["state"] == "ready"


def pid_file(lab: AgentLab, host: LabHost) -> Path:
    return lab.subnet_file(host).with_name("pyflanneld.pid")


def statuses(lab: AgentLab, host: LabHost, *extra: str) -> list[subprocess.CompletedProcess[str]]:
    """`pyflannel status` as run on the host, and with --netns from the root namespace."""
    from_root = subprocess.run(
        [*lab.status_argv(host), *extra], capture_output=True, text=True, check=False
    )
    return [status(lab, host, *extra), from_root]


@pytest.mark.root
@pytest.mark.etcd
def test_an_agent_without_a_health_server_is_found_by_its_pid_file_until_it_is_killed(
    lab: AgentLab,
) -> None:
    host = lab.net.hosts[2]
    lab.stop_agent(host)
    assert not pid_file(lab, host).exists(), "a clean exit removes the pid file"
    agent = lab.start_agent(host, "--healthz-port=0")
    try:
        deadline = time.monotonic() + 60
        while status(lab, host, "--healthz-port=0").returncode != 0:
            assert agent.process.poll() is None, agent.log()
            assert time.monotonic() < deadline, status(lab, host, "--healthz-port=0").stdout
            time.sleep(0.2)
        assert pid_file(lab, host).read_text() == f"{agent.process.pid}\n"
        for done in statuses(lab, host, "--healthz-port=0"):
            assert done.returncode == 0, done.stdout + done.stderr
            first = done.stdout.splitlines()[0]
            assert first.startswith("Agent ready (pyflanneld (version not published), up "), first
            assert first.endswith(
                f", pid {agent.process.pid}, no health server, found by {pid_file(lab, host)})"
            ), first
        lab.stop_agent(host, signal.SIGKILL)
        for done in statuses(lab, host, "--healthz-port=0"):
            assert done.returncode == 1, done.stdout + done.stderr
            assert done.stdout.startswith(
                f"Agent down: pid {agent.process.pid} from {pid_file(lab, host)} is not running "
                "(the agent did not exit cleanly)\n"
            ), done.stdout
            assert done.stdout.endswith("; agent down\n"), done.stdout
    finally:
        if host.n in lab.agents:
            lab.stop_agent(host)
        lab.start_agent(host)
        lab.wait_ready(host)


@pytest.mark.root
@pytest.mark.etcd
def test_a_lease_with_no_subnet_is_rejected_and_every_agent_keeps_its_peers(
    lab: AgentLab,
) -> None:
    key = "/coreos.com/network/subnets/0.0.0.0-0"
    value = json.dumps(
        {"PublicIP": "192.0.2.99", "BackendType": "vxlan",
         "BackendData": {"VtepMAC": "0a:58:0a:f4:63:00"}}
    )  # fmt: skip
    before = {n: agent.process.pid for n, agent in lab.agents.items()}
    lab.etcdctl("put", key, value)
    try:
        for host in lab.net.hosts:
            for done in statuses(lab, host):
                assert done.returncode == 1, done.stdout + done.stderr
                assert "Traceback" not in done.stderr, done.stderr
                assert (
                    "\nRejected (never programmed):\n"
                    "  0.0.0.0-0: no subnet in either family (IPv4 part 0.0.0.0/0, no IPv6 part)\n"
                ) in done.stdout, done.stdout
                assert done.stdout.endswith(
                    "4 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected; agent ready\n"
                ), done.stdout
            report = json.loads(status(lab, host, "-o", "json").stdout)
            assert report["summary"]["rejected"] == 1 and report["ok"] is False
        assert {n: a.process.pid for n, a in lab.agents.items()} == before
        assert all(agent.process.poll() is None for agent in lab.agents.values())
    finally:
        lab.etcdctl("del", key)
    assert all(status(lab, host).returncode == 0 for host in lab.net.hosts)


@pytest.mark.root
@pytest.mark.etcd
def test_leases_only_asks_neither_the_agent_nor_the_kernel(lab: AgentLab) -> None:
    done = status(lab, lab.net.hosts[0], "--leases-only", "--healthz-port=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("+---")
    assert done.stdout.endswith("\n3 leases, agent and datapath not checked\n")
    assert "programmed" not in done.stdout and "missing" not in done.stdout
    report = json.loads(status(lab, lab.net.hosts[0], "--leases-only", "-o", "json").stdout)
    assert report["agent"] is None and report["summary"]["datapath_checked"] is False


def test_unreachable_etcd_exits_2_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--etcd-endpoints=http://127.0.0.1:1", "--timeout=3", "--leases-only",
                 "--agent-env="])  # fmt: skip
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("pyflannel status: cannot read leases from etcd http://127.0.0.1:1")
    assert "\nhint: status uses the agent's settings, from its flags (e.g. --etcd-endpoints" in err


@pytest.fixture
def bare_ns() -> Iterator[str]:
    """A host with its underlay address but no flannel device."""
    name = f"pst-{secrets.token_hex(3)}-bare"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for args in (["link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"],
                     ["addr", "add", "192.0.2.11/24", "dev", "eth0"],
                     ["link", "set", "eth0", "up"]):  # fmt: skip
            subprocess.run(["ip", "-n", name, *args], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def add_flannel_node(api: FakeKubeApi, name: str, n: int) -> None:
    api.add_node(
        name,
        pod_cidr=f"10.244.{n}.0/24",
        annotations={
            P + "kube-subnet-manager": "true",
            P + "backend-type": "vxlan",
            P + "backend-data": f'{{"VNI":1,"VtepMAC":"0a:58:0a:f4:0{n}:00"}}',
            P + "public-ip": f"192.0.2.1{n}",
        },
    )


@pytest.mark.root
def test_kube_mode_names_nodes_and_reports_a_missing_device(
    bare_ns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "net-conf.json"
    conf.write_text('{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}')
    # Everything status does for --netns happens in that namespace, the API requests too.
    subprocess.run(["ip", "-n", bare_ns, "link", "set", "lo", "up"], check=True)
    with run_in_netns(bare_ns, FakeKubeApi) as api:
        add_flannel_node(api, "node-a", 1)
        add_flannel_node(api, "node-b", 2)
        api.add_node("not-flannel", pod_cidr="10.244.7.0/24", annotations={})
        base = ["status", "--kube-subnet-mgr", f"--kube-api-url={api.url}",
                f"--net-config-path={conf}", "--public-ip=192.0.2.11", "--agent-env="]  # fmt: skip
        assert main([*base, f"--netns={bare_ns}", "--leases-only"]) == 0
        listing = capsys.readouterr().out
        assert "| node-a | 10.244.1.0/24 |" in listing and "not-flannel" not in listing
        api.add_node("broken", pod_cidr="10.244.8.0/24", annotations={
            P + "kube-subnet-manager": "true", P + "public-ip": "not-an-ip"})  # fmt: skip
        assert main([*base, f"--netns={bare_ns}", "--output=json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(lease["node"], lease["datapath"]) for lease in report["leases"]] == [
        ("node-a", "own"),
        ("node-b", "missing"),
    ]
    assert report["problems"] == ["device flannel.1 does not exist"]
    assert report["unreadable"] == [{"name": "broken", "reason": 'invalid IP address: "not-an-ip"'}]
    assert (
        "route 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink" in report["leases"][1]["missing"]
    )


@pytest.fixture(scope="module")
def udp_lab() -> Iterator[AgentLab]:
    with AgentLab({"Type": "udp"}, prefix="psu") as running:
        running.start_all()
        yield running


@pytest.mark.root
@pytest.mark.etcd
def test_a_udp_node_is_checked_device_route_workers_and_forwarder(udp_lab: AgentLab) -> None:
    lab = udp_lab
    host = lab.net.hosts[0]
    done = status(lab, host)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "\nChecked on this host:\n"
        f"  flannel0 is up with {host.subnet.network_address}/32\n"
        "  route 10.244.0.0/16 dev flannel0\n"
        "  udp forwarding workers alive: 1 send, 1 receive for 1 queue\n"
        "  flannel0 has MTU 1472\n"
    ) in done.stdout
    assert done.stdout.endswith("\n3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready\n")
    report = json.loads(status(lab, host, "-o", "json").stdout)
    assert [lease["datapath"] for lease in report["leases"]] == ["own", "programmed", "programmed"]
    # Without the agent's /statusz the forwarder's routes are unknown: said, not counted. The
    # agent itself is still found, by its pid file.
    blind = status(lab, host, "--healthz-port=0")
    assert blind.returncode == 0, blind.stdout + blind.stderr
    assert blind.stdout.endswith("\n3 leases, peers not checked, 0 stale; agent ready\n")


@pytest.mark.root
@pytest.mark.etcd
def test_a_stuck_udp_agent_and_a_dead_worker_show(udp_lab: AgentLab) -> None:
    """A frozen agent neither answers nor revives workers: both are reported."""
    lab = udp_lab
    host = lab.net.hosts[1]
    agent = lab.agents[host.n].process
    workers = [
        int(pid)
        for pid in subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True,
                                  text=True).stdout.split()
    ]  # fmt: skip
    (sender,) = [pid for pid in workers if " send " in Path(f"/proc/{pid}/cmdline").read_text()
                 .replace("\0", " ")]  # fmt: skip
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        os.kill(sender, signal.SIGKILL)
        done = status(lab, host, "--timeout=2")
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(
        "Agent down: nothing answers on 127.0.0.1:8081: no answer in time\n"
    )
    assert "\nProblems:\n  udp forwarding workers alive: 0 send, 1 receive for 1 queue\n" in (
        done.stdout
    )
    # The agent's reconcile restarts the worker once it runs again.
    deadline = time.monotonic() + 30
    while status(lab, host).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status(lab, host).returncode == 0


@pytest.fixture
def private_ns() -> Iterator[str]:
    """A namespace with only its loopback up."""
    name = f"pst-{secrets.token_hex(3)}-priv"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def refused_here(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port in this (the root) namespace."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED


@pytest.mark.root
@pytest.mark.etcd
def test_with_netns_the_lease_store_and_the_agent_are_reached_from_inside_it(
    private_ns: str, etcd_factory: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the root namespace: an etcd and an agent on the namespace's own loopback, at ports
    where nothing listens in the root namespace."""
    etcd_port, agent_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    server = etcd_factory(netns=private_ns, host="127.0.0.1", client_port=etcd_port,
                          peer_port=free_port("127.0.0.1"))  # fmt: skip
    server.etcdctl("put", "/coreos.com/network/config",
                   '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}')  # fmt: skip
    server.etcdctl("put", "/coreos.com/network/subnets/10.244.1.0-24", '{"PublicIP":"192.0.2.11"}')
    answers = {"/healthz": b"flanneld is running", "/readyz": b"flanneld is ready"}
    with flanneld_answers_in(private_ns, agent_port, answers):
        assert refused_here(etcd_port) and refused_here(agent_port)
        flags = ["status", f"--etcd-endpoints=http://127.0.0.1:{etcd_port}",
                 f"--healthz-port={agent_port}", "--public-ip=192.0.2.11", "--agent-env=",
                 "--timeout=5"]  # fmt: skip
        code = main([*flags, f"--netns={private_ns}"])
        out = capsys.readouterr().out
        assert out.startswith(
            f"Agent ready (flanneld (version not published), http://127.0.0.1:{agent_port})\n"
        )
        assert "| 10.244.1.0/24 | 192.0.2.11 |" in out
        assert code == 1 and "  device flannel.1 does not exist\n" in out  # a bare namespace
        assert main([*flags]) == 2  # the same command from the root namespace reaches nothing
        assert "Agent down: nothing answers" in capsys.readouterr().out


@contextmanager
def flanneld_answers_in(netns: str, port: int, answers: dict[str, bytes]) -> Iterator[None]:
    """An HTTP server on the namespace's 127.0.0.1:port answering as Go flanneld's does."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.get(self.path, b"404 page not found\n")
            self.send_response(200 if self.path in answers else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = run_in_netns(netns, lambda: socket.create_server(("127.0.0.1", port)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.root
def test_bare_status_without_the_agents_settings_says_what_to_give(
    private_ns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No flags, no FLANNELD_* variables, no environment file, nothing at the default
    endpoints (a bare namespace): one error naming what was tried, and how to point it."""
    from pyflannel_runtime.agent import cli_flags

    for name in [n for n in os.environ if n.startswith("FLANNELD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(cli_flags, "AGENT_ENV_FILE", str(Path(private_ns) / "absent.env"))
    assert run_in_netns(private_ns, lambda: main(["status"])) == 2
    out, err = capsys.readouterr()
    # flanneld's default runs no health server: the agent is looked for, and none runs here.
    assert out == (
        "Agent down: no pid file at /run/flannel/pyflanneld.pid and no flanneld or pyflanneld "
        "process in this network namespace\n"
    )
    assert err.startswith(
        "pyflannel status: cannot read leases from etcd "
        "http://127.0.0.1:4001,http://127.0.0.1:2379 (prefix /coreos.com/network): "
    )
    assert err.endswith(
        "\nhint: status uses the agent's settings, from its flags (e.g. --etcd-endpoints, or "
        "--kube-subnet-mgr --kubeconfig-file), FLANNELD_* variables or its environment file "
        "(--agent-env); see pyflannel status --help\n"
    )
