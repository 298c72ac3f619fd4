"""Filter: the verify role's end-of-play summary, one table per node and the pod matrix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DOCUMENTATION = r"""
name: verify_summary
short_description: The verify role's summary of every node and the pod reachability matrix
version_added: 0.1.0
description:
  - Builds readable lines from what the verify role registered on each host (the routes report with
    subnet.env, the pod address usage, the probe pod and its pings).
  - After a limited run, the nodes outside it follow, each with its lease as the lease store holds it,
    and their probe pods join the matrix; a node that could not be reached is named so.
positional: hostvars
options:
  _input:
    description: The hosts to summarize, e.g. C(ansible_play_hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  nodes:
    description:
      - Every node of the cluster and what its lease is known by (the preflight role's
        C(_flannel_nodes)); the nodes that are not in O(_input) get a short entry with their lease.
    type: dict
  other_pods:
    description: The probe pods the verify role wired on the nodes outside a limited run (its loop's
      registered result); an unreachable node is named, with its lease still held.
    type: dict
  other_pings:
    description: The pings from those probe pods (its loop's registered result); their rows join the
      matrix.
    type: dict
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts | pyflannel.network.verify_summary(hostvars) }}"

- name: Summary of a limited run, with the other nodes
  ansible.builtin.debug:
    msg: >-
      {{ ansible_play_hosts | pyflannel.network.verify_summary(hostvars, nodes=_flannel_nodes,
         other_pods=__flannel_verify_other_pods, other_pings=__flannel_verify_other_pings) }}
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""


def _get(hostvars: Mapping[str, Any], host: str, name: str) -> Any:
    value = hostvars[host].get(name)
    return value if isinstance(value, Mapping) and not value.get("skipped") else None


def _items(result: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A registered loop over nodes, by node."""
    return {str(item.get("item")): item for item in (result or {}).get("results") or ()}


def _node_lines(host: str, hostvars: Mapping[str, Any]) -> list[str]:
    routes = _get(hostvars, host, "__flannel_verify_routes") or {}
    env = routes.get("subnet_env") or {}
    lines = [
        f"{host}:",
        f"  subnet        {env.get('FLANNEL_SUBNET', 'unknown')}",
        f"  MTU           {env.get('FLANNEL_MTU', 'unknown')}",
    ]
    if routes.get("summary"):
        lines.append(f"  datapath      {routes['summary']}")
    lines += [f"    note        {note}" for note in routes.get("notes", [])]
    lines += [f"    missing     {entry}" for entry in routes.get("missing", [])]
    lines += [f"    stale       {entry}" for entry in routes.get("stale", [])]
    if routes.get("writes"):
        lines.append(f"    repaired    {routes['writes']} kernel writes")
    ipam = _get(hostvars, host, "__flannel_verify_ipam") or {}
    for usage in ipam.get("usage", []):
        leaked = f", {usage['leaked']} look leaked" if usage.get("leaked") else ""
        lines.append(
            f"  pod addresses {usage['used']} of {usage['capacity']} in use, "
            f"{usage['free']} free{leaked}"
        )
    pod = _get(hostvars, host, "__flannel_verify_pod") or {}
    lines.append(f"  probe pod     {pod.get('ip', 'not run')}")
    return lines


def _held_leases(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The lease store's leases, as the first node of the run that listed them saw them."""
    for host in hosts:
        leases = (_get(hostvars, host, "__flannel_verify_routes") or {}).get("lease_list")
        if leases:
            return list(leases)
    return []


def _lease_of(name: str, node: Mapping[str, Any], leases: Sequence[Mapping[str, Any]]) -> Any:
    """The lease a node holds: by its name (Kubernetes), public IPs, inventory address or
    pinned subnet."""
    addresses = {node.get("public_ip") or node.get("address"), node.get("public_ipv6")} - {None}
    for lease in leases:
        if (
            lease.get("node") == name
            or lease.get("public_ip") in addresses
            or lease.get("public_ipv6") in addresses
            or (node.get("subnet") is not None and lease.get("subnet") == node.get("subnet"))
        ):
            return lease
    return None


def _duration(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{rest // 60} min {rest % 60} s"


def _other_lines(
    name: str, node: Mapping[str, Any], pod: Mapping[str, Any], leases: Sequence[Mapping[str, Any]]
) -> list[str]:
    unreachable = pod.get("unreachable")
    reason = (str(pod.get("msg") or "").strip().splitlines() or [""])[0]
    why = f" unreachable ({reason.removeprefix('Task failed: ')})" if unreachable else ""
    lines = [f"{name} (not in this run):{why}"]
    lease = _lease_of(name, node, leases)
    if lease is None:
        lines.append("  lease         none in the lease store")
    else:
        subnets = ", ".join(s for s in (lease.get("subnet"), lease.get("ipv6_subnet")) if s)
        owner = lease.get("public_ip") or lease.get("public_ipv6") or lease.get("node")
        expiry = lease.get("expires_in")
        when = "a reservation" if expiry is None else f"expires in {_duration(expiry)}"
        still = " still held" if unreachable else ""
        lines.append(f"  lease         {subnets} ({owner}){still}, {when}")
    if not unreachable and pod:
        lines.append(f"  probe pod     {pod.get('ip', 'not run')}")
    return lines


def _matrix(pods: Mapping[str, str], reached: Mapping[str, Mapping[str, bool]]) -> list[str]:
    width = max(len("FAIL"), *(len(h) for h in pods)) + 2
    lines = ["pod reachability (row pings column):"]
    lines.append(" " * width + "".join(h.ljust(width) for h in pods))
    for source in pods:
        cells = []
        for target, ip in pods.items():
            mark = "-" if target == source else ("ok" if reached[source].get(ip) else "FAIL")
            cells.append(mark.ljust(width))
        lines.append(source.ljust(width) + "".join(cells))
    every = all(ok for row in reached.values() for ok in row.values())
    lines.append(
        "every pod reaches every other pod" if every else "SOME PODS CANNOT REACH EACH OTHER"
    )
    return lines


def verify_summary(
    hosts: Sequence[str],
    hostvars: Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    other_pods: Mapping[str, Any] | None = None,
    other_pings: Mapping[str, Any] | None = None,
) -> list[str]:
    lines = [line for host in hosts for line in _node_lines(host, hostvars)]
    pods: dict[str, str] = {}
    reached: dict[str, Mapping[str, bool]] = {}
    for host in hosts:
        pod = _get(hostvars, host, "__flannel_verify_pod") or {}
        if pod.get("ip"):
            pods[host] = pod["ip"]
            ping = _get(hostvars, host, "__flannel_verify_ping") or {}
            reached[host] = ping.get("reachable") or {}
    others = _items(other_pods)
    pings = _items(other_pings)
    leases = _held_leases(hosts, hostvars)
    for name, node in (nodes or {}).items():
        if name in hosts:
            continue
        pod = others.get(name, {})
        lines += _other_lines(name, node, pod, leases)
        if pod.get("ip"):
            pods[name] = pod["ip"]
            reached[name] = pings.get(name, {}).get("reachable") or {}
    if pods:
        order = [*(nodes or {}), *hosts]
        lines += _matrix(dict(sorted(pods.items(), key=lambda pod: order.index(pod[0]))), reached)
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"verify_summary": verify_summary}
