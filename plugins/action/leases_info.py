"""Action plugin: pyflannel.network.leases_info runs with the agent's virtualenv's Python, with
the inventory's hosts and their addresses (controller-side data) when the task names none; and
not at all when node_facts read the leases earlier in the run (known): they are matched to the
hosts here."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ansible_collections.pyflannel.network.plugins.plugin_utils.agent_venv import (
    AgentVenvAction,
    controller_runtime,
)


def _node_addresses(host_vars: Mapping[str, Any]) -> Iterator[Any]:
    """What the preflight found: the public IPs the agent announces, and every address of the
    host's links."""
    node = host_vars.get("_flannel_node") or {}
    yield node.get("public_ip")
    yield node.get("public_ipv6")
    facts = (host_vars.get("ansible_facts") or {}).get("pyflannel_host") or {}
    for link in facts.get("links") or []:
        for addr in link.get("addrs") or []:
            yield addr.get("ip")


def host_addresses(name: str, host_vars: Mapping[str, Any]) -> list[str]:
    """The addresses a host is known by, each once: the preflight's, then ``ansible_host`` (or
    the name) when it is an IP address. Loopback, link-local and unspecified addresses are no
    host's in particular and are left out."""
    found: list[str] = []
    for value in [*_node_addresses(host_vars), host_vars.get("ansible_host") or name]:
        try:
            address = ipaddress.ip_address(str(value))
        except ValueError:
            continue
        if address.is_loopback or address.is_link_local or address.is_unspecified:
            continue
        if str(address) not in found:
            found.append(str(address))
    return found


def inventory_hosts(names: Sequence[str], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, "addresses": host_addresses(name, hostvars[name])} for name in names]


class ActionModule(AgentVenvAction):
    def module_args(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        if args.get("hosts") is None:
            names = (task_vars.get("groups") or {}).get("all") or []
            args["hosts"] = inventory_hosts(names, task_vars["hostvars"])
        return args

    def known_result(self, args: dict[str, Any]) -> dict[str, Any] | None:
        known = args.pop("known", None)
        if not isinstance(known, Mapping) or "leases" not in known:
            return None
        leases = controller_runtime("pyflannel_runtime.ops.leases")
        try:
            hosts = [
                leases.InventoryHost(
                    str(host["name"]),
                    frozenset(ipaddress.ip_address(a) for a in host["addresses"]),
                )
                for host in args.get("hosts") or []
            ]
            return {"changed": False, **leases.with_owners(known, hosts)}
        except (ValueError, KeyError, TypeError):  # not a report: the module says what it finds
            return None
