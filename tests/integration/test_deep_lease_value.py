"""A hostile lease value in a real etcd, against running agents, a restart and `pyflannel status`.

Issue 9, reproduction 1: a lease value nested 1200 arrays deep made every agent exit ("Lease
watch ended: maximum recursion depth exceeded ..."), every restart fail and status print a
traceback. It must be skipped like any malformed lease, and nothing else may change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pyflannel_lab.netns_agents import PREFIX, AgentLab
from pyflannel_lab.netns_lab import LabHost
from tests.integration.test_status_live import status

pytestmark = [pytest.mark.root, pytest.mark.etcd]

DEEP_KEY = f"{PREFIX}/subnets/10.244.15.0-24"
DEEP_VALUE = '{"PublicIP":"192.0.2.16","X":' + "[" * 1200 + "]" * 1200 + "}"
SENTINEL_SUBNET = "10.244.16.0/24"
SENTINEL_KEY = f"{PREFIX}/subnets/10.244.16.0-24"
SENTINEL_VALUE = (
    '{"PublicIP":"192.0.2.17","BackendType":"vxlan",'
    '"BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:16"}}'
)
SKIPPED = f"Ignoring bad subnet event on {DEEP_KEY}: invalid character '[' exceeded max depth"


@pytest.fixture
def lab() -> Iterator[AgentLab]:
    with AgentLab({"Type": "vxlan"}, hosts=2, prefix="phl") as running:
        running.start_all()
        yield running


def wait_for_route(lab: AgentLab, host: LabHost, subnet: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "dev flannel.1" in lab.net.ip(host.ns, "route", "show", subnet):
            return True
        time.sleep(0.1)
    return False


def wait_for_log(lab: AgentLab, host: LabHost, text: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in lab.agents[host.n].log():
            return True
        time.sleep(0.1)
    return False


def test_deep_lease_value_is_skipped_and_changes_nothing(lab: AgentLab) -> None:
    first, second = lab.net.hosts
    lab.etcdctl("put", DEEP_KEY, DEEP_VALUE)

    # the running agents warn, keep running and keep their peers
    for host in lab.net.hosts:
        assert wait_for_log(lab, host, SKIPPED), lab.agents[host.n].log()
    # A good lease put after the bad one is programmed everywhere: the watch went on past it.
    lab.etcdctl("put", SENTINEL_KEY, SENTINEL_VALUE)
    for host in lab.net.hosts:
        assert wait_for_route(lab, host, SENTINEL_SUBNET), lab.agents[host.n].log()
    lab.etcdctl("del", SENTINEL_KEY)
    assert all(agent.process.poll() is None for agent in lab.agents.values())
    assert all(lab.reachability().values()), lab.reachability()
    route = lab.net.ip(first.ns, "route", "show", str(second.subnet))
    assert "dev flannel.1" in route

    # a restarted agent lists the bad lease, skips it and comes up with the same subnet
    before = lab.subnet_file(first).read_text()
    lab.stop_agent(first)
    lab.start_agent(first)
    assert lab.wait_ready(first) == before
    assert "Ignoring bad subnet node " + DEEP_KEY in lab.agents[first.n].log()
    assert all(lab.reachability().values()), lab.reachability()

    # status answers with its table, lists the lease as rejected and exits 1 for it
    rejected = "Rejected (never programmed):\n  10.244.15.0-24: invalid character '['"
    for host in lab.net.hosts:
        done = status(lab, host)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert rejected in done.stdout, done.stdout
        assert str(second.subnet if host is first else first.subnet) in done.stdout
