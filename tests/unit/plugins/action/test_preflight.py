"""pyflannel.network.preflight's action, run as Ansible runs it on the controller: with hosts
(run_once in the role) every host's plan from one check of the cluster, each the same as that
host's own check gives it."""

from __future__ import annotations

from typing import Any

from ansible_collections.pyflannel.network.plugins.action import preflight

from tests.unit.plugins.action.test_render_node import run_action
from tests.unit.test_ops_inventory import HOSTS


def run(host: str, **args: Any) -> dict[str, Any]:
    return run_action(preflight, host, args)


def test_every_hosts_plan_is_its_own_checks() -> None:
    every = run(HOSTS[0], hosts=list(HOSTS))
    assert not every.get("failed"), every
    facts = every["ansible_facts"]
    assert "_flannel_node" not in facts
    assert sorted(facts["_flannel_play_nodes"]) == sorted(HOSTS)
    for host in HOSTS:
        own = run(host)["ansible_facts"]
        assert facts["_flannel_play_nodes"][host] == own["_flannel_node"], host
        assert facts["_flannel_cluster"] == own["_flannel_cluster"]
        assert facts["_flannel_nodes"] == own["_flannel_nodes"]
    # Each plan is the host's own (its public IP), not the first host's copied.
    plans = facts["_flannel_play_nodes"].values()
    assert len({plan["public_ip"] for plan in plans}) == len(HOSTS)


def test_a_host_that_is_no_flannel_node_has_no_plan() -> None:
    every = run(HOSTS[0], hosts=[*HOSTS, "etcd-only"])
    assert not every.get("failed"), every
    assert every["ansible_facts"]["_flannel_play_nodes"]["etcd-only"] is None
