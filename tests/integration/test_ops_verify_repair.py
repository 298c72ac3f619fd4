"""The runtime API the Ansible routes module calls: verify a host against the lease store, plan
the repair, apply it. Real etcd, real agents (stopped, so that their reconcile does not repair
the drift first; the datapath outlives them), real kernels in network namespaces."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from ipaddress import ip_address

import pytest

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_lab.netns_lab import LabHost
from pyflannel_runtime.netlink.entries import Action, Fdb, Neigh, Op, Route
from pyflannel_runtime.ops.repair import RepairError, apply_repair, plan_repair
from pyflannel_runtime.ops.verify import Datapath, Host, VerifyReport, verify
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
from tests.integration.test_agent_e2e import wait_for

pytestmark = [pytest.mark.root, pytest.mark.etcd]


def store(lab: AgentLab) -> EtcdSettings:
    assert lab.etcd is not None
    return EtcdSettings(endpoints=(lab.etcd.endpoint,), request_timeout=10.0)


def host(lab: AgentLab, h: LabHost) -> Host:
    return Host(netns=h.ns, subnet_file=str(lab.subnet_file(h)))


def check(lab: AgentLab, h: LabHost) -> VerifyReport:
    return verify(store(lab), host(lab, h))


def stopped_lab(backend: str) -> Iterator[AgentLab]:
    with AgentLab({"Type": backend}, prefix="pvr") as lab:
        lab.start_all()
        for h in lab.net.hosts:
            assert wait_for(lambda h=h: check(lab, h).ok, timeout=30), check(lab, h)
        for h in lab.net.hosts:
            lab.stop_agent(h, signal.SIGTERM)
        yield lab


@pytest.fixture(scope="module")
def vxlan_lab() -> Iterator[AgentLab]:
    yield from stopped_lab("vxlan")


@pytest.fixture(scope="module")
def hostgw_lab() -> Iterator[AgentLab]:
    yield from stopped_lab("host-gw")


def test_an_agents_host_verifies_clean(vxlan_lab: AgentLab) -> None:
    lab = vxlan_lab
    h1 = lab.net.hosts[0]
    report = check(lab, h1)
    assert report.ok, report
    states = sorted(s.datapath.value for s in report.leases)
    assert states == ["own", "programmed", "programmed"]
    assert [(m.device, m.actual, m.expected) for m in report.mtus] == [("flannel.1", 1450, 1450)]
    assert report.subnet_env == () and report.stale == ()
    assert plan_repair(report) == []
    assert apply_repair(plan_repair(report), host(lab, h1)) == 0


def test_drift_is_reported_planned_repaired_and_then_gone(vxlan_lab: AgentLab) -> None:
    lab = vxlan_lab
    h1, h2, h3 = lab.net.hosts
    gw2, gw3 = str(h2.subnet.network_address), str(h3.subnet.network_address)
    lab.net.ip(h1.ns, "route", "del", str(h2.subnet))
    lab.net.ip(h1.ns, "neigh", "del", gw3, "dev", "flannel.1")
    fdb = lab.net.bridge(h1.ns, "fdb", "show", "dev", "flannel.1").splitlines()
    (mac3,) = (line.split()[0] for line in fdb if f"dst {h3.underlay_ip} " in line)
    lab.net.bridge(h1.ns, "fdb", "del", mac3, "dev", "flannel.1", "dst", str(h3.underlay_ip))
    lab.net.ip(h1.ns, "neigh", "replace", "10.244.9.0", "lladdr", "0a:58:0a:f4:09:00",
               "dev", "flannel.1", "nud", "permanent")  # fmt: skip
    flannel1 = lab.net.ifindex(h1.ns, "flannel.1")

    report = check(lab, h1)
    assert not report.ok
    by_subnet = {s.row.lease.subnet: s for s in report.leases}
    assert by_subnet[h2.subnet].datapath is Datapath.MISSING
    assert [report.describe(e) for e in by_subnet[h2.subnet].missing] == [
        f"route {h2.subnet} via {gw2} dev flannel.1 onlink"
    ]
    assert {report.describe(e) for e in by_subnet[h3.subnet].missing} == {
        f"neigh {gw3} lladdr {mac3} dev flannel.1",
        f"fdb {mac3} dev flannel.1 dst {h3.underlay_ip}",
    }
    stale = Neigh(flannel1, ip_address("10.244.9.0"), "0a:58:0a:f4:09:00")
    assert report.stale == (stale,)

    ops = plan_repair(report)
    assert ops == [
        Op(Action.REPLACE, Neigh(flannel1, ip_address(gw3), mac3)),
        Op(Action.REPLACE, Fdb(flannel1, mac3, h3.underlay_ip)),
        # The route's key is free: created, never replaced.
        Op(Action.CREATE, Route(h2.subnet, ip_address(gw2), flannel1, onlink=True)),
        Op(Action.DELETE, stale),
    ]
    assert apply_repair(ops, host(lab, h1), report.names) == 4
    again = check(lab, h1)
    assert again.ok, again
    assert plan_repair(again) == []
    assert apply_repair(plan_repair(again), host(lab, h1)) == 0
    assert lab.net.ping(h1.pod_ns, h2.pod_ip) and lab.net.ping(h1.pod_ns, h3.pod_ip)


def test_mtu_and_subnet_env_drift_are_reported(vxlan_lab: AgentLab) -> None:
    lab = vxlan_lab
    h2 = lab.net.hosts[1]
    env = lab.subnet_file(h2)
    original = env.read_text()
    lab.net.ip(h2.ns, "link", "set", "flannel.1", "mtu", "1400")
    env.write_text(original.replace("FLANNEL_MTU=1450", "FLANNEL_MTU=1500").replace(
        f"FLANNEL_SUBNET={h2.subnet.network_address + 1}/24", "FLANNEL_SUBNET=10.244.77.1/24"))  # fmt: skip
    try:
        report = verify(store(lab), Host(netns=h2.ns, public_ip=h2.underlay_ip,
                                         subnet_file=str(env)))  # fmt: skip
        assert not report.ok
        assert [(m.device, m.actual, m.expected, m.ok) for m in report.mtus] == [
            ("flannel.1", 1400, 1450, False)
        ]
        assert report.subnet_env == (
            f"{env}: FLANNEL_SUBNET is 10.244.77.0/24, the lease says {h2.subnet}",
            f"{env}: FLANNEL_MTU is 1500, expected 1450",
        )
        assert plan_repair(report) == []  # the kernel's entries are all there
    finally:
        lab.net.ip(h2.ns, "link", "set", "flannel.1", "mtu", "1450")
        env.write_text(original)
    assert check(lab, h2).ok


def test_a_route_that_is_not_flannels_is_never_repaired_over(hostgw_lab: AgentLab) -> None:
    lab = hostgw_lab
    h1, h2, h3 = lab.net.hosts
    lab.net.ip(h1.ns, "route", "del", str(h3.subnet))
    lab.net.ip(h1.ns, "route", "del", str(h2.subnet))
    # An operator's route for host 2's subnet now holds its destination.
    lab.net.ip(h1.ns, "route", "add", str(h2.subnet), "via", "192.0.2.99", "dev", "eth0",
               "proto", "static")  # fmt: skip
    static = lab.net.ip(h1.ns, "route", "show", str(h2.subnet)).strip()
    try:
        report = check(lab, h1)
        ops = plan_repair(report)
        assert {(op.action, op.entry) for op in ops} == {
            (Action.CREATE, Route(h2.subnet, h2.underlay_ip, lab.net.ifindex(h1.ns, "eth0"))),
            (Action.CREATE, Route(h3.subnet, h3.underlay_ip, lab.net.ifindex(h1.ns, "eth0"))),
        }
        with pytest.raises(RepairError) as err:
            apply_repair(ops, host(lab, h1), report.names)
        assert err.value.writes == 1
        assert err.value.failures == (
            f"route {h2.subnet} via {h2.underlay_ip} dev eth0: the kernel has another route "
            "there that is not flannel's; left alone",
        )
        assert lab.net.ip(h1.ns, "route", "show", str(h2.subnet)).strip() == static
        assert lab.net.ping(h1.pod_ns, h3.pod_ip)
    finally:
        lab.net.ip(h1.ns, "route", "del", str(h2.subnet))
    report = check(lab, h1)
    assert apply_repair(plan_repair(report), host(lab, h1)) == 1
    assert check(lab, h1).ok


def test_verify_needs_a_namespace_that_exists(vxlan_lab: AgentLab) -> None:
    from pyflannel_runtime.ops.verify import VerifyError

    with pytest.raises(VerifyError, match="network namespace pvr-nope does not exist"):
        verify(store(vxlan_lab), Host(netns="pvr-nope"))
