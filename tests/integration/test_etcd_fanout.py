"""Five agents against one etcd: the short version of bench/bench_etcd_fanout.py, which runs 25
and 50 and measures what etcd sends and spends. Here only correctness: every agent programs
every peer after a cold start, after one lease change, after a restart of all of them at once
with their routes gone (each resuming its watch from the state it kept), and after etcd itself
was stopped and started again; etcd's counters move, and the bench's tap counts etcd's answers
and sees every request etcd counts."""

from __future__ import annotations

import pytest

from pyflannel_lab.fanout import (
    EtcdTap,
    add_peer,
    etcd_cost,
    etcd_outage,
    fanout_lab,
    forget_routes,
    free_subnet,
    own_subnets,
    peer_routes,
    remove_peer,
    start_agents,
    stop_agents,
    wait_programmed,
)
from tests.integration.faults import HANG_GUARD

pytestmark = [pytest.mark.root, pytest.mark.etcd]

AGENTS = 5


def test_every_agent_programs_every_peer_through_a_change_and_a_restart_storm() -> None:
    with fanout_lab(AGENTS, prefix="pft") as lab:
        start_agents(lab)
        wait_programmed(lab, AGENTS - 1, HANG_GUARD)
        subnets = own_subnets(lab)
        assert len(set(subnets)) == AGENTS
        for host, own in zip(lab.net.hosts, subnets, strict=True):
            assert peer_routes(lab, host) == set(subnets) - {own}

        assert lab.etcd is not None
        tap = EtcdTap(lab.net.ul, "br-ul", lab.etcd.client_port)
        before = etcd_cost(lab)
        subnet = free_subnet(lab)
        add_peer(lab, subnet)
        wait_programmed(lab, AGENTS, HANG_GUARD)
        assert all(subnet in peer_routes(lab, host) for host in lab.net.hosts)
        sent = etcd_cost(lab) - before
        answered = tap.sent_bytes()
        tap.stop()
        assert sent.wire_bytes > 0 and sent.grpc_bytes > 0
        # Every agent got the new lease: a watch event each, at least its key (about 40 bytes);
        # the payload is what the wire carried less every segment's headers (40 bytes or more).
        assert AGENTS * 40 < answered < sent.wire_bytes
        remove_peer(lab, subnet)

        stop_agents(lab)
        forget_routes(lab)
        assert not any(peer_routes(lab, host) for host in lab.net.hosts)
        start_agents(lab)
        wait_programmed(lab, AGENTS - 1, HANG_GUARD)
        assert own_subnets(lab) == subnets  # every agent came back to its own lease
        for host, own in zip(lab.net.hosts, subnets, strict=True):
            assert peer_routes(lab, host) == set(subnets) - {own}

        # Each came back from the state it kept (the restart listed nothing).
        for agent in lab.agents.values():
            assert agent.log().count("Resuming the lease watch from revision") == 1

        recovery = etcd_outage(lab, seconds=3.0, follow=6.0)
        assert set(recovery.reconnects()) == {str(host.underlay_ip) for host in lab.net.hosts}
        # Each agent's two watches came back, and the tap saw what etcd counted.
        assert len(recovery.times("request", recovery.started)) == recovery.etcd_requests
        assert recovery.etcd_requests >= 2 * AGENTS
        subnet = free_subnet(lab)
        add_peer(lab, subnet)
        wait_programmed(lab, AGENTS, HANG_GUARD)
