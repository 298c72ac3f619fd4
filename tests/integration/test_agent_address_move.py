"""A node renumbered under its running agent (real etcd, agents in host namespaces): the agent
notices by itself, keeps its subnet, advertises the new address, and every peer re-points its
entries at it. flanneld cannot: it picks its address once, at start."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import LabHost

pytestmark = [pytest.mark.root, pytest.mark.etcd]

NEW_ADDRESS = IPv4Address("192.0.2.43")


@pytest.fixture(params=["vxlan", "host-gw", "udp"])
def lab(request: pytest.FixtureRequest) -> Iterator[AgentLab]:
    with AgentLab({"Type": request.param}, prefix="pmv") as running:
        running.start_all()
        reached = running.wait_reachable()
        assert all(reached.values()), reached
        yield running


def public_ip(lab: AgentLab, host: LabHost) -> str:
    return str(json.loads(lab.lease_value(host))["PublicIP"])


def renumber(lab: AgentLab, host: LabHost) -> None:
    """The old address gone, then the new one there, as a DHCP client renumbering does (for a
    moment the interface has none: the agent waits)."""
    lab.net.ip(host.ns, "addr", "del", f"{host.underlay_ip}/24", "dev", "eth0")
    lab.net.ip(host.ns, "addr", "add", f"{NEW_ADDRESS}/24", "dev", "eth0")


def points_at_new_address(lab: AgentLab, peer: LabHost, moved: LabHost) -> bool:
    """The peer's entries for the moved node's subnet go to its new address."""
    if lab.backend["Type"] == "host-gw":
        return f"via {NEW_ADDRESS} " in lab.net.ip(peer.ns, "route", "show", str(moved.subnet))
    if lab.backend["Type"] == "vxlan":
        return f"dst {NEW_ADDRESS} " in lab.net.bridge(peer.ns, "fdb", "show", "dev", "flannel.1")
    return f'"{moved.subnet}": "{NEW_ADDRESS}:' in json.dumps(statusz(lab, peer))


def statusz(lab: AgentLab, host: LabHost) -> dict[str, object]:
    probe = (
        "import json, urllib.request\n"
        "print(urllib.request.urlopen('http://127.0.0.1:8081/statusz', timeout=5).read().decode())"
    )
    done = lab.net.run(host.ns, "python3", "-c", probe)
    return dict(json.loads(done.stdout))


def wait(predicate, timeout: float = 30.0) -> float:  # type: ignore[no-untyped-def]
    """Seconds until `predicate` held; fails after `timeout`."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_renumbered_node_keeps_its_subnet_and_its_peers_follow(
    lab: AgentLab, capsys: pytest.CaptureFixture[str]
) -> None:
    moved, peers = lab.net.hosts[2], lab.net.hosts[:2]
    subnet_env = lab.subnet_file(moved).read_text()
    agent = lab.agents[moved.n]
    renumber(lab, moved)
    advertised = wait(lambda: public_ip(lab, moved) == str(NEW_ADDRESS))
    if lab.backend["Type"] == "udp":
        # Its sockets were bound to the old address: the agent advertises the new one, then
        # exits for its supervisor to start it again there.
        assert agent.process.wait(30) == 0, agent.log()
        lab.start_agent(moved)
        lab.wait_ready(moved)
    else:
        assert agent.process.poll() is None, agent.log()
    followed = max(wait(lambda p=peer: points_at_new_address(lab, p, moved)) for peer in peers)
    with capsys.disabled():
        print(
            f"\n{lab.backend['Type']}: the lease carried the new address {advertised:.2f} s after"
            f" the renumbering; every peer pointed at it {followed:.2f} s after"
        )
    assert lab.subnet_file(moved).read_text() == subnet_env
    assert f"the external address moved from {moved.underlay_ip} (eth0) to {NEW_ADDRESS}" in (
        agent.log()
    )
    if lab.backend["Type"] == "vxlan":
        assert f"local {NEW_ADDRESS} " in lab.net.ip(moved.ns, "-d", "link", "show", "flannel.1")
    reached = lab.wait_reachable()
    assert all(reached.values()), reached
    # Only the moved node's lease changed.
    assert [public_ip(lab, peer) for peer in peers] == [str(p.underlay_ip) for p in peers]


def test_a_new_address_on_another_link_is_not_followed(lab: AgentLab) -> None:
    """A pod's veth, a second NIC: the agent stays where it is."""
    host = lab.net.hosts[0]
    lab.net.ip(host.ns, "link", "add", "pmvx0", "type", "veth", "peer", "name", "pmvx1")
    lab.net.ip(host.ns, "addr", "add", "203.0.113.9/24", "dev", "pmvx0")
    lab.net.ip(host.ns, "link", "set", "pmvx0", "up")
    time.sleep(2)
    assert public_ip(lab, host) == str(host.underlay_ip)
    assert "the external address moved" not in lab.agents[host.n].log()
