"""Connections that outlive every operation, on systemd lab hosts over SSH: the disruption
probe's long-lived TCP connections (pod to pod across nodes and on one node, pod to the lab's
outside stand-in through the masquerade, host to remote pod; a message every 100 ms, each echo
checked) held open while the agents restart, roll, stop and come back, a node reboots and a
node is renumbered.

One lab serves the module, the probe opened once and checked after each operation. Each
backend, host-gw first and then vxlan, goes through the same operations, in this order:
restarts on both ends of the connections and on a third node; an agent stopped for a while; a
settings change and a rolling upgrade to a new runtime version rolled out by one site.yml run
(each alone restarts every agent, batch by batch, the same way), with the verify role's own
probe held through it too; a reboot of a third node. Between the two, the switch to vxlan goes
back to the first runtime and the default settings, so that vxlan's roll is an upgrade and a
change again. Last, a node renumbered under its running agent. Each check prints the probe's
table, and for the restarts, the roll and the stop the longest gap beside its goal (1 s; the
stop's length plus 1 s) and the load; the last test prints the closing table of every
operation.

What is asserted is what the design guarantees: no reset and no message lost where the
datapath outlives the agent (vxlan, host-gw), and gaps only with a bound generous enough for a
busy 2-core machine. The gaps themselves are the reported figures (bench/bench_disruption.py
measures them on a lab of its own).
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pyflannel_lab.disruption import (
    GAP_GOAL,
    Probe,
    apart_from,
    closing_table,
    involving,
    longest_gap,
    shown,
)
from pyflannel_lab.operations import (
    agent_pids,
    reboot,
    restart_agents,
    runtime_copy,
    stop_agent,
    subnet_of,
)
from pyflannel_lab.playbook import PlaybookRun, run_playbook
from pyflannel_runtime import __version__
from pyflannel_runtime.connectivity.disruption import Row
from tests.integration.site_lab import ASK_FOR_THE_SUITE, assert_converged, lab_hosts, on_host

pytestmark = [pytest.mark.root, pytest.mark.podman]

hosts_api = pytest.importorskip("pyflannel_lab.hosts")

NAMES = ["node1", "node2", "node3"]
# The same version test_site_roll.py rolls out: one wheelhouse build serves both modules.
UPGRADE = f"{__version__}.post1"
# A harmless change of the agents' settings (their environment file), rolled out with UPGRADE.
SETTING = {"flannel_iptables_resync": 7}
# A generous bound: ten messages a second, on a machine that may hold a process back for a
# second or two while a lab's agents restart around it.
GAP_BOUND = 5.0
# Short in the suite (bench/bench_disruption.py stops the agent for a minute), yet longer than
# GAP_BOUND: a datapath that went with the stopped agent would stall its connections past it.
STOP_SECONDS = 8


def report(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():
        print(f"\n{text}")


@dataclass
class Cluster:
    lab: Any
    probe: Probe
    # What every site.yml run of the module passes: the backend, the runtime rolled out.
    extra_vars: dict[str, Any] = field(default_factory=dict)

    def site(self, **extra: Any) -> PlaybookRun:
        return run_playbook("site.yml", extra_vars={**self.extra_vars, **extra})

    def on(self, name: str, command: str) -> str:
        return on_host(self.lab, name, command)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """host-gw converged on three lab hosts, the probe open."""
    with lab_hosts() as lab:
        assert lab.names() == NAMES and lab.outside is not None
        made = Cluster(
            lab, Probe(lab, NAMES, lab.outside.target), {"flannel_backend_type": "host-gw"}
        )
        assert_converged(made.site(), NAMES)
        try:
            opened = made.probe.open()
            assert all(row.report.up for row in opened), shown("opened", opened)
            yield made
        finally:
            made.probe.close()


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree as UPGRADE: each backend's roll builds (or finds cached) one wheelhouse."""
    return runtime_copy(tmp_path_factory.mktemp("upgrade"), UPGRADE)


def disturbed(rows: list[Row]) -> list[Row]:
    """The rows that were reset, lost a message, still wait for one, or are down."""
    return [row for row in rows if row.disturbed]


def assert_held(rows: list[Row], gap_bound: float) -> None:
    """No connection reset, nothing lost, every one open, each gap within the bound."""
    assert not disturbed(rows), shown("disturbed", disturbed(rows))
    slow = [row for row in rows if row.report.longest_gap > gap_bound]
    assert not slow, shown(f"gaps over {gap_bound} s", slow)


def check(
    cluster: Cluster,
    capsys: pytest.CaptureFixture[str],
    operation: str,
    settle: float = 5.0,
    names: tuple[str, ...] = (),
) -> list[Row]:
    rows = cluster.probe.check(operation, settle, names)
    report(capsys, shown(operation, rows))
    return rows


def backend(cluster: Cluster) -> str:
    return str(cluster.extra_vars.get("flannel_backend_type", "vxlan"))


def versions(cluster: Cluster) -> set[str]:
    """The runtime versions the agents say they run (/statusz)."""
    status = (
        "python3 -c 'import json, urllib.request; print(json.load(urllib.request.urlopen("
        '"http://127.0.0.1:8081/statusz", timeout=10))["version"])\''
    )
    return {cluster.on(n, status).strip() for n in NAMES}


# --- the operations, each run for both backends on the same open connections ---------------


def held_within_the_goal(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], operation: str
) -> None:
    """No reset, nothing lost; the longest gap printed beside the 1 s goal, a figure only."""
    rows = check(cluster, capsys, operation)
    report(capsys, longest_gap(operation, rows))
    assert_held(rows, GAP_BOUND)


def restarts_on_both_ends_and_a_third_node(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    restart_agents(cluster.lab, ("node1", "node2"), "node3")
    held_within_the_goal(cluster, capsys, f"{backend(cluster)}: pyflanneld restarted on every node")


def an_agent_stopped_for_a_while(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent stopped (not reset): its masquerade and forward rules and its datapath stay
    while it is down, and nothing stalls."""
    stop = stop_agent(cluster.lab, "node2", STOP_SECONDS)
    assert stop.kept, stop
    assert "MASQUERADE" in stop.rules[0] and "ACCEPT" in stop.rules[0], stop
    operation = f"{backend(cluster)}: pyflanneld on node2 stopped for {STOP_SECONDS} s"
    rows = check(cluster, capsys, operation)
    report(capsys, longest_gap(operation, rows, goal=STOP_SECONDS + GAP_GOAL))
    assert_held(rows, GAP_BOUND)


def a_settings_change_and_a_new_runtime_roll(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], upgrade: Path
) -> None:
    """One site.yml run rolls out a changed setting and an upgrade to a new runtime version
    (each alone restarts every agent, batch by batch, the same way), with the verify role's own
    probe (flannel_disruption_probe) held open through it too: opened before anything changed,
    checked in the verify role, its table in the summary."""
    before = agent_pids(cluster.lab, NAMES)
    # In every run from here on, until the switch to another backend.
    cluster.extra_vars.update(SETTING, flannel_runtime_source=str(upgrade))
    run = cluster.site(flannel_disruption_probe=True)
    assert_converged(run, NAMES)
    after = agent_pids(cluster.lab, NAMES)
    assert all(after[n] != before[n] for n in NAMES), (before, after)
    assert versions(cluster) == {UPGRADE}
    # The summary as the callback printed it, its lines wrapped: one line of words again.
    words = " ".join(run.output.split())
    table = words.split("disruption probe, the connections held open through the run: ", 1)
    assert len(table) == 2, run.explain()
    assert re.match(r"18 connections, a message every 0\.1 s", table[1]), run.explain()
    assert "reset, longest gap" in table[1], run.explain()
    report(capsys, f"site.yml {run.seconds:.0f} s; the verify role's table: {table[1][:2000]}")
    held_within_the_goal(
        cluster,
        capsys,
        f"{backend(cluster)}: a settings change and a rolling upgrade to {UPGRADE} by site.yml",
    )


def a_rebooted_third_node(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """node3 reboots: the connections between node1 and node2 (and theirs to the outside) go
    on untouched; node3 comes back with its subnet, and its new pods reach everyone."""
    subnet = subnet_of(cluster.lab, "node3")
    reboot(cluster.lab, "node3")
    # node3's probe went with the reboot: the other nodes say what became of their connections.
    rows = check(cluster, capsys, f"{backend(cluster)}: node3 rebooted", names=("node1", "node2"))
    assert_held(apart_from(rows, "node3"), GAP_BOUND)
    assert involving(rows, "node3"), "the connections to node3 are in the table"
    assert subnet_of(cluster.lab, "node3") == subnet
    # Its pods went with the reboot: the probe is closed everywhere (node3's pods through
    # CNI DEL, as their state outlived them) and opened again, node3's new pods included.
    closed = cluster.probe.close()
    assert all(not result["left_behind"] for result in closed.values()), closed
    reopened = cluster.probe.open()
    assert all(row.report.up for row in reopened), shown("reopened", reopened)
    rows = check(cluster, capsys, f"{backend(cluster)}: after node3's reboot, opened again")
    assert_held(rows, GAP_BOUND)


# --- each backend, host-gw first, then the switch and vxlan ---------------------------------------


class OperationsUnderConnections:
    """One backend's operations, in this order, under the connections the probe holds."""

    # The first test of the module also boots its lab and converges it: on a loaded 2-core
    # machine far more than the default (15 minutes were seen, with other labs beside it).
    @pytest.mark.timeout(1800)
    def test_connections_outlive_restarts_on_both_ends_and_a_third_node(
        self, cluster: Cluster, capsys: pytest.CaptureFixture[str]
    ) -> None:
        restarts_on_both_ends_and_a_third_node(cluster, capsys)

    def test_an_agent_stopped_for_a_while_stalls_nothing(
        self, cluster: Cluster, capsys: pytest.CaptureFixture[str]
    ) -> None:
        an_agent_stopped_for_a_while(cluster, capsys)

    @pytest.mark.timeout(900)
    def test_a_settings_change_and_a_new_runtime_roll_under_the_connections(
        self, cluster: Cluster, capsys: pytest.CaptureFixture[str], upgrade: Path
    ) -> None:
        a_settings_change_and_a_new_runtime_roll(cluster, capsys, upgrade)

    def test_a_rebooted_third_node_leaves_the_others_alone_and_comes_back(
        self, cluster: Cluster, capsys: pytest.CaptureFixture[str]
    ) -> None:
        a_rebooted_third_node(cluster, capsys)


class TestHostGw(OperationsUnderConnections):
    """The module's lab starts on host-gw."""


@pytest.mark.timeout(900)
def test_the_switch_to_vxlan_converges_and_the_probe_opens_again(cluster: Cluster) -> None:
    """Agents of two backends cannot reach each other: the switch is no operation the probe
    holds connections through. It is closed first, and opened again on vxlan. The switch goes
    back to the first runtime and the default settings too (every agent restarts for it
    anyway), so that vxlan's roll is an upgrade and a settings change again."""
    cluster.probe.close()
    cluster.extra_vars.clear()
    switch = cluster.site(flannel_agent_restart_batch="100%")
    assert_converged(switch, NAMES)
    assert versions(cluster) == {__version__}
    opened = cluster.probe.open()
    assert all(row.report.up for row in opened), shown("opened", opened)


class TestVxlan(OperationsUnderConnections):
    """After the switch above."""


# --- a node renumbered --------------------------------------------------------------------------


def lease_of(cluster: Cluster, subnet: str) -> str:
    """The lease's value in etcd (asked on node1, the member, with its client certificate)."""
    network = ipaddress.ip_interface(subnet).network
    pki = "/etc/pyflannel/pki"
    return cluster.on(
        "node1",
        f"ETCDCTL_API=3 etcdctl --endpoints https://{cluster.lab.host('node1').address}:2379"
        f" --cacert {pki}/etcd-ca.crt --cert {pki}/etcd-client.crt --key {pki}/etcd-client.key"
        f" get --print-value-only /coreos.com/network/subnets/{network.network_address}-"
        f"{network.prefixlen}",
    )


def fdb_points_at(cluster: Cluster, peer: str, address: str) -> bool:
    return f"dst {address} " in cluster.on(peer, "bridge fdb show dev flannel.1")


@pytest.mark.timeout(900)
def test_a_renumbered_node_keeps_its_subnet_and_every_peer_follows_it(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """node3 moves to a new address on the same bridge under its running agent: the agent
    notices by itself (flanneld cannot), keeps its subnet and advertises the new address,
    every peer re-points its FDB entry, and no connection between the other nodes notices.
    Then site.yml, from the updated inventory, converges and the connectivity suite passes."""
    subnet = subnet_of(cluster.lab, "node3")
    agent = agent_pids(cluster.lab, NAMES)["node3"]
    moved_at = time.monotonic()
    moved = hosts_api.readdress_host("node3")
    address = str(moved.address)
    cluster.lab = cluster.probe.lab = hosts_api.load()  # node3 is reached at its new address
    deadline = moved_at + 60
    pending = {"node1", "node2"}
    followed: dict[str, float] = {}
    while pending:
        assert time.monotonic() < deadline, f"{pending} still point at node3's old address"
        for peer in sorted(pending):
            if fdb_points_at(cluster, peer, address):
                followed[peer] = time.monotonic() - moved_at
                pending.discard(peer)
        time.sleep(0.2)
    rows = check(cluster, capsys, "vxlan: node3 renumbered")
    assert_held(apart_from(rows, "node3"), GAP_BOUND)
    assert agent_pids(cluster.lab, NAMES)["node3"] == agent, "the agent followed without a restart"
    assert subnet_of(cluster.lab, "node3") == subnet
    assert f'"PublicIP":"{address}"' in lease_of(cluster, subnet)
    report(
        capsys,
        "node3 renumbered: every peer's FDB pointed at its new address within "
        + ", ".join(f"{peer} {seconds:.1f} s" for peer, seconds in sorted(followed.items()))
        + " (polled over SSH every 0.2 s)",
    )
    # The inventory's new address may change nothing on the hosts: the suite is asked for.
    run = cluster.site(**ASK_FOR_THE_SUITE)
    assert_converged(run, NAMES)
    report(capsys, f"site.yml after the renumbering: {run.seconds:.0f} s, changed {run.changed()}")
    report(capsys, closing_table(cluster.probe.windows))
