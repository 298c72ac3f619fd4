"""pyflannel.network.render_node's action, run as Ansible runs it on the controller: with hosts
(run_once in the roles) every node's files from one check of the cluster, each the same as that
node's own run renders."""

from __future__ import annotations

from typing import Any
from unittest import mock

from ansible_collections.pyflannel.network.plugins.action import render_node

from tests.unit.test_ops_inventory import ETCD, HOSTS, lab_facts

FILES = ["conflist", "agent_env", "systemd_unit", "subnet_env"]


def task_vars(host: str) -> dict[str, Any]:
    """What the action reads of a play on the lab's three nodes, after the preflight role."""
    facts = lab_facts()
    hostvars = {
        name: {"_flannel_settings": dict(ETCD), "ansible_facts": {"pyflannel_host": facts[name]}}
        for name in HOSTS
    }
    return {
        "inventory_hostname": host,
        "hostvars": hostvars,
        "groups": {"flannel_nodes": list(HOSTS)},
        "ansible_play_hosts_all": list(HOSTS),
    }


def run_action(module: Any, host: str, args: dict[str, Any]) -> dict[str, Any]:
    """An action plugin ``module``'s ActionModule run on ``host`` of the play above."""
    task = mock.MagicMock(args=args, async_val=0, check_mode=False)
    action = module.ActionModule(
        task, mock.MagicMock(), mock.MagicMock(), None, mock.MagicMock(), None
    )
    return dict(action.run(task_vars=task_vars(host)))


def run(host: str, **args: Any) -> dict[str, Any]:
    return run_action(render_node, host, {"files": FILES, **args})


def test_every_hosts_files_are_its_own_runs() -> None:
    every = run(HOSTS[0], hosts=list(HOSTS))
    assert not every.get("failed"), every
    assert sorted(every["hosts"]) == sorted(HOSTS)
    for host in HOSTS:
        own = run(host)
        assert every["hosts"][host] == own["files"], host
        assert own["net_conf"] == every["net_conf"]
    assert every["files"] == every["hosts"][HOSTS[0]]
    # The nodes' environment files differ (each names its own public IP).
    assert len({str(files) for files in every["hosts"].values()}) == len(HOSTS)


def test_without_hosts_only_this_hosts_files() -> None:
    assert "hosts" not in run(HOSTS[1])


def test_a_kubeconfig_source_is_one_hosts_file() -> None:
    result = run(HOSTS[0], hosts=list(HOSTS), kubeconfig_src="kubeconfig")
    assert result["failed"] and result["msg"].startswith("kubeconfig_src is one host's file")


def test_a_host_that_is_no_flannel_node_is_named() -> None:
    result = run(HOSTS[0], hosts=[*HOSTS, "stranger"])
    assert result["failed"] and "stranger" in result["msg"], result
