"""Action plugin: the inventory checked as one cluster on the controller (no module on hosts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.cluster import ClusterAction

if TYPE_CHECKING:
    from pyflannel_runtime.ops.inventory import InventoryPlan


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


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


class ActionModule(ClusterAction):
    _VALID_ARGS = frozenset(("group", "facts"))
    OPTIONS = {"facts": {"type": "bool", "default": True}}

    def with_facts(self, args: dict[str, Any]) -> bool:
        return bool(args["facts"])

    def act(
        self, checked: InventoryPlan, args: dict[str, Any], task_vars: dict[str, Any]
    ) -> dict[str, Any]:
        host = task_vars["inventory_hostname"]
        cluster = checked.model.model_dump(mode="json", exclude={"nodes"})
        node = _node_fact(checked, host)
        if node is not None:
            # The controller file the agent role copies to flannel_kubeconfig_file.
            node["kubeconfig_src"] = self.node_source(task_vars)
        return {
            "changed": False,
            "ansible_facts": {
                "_flannel_cluster": cluster,
                "_flannel_node": node,
            },
            "nodes": [node.name for node in checked.plan.nodes],
        }
