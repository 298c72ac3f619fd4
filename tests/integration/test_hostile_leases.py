"""Leases a careless or hostile node can write never reach a host's kernel: real etcd, real
agents, every backend (issue: a lease for the underlay subnet replaced the connected route)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator

import pytest

from pyflannel_lab.netns_agents import PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from tests.integration.test_agent_e2e import wait_for

pytestmark = [pytest.mark.root, pytest.mark.etcd]

RUN_CLI = "import sys; from pyflannel_runtime.cli.main import main; sys.exit(main(sys.argv[1:]))"
# A peer that only exists in etcd: once every agent has programmed it, the writes before it
# in the watch (the hostile ones) have been handled too.
MARKER = "10.244.60.0-24"
MARKER_SUBNET = "10.244.60.0/24"
# The underlay subnet, a subnet of another network, and one inside host 1's.
HOSTILE = {
    "192.0.2.0-24": "subnet 192.0.2.0/24 is outside the network 10.244.0.0/16",
    "10.99.0.0-24": "subnet 10.99.0.0/24 is outside the network 10.244.0.0/16",
    # Inside host 1's subnet: the longer prefix would take half its traffic on other hosts.
    "10.244.1.128-25": "subnet 10.244.1.128/25 is not a /24 (the configured subnet length)",
}


def lease_value(backend: str, public_ip: str, mac: str) -> str:
    value: dict[str, object] = {"PublicIP": public_ip, "PublicIPv6": None}
    if backend != "udp":  # flannel's udp backend writes no BackendType
        value["BackendType"] = backend
    if backend == "vxlan":
        value["BackendData"] = {"VNI": 1, "VtepMAC": mac}
    return json.dumps(value, separators=(",", ":"))


@pytest.fixture(params=["vxlan", "host-gw", "udp"])
def lab(request: pytest.FixtureRequest) -> Iterator[AgentLab]:
    with AgentLab({"Type": request.param}, prefix="phl") as running:
        running.start_all()
        yield running


def put(lab: AgentLab, key: str, public_ip: str, mac: str) -> None:
    lab.etcdctl("put", f"{PREFIX}/subnets/{key}", lease_value(lab.backend["Type"], public_ip, mac))


def marker_programmed(lab: AgentLab, host: LabHost) -> bool:
    if lab.backend["Type"] == "udp":  # udp's peer table lives in the agent: it logs changes
        return f"Adding route to {MARKER_SUBNET} via" in lab.agents[host.n].log()
    return MARKER_SUBNET in lab.net.ip(host.ns, "route", "show", MARKER_SUBNET)


def underlay_route(lab: AgentLab, host: LabHost) -> str:
    return lab.net.ip(host.ns, "route", "show", "192.0.2.0/24").strip()


def status(lab: AgentLab, host: LabHost) -> tuple[int, str]:
    assert lab.etcd is not None
    done = lab.net.run(host.ns, sys.executable, "-c", RUN_CLI, "status",
                       f"--etcd-endpoints={lab.etcd.endpoint}",
                       f"--subnet-file={lab.subnet_file(host)}", "--healthz-port=8081",
                       "--agent-env=", check=False)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def assert_untouched(lab: AgentLab, underlay: dict[int, str]) -> None:
    for host in lab.net.hosts:
        assert underlay_route(lab, host) == underlay[host.n], host.ns
        routes = lab.net.ip(host.ns, "route", "show")
        assert "10.99.0.0" not in routes and "10.244.1.128" not in routes, routes
    assert all(lab.reachability().values()), lab.reachability()


def test_leases_outside_the_network_never_reach_the_datapath(lab: AgentLab) -> None:
    backend = lab.backend["Type"]
    h1 = lab.net.hosts[0]
    underlay = {h.n: underlay_route(lab, h) for h in lab.net.hosts}
    assert all("dev eth0 proto kernel" in route for route in underlay.values()), underlay

    # Watch events.
    for key in HOSTILE:
        put(lab, key, "192.0.2.20", "0a:11:22:33:44:20")
    put(lab, MARKER, "192.0.2.60", "0a:11:22:33:44:60")
    for host in lab.net.hosts:
        assert wait_for(lambda h=host: marker_programmed(lab, h), timeout=30), host.ns
    assert_untouched(lab, underlay)
    for host in lab.net.hosts:
        log = lab.agents[host.n].log()
        assert f"Ignoring lease 192.0.2.0-24: {HOSTILE['192.0.2.0-24']}" in log
        assert "Adding route to 192.0.2.0/24" not in log and "Adding route to 10.99" not in log

    code, out = status(lab, h1)
    assert code == 1, out
    assert "\nRejected (never programmed):\n" in out
    for key, why in HOSTILE.items():
        subnet = key.replace("-", "/")
        assert f"  {subnet}: {why}\n" in out, out
    assert out.rstrip().endswith(", 3 rejected; agent ready"), out

    # A start-up snapshot: the restarted agent syncs the marker and the other hosts only.
    lab.stop_agent(h1)
    agent = lab.start_agent(h1)
    lab.wait_ready(h1)
    assert wait_for(lambda: "Synced " in agent.log(), timeout=30), agent.log()
    synced = [line for line in agent.log().splitlines() if "Synced " in line]
    assert "Synced 3 peers" in synced[-1], synced
    assert_untouched(lab, underlay)

    # Deleting the keys changes nothing either; deleting the marker withdraws it.
    for key in (*HOSTILE, MARKER):
        lab.etcdctl("del", f"{PREFIX}/subnets/{key}")
    if backend != "udp":
        for host in lab.net.hosts:
            assert wait_for(lambda h=host: not marker_programmed(lab, h), timeout=30), host.ns
    assert_untouched(lab, underlay)
    code, out = status(lab, h1)
    if backend == "udp":
        assert code == 0 and "rejected" not in out, out
    else:
        assert code == 0 and out.endswith(" 0 missing, 0 stale; agent ready\n"), out


def test_a_bad_backend_option_fails_before_the_device_is_touched() -> None:
    with AgentLab({"Type": "vxlan"}, hosts=1, prefix="phl", lab_pods=False) as lab:
        host = lab.net.hosts[0]
        # flannel.1 from an earlier run, which a port change would make incompatible.
        lab.net.ip(host.ns, "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dev", "eth0",
                   "local", str(host.underlay_ip), "dstport", "8472", "nolearning")  # fmt: skip
        index = lab.net.ifindex(host.ns, "flannel.1")
        # The exact messages are pinned by the unit tests of `pyflannel config check`.
        for option in ('"Port": 70000', '"VNI": 99999999999999999999999', '"VNI": -5',
                       '"Port": "abc"', '"VNI": "1"'):  # fmt: skip
            config = f'{{"Network": "10.244.0.0/16", "Backend": {{"Type": "vxlan", {option}}}}}'
            lab.etcdctl("put", f"{PREFIX}/config", config)
            agent = lab.start_agent(host)
            assert agent.process.wait(60) == 1, agent.log()
            lab.agents.pop(host.n)
            log = agent.log()
            assert "Error registering network: error decoding VXLAN backend config: " in log, log
            assert "Traceback" not in log, log
            agent.log_path.unlink()
            assert lab.net.ifindex(host.ns, "flannel.1") == index, "the device was replaced"
            assert lab.etcdctl("get", "--prefix", "--keys-only", f"{PREFIX}/subnets/") == ""
            assert not lab.subnet_file(host).exists()
        agent = lab.start_agent(host)
        assert agent.process.poll() is None
        lab.stop_agent(host, signal.SIGTERM)
