"""Action plugin: the inventory checked as one cluster on the controller (no module on hosts)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import (
    ClusterAction,
    fact_failures,
)

if TYPE_CHECKING:
    from pyflannel_controller.inventory import InventoryPlan


def _node_fact(checked: InventoryPlan, host: str) -> dict[str, Any]:
    """A flannel node's plan as the roles read it."""
    node = checked.node(host)
    network = checked.networks.get(host)
    chosen = network.interface if network is not None else None
    public_ip = str(chosen.ext_addr) if chosen and chosen.ext_addr else _text(node.public_ip)
    public_ipv6 = (
        str(chosen.ext_v6_addr) if chosen and chosen.ext_v6_addr else _text(node.public_ipv6)
    )
    pinned = node.subnet is not None or node.ipv6_subnet is not None
    return {
        "name": host,
        "subnet": None if node.subnet is None else str(node.subnet),
        "ipv6_subnet": None if node.ipv6_subnet is None else str(node.ipv6_subnet),
        "mtu": node.mtu,
        "interface": chosen.name if chosen else node.interface,
        "public_ip": public_ip,
        "public_ipv6": public_ipv6,
        # An etcd reservation for a pinned subnet (pyflannel.network.network_config).
        "reservation": {
            "subnet": _text(node.subnet),
            "ipv6_subnet": _text(node.ipv6_subnet),
            "public_ip": public_ip,
            "public_ipv6": public_ipv6,
        }
        if pinned
        else None,
    }


# What a node's lease is found by (the lease module, the verify role's summary).
_IDENTITY = ("subnet", "ipv6_subnet", "public_ip", "public_ipv6")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _inventory_address(hostvars: Any, host: str) -> str | None:
    """The host's ansible_host when it is an IP address: where a node's lease is looked for
    when neither its facts nor flannel_public_ip name its public IP."""
    address = hostvars[host].get("ansible_host")
    try:
        return str(ipaddress.ip_address(str(address)))
    except ValueError:
        return None


def _unchecked(task_vars: dict[str, Any], once: bool) -> list[str]:
    """The nodes checked without their facts, said once per play (by its first host, unless
    the check runs ``once`` for every host)."""
    first = (task_vars.get("ansible_play_hosts") or [None])[0]
    if not once and task_vars["inventory_hostname"] != first:
        return []
    return [
        f"{host}: {'unreachable' if unreachable else 'its node facts failed'} ({why}); "
        "checked without its facts"
        for host, (unreachable, why) in sorted(fact_failures(task_vars).items())
    ]


class ActionModule(ClusterAction):
    _VALID_ARGS = frozenset(("group", "facts", "allow_unreachable", "hosts"))
    OPTIONS = {
        "facts": {"type": "bool", "default": True},
        "allow_unreachable": {"type": "bool", "default": False},
        # Every one of these hosts' plans, from one check of the cluster (with run_once: a check
        # per host reads every node's variables once per host, a cost growing with the square).
        "hosts": {"type": "list", "elements": "str"},
    }

    def with_facts(self, args: dict[str, Any]) -> bool:
        return bool(args["facts"])

    def allow_unreachable(self, args: dict[str, Any]) -> bool:
        return bool(args["allow_unreachable"])

    def act(
        self, checked: InventoryPlan, args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any]:
        host = task_vars["inventory_hostname"]
        cluster = checked.model.model_dump(mode="json", exclude={"nodes"})
        plans = {n.name: _node_fact(checked, n.name) for n in checked.plan.nodes}
        nodes = {}
        for name, plan in plans.items():
            nodes[name] = {key: plan.get(key) for key in _IDENTITY}
            nodes[name]["address"] = _inventory_address(task_vars["hostvars"], name)
            plan["address"] = nodes[name]["address"]
        facts: dict[str, Any] = {
            "_flannel_cluster": cluster,
            # Every node of the cluster (in the play or not): what its lease is known by.
            "_flannel_nodes": nodes,
        }
        if args["hosts"] is None:
            facts["_flannel_node"] = self._plan(plans, task_vars, host)
        else:
            facts["_flannel_play_nodes"] = {
                name: self._plan(plans, task_vars, name) for name in args["hosts"]
            }
        return {
            "changed": False,
            "warnings": (
                _unchecked(task_vars, once=args["hosts"] is not None)
                if self.with_facts(args)
                else []
            ),
            "ansible_facts": facts,
            "nodes": list(nodes),
        }

    def _plan(
        self, plans: dict[str, dict[str, Any]], task_vars: dict[str, Any], host: str
    ) -> dict[str, Any] | None:
        """One host's plan, None for a host that is no flannel node (an etcd member only)."""
        plan = plans.get(host)
        if plan is None:
            return None
        # The controller file the agent role copies to flannel_kubeconfig_file.
        return {**plan, "kubeconfig_src": self.node_source(task_vars["hostvars"][host])}
