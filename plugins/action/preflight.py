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


def _node_fact(checked: InventoryPlan, host: str) -> dict[str, Any] | None:
    if host not in {node.name for node in checked.plan.nodes}:
        return None
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


def _unchecked(task_vars: dict[str, Any]) -> list[str]:
    """The nodes checked without their facts, said once per play (by its first host)."""
    if task_vars["inventory_hostname"] != (task_vars.get("ansible_play_hosts") or [None])[0]:
        return []
    return [
        f"{host}: {'unreachable' if unreachable else 'its node facts failed'} ({why}); "
        "checked without its facts"
        for host, (unreachable, why) in sorted(fact_failures(task_vars).items())
    ]


class ActionModule(ClusterAction):
    _VALID_ARGS = frozenset(("group", "facts", "allow_unreachable"))
    OPTIONS = {
        "facts": {"type": "bool", "default": True},
        "allow_unreachable": {"type": "bool", "default": False},
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
        nodes = {}
        for name in (n.name for n in checked.plan.nodes):
            fact = _node_fact(checked, name) or {}
            nodes[name] = {key: fact.get(key) for key in _IDENTITY}
            nodes[name]["address"] = _inventory_address(task_vars["hostvars"], name)
        node = _node_fact(checked, host)
        if node is not None:
            node["address"] = nodes[host]["address"]
            # The controller file the agent role copies to flannel_kubeconfig_file.
            node["kubeconfig_src"] = self.node_source(task_vars)
        return {
            "changed": False,
            "warnings": _unchecked(task_vars) if self.with_facts(args) else [],
            "ansible_facts": {
                "_flannel_cluster": cluster,
                "_flannel_node": node,
                # Every node of the cluster (in the play or not): what its lease is known by.
                "_flannel_nodes": nodes,
            },
            "nodes": list(nodes),
        }
