"""`pyflannel status` against real leases and kernels: an AgentLab (etcd + pyflanneld) for
etcd mode, the Kubernetes API double for kube mode."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyflannel_runtime.cli import main
from pyflannel_runtime.lab.netns_agents import AgentLab
from pyflannel_runtime.lab.netns_lab import LabHost
from pyflannel_runtime.netlink.netns import run_in_netns
from tests.fakes.kube_api import FakeKubeApi

RUN_CLI = "import sys; from pyflannel_runtime.cli import main; sys.exit(main(sys.argv[1:]))"
P = "flannel.alpha.coreos.com/"


@pytest.fixture(scope="module")
def lab() -> Iterator[AgentLab]:
    with AgentLab({"Type": "vxlan"}, prefix="pst") as running:
        running.start_all()
        yield running


def status(lab: AgentLab, host: LabHost, *extra: str) -> subprocess.CompletedProcess[str]:
    """`pyflannel status` run inside the host's namespace, as an operator on the node would."""
    assert lab.etcd is not None
    return lab.net.run(
        host.ns,
        sys.executable,
        "-c",
        RUN_CLI,
        "status",
        f"--etcd-endpoints={lab.etcd.endpoint}",
        f"--subnet-file={lab.subnet_file(host)}",
        *extra,
        check=False,
    )


@pytest.mark.root
@pytest.mark.etcd
def test_every_peer_shows_programmed_on_every_host(lab: AgentLab) -> None:
    for host in lab.net.hosts:
        done = status(lab, host)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.endswith("\n3 leases, 2 peers programmed, 0 missing, 0 stale\n")
        report = json.loads(status(lab, host, "--output=json").stdout)
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
        assert done.stdout.endswith("3 leases, 1 peer programmed, 1 missing, 1 stale\n")
        report = json.loads(status(lab, host, "--output=json").stdout)
        missing = {lease["subnet"]: lease["missing"] for lease in report["leases"]}
        assert missing[str(peer.subnet)] == [route]
        assert report["stale"] == ["neigh 10.244.9.0 lladdr 0a:58:0a:f4:09:00 dev flannel.1"]
        assert report["ok"] is False
    finally:
        lab.start_agent(host)
        lab.wait_ready(host)
    deadline = time.monotonic() + 20
    while status(lab, host).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status(lab, host).returncode == 0, "the agent's reconcile repairs both"


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
            "3 leases, 2 peers programmed, 0 missing, 0 stale, 1 rejected\n"
        )
        report = json.loads(status(lab, host, "--output=json").stdout)
        assert [u["name"] for u in report["unreadable"]] == ["10.244.15.0-24"]
        assert report["summary"]["rejected"] == 1 and report["ok"] is False
    finally:
        lab.etcdctl("del", key)
    assert status(lab, host).returncode == 0


def test_unreachable_etcd_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "--etcd-endpoints=http://127.0.0.1:1", "--timeout=3", "--leases-only"])
    assert code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("pyflannel status: cannot read leases from etcd http://127.0.0.1:1")


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
                f"--net-config-path={conf}", "--public-ip=192.0.2.11"]  # fmt: skip
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
