"""Filter: the verify role's end-of-play summary, one table per node (the connectivity suite's
matrix is ``connectivity_summary``'s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DOCUMENTATION = r"""
name: verify_summary
short_description: The verify role's summary of every node
version_added: 0.1.0
description:
  - Builds readable lines from each node's verify results (the routes report with subnet.env,
    the pod address usage, the connectivity suite's probe pods and the VXLAN device's tx checksum
    offload).
  - After a limited run, the nodes outside it follow, each with its lease as the lease store holds it
    and the suite's probe pods wired there; a node that could not be reached is named so.
  - Then, once for the cluster, the leases, the orphans among them and the free subnets (what
    C(pyflannel.network.leases_info) reported).
options:
  _input:
    description:
      - Per node of the run, in order, its results, each as its task registered it (a skipped or
        missing one is left out); C(routes) (C(pyflannel.network.routes)), C(ipam)
        (C(pyflannel.network.ipam)), C(suite) (the connectivity suite's setup) and
        C(connectivity) (its run).
    type: dict
    required: true
  leases:
    description: What C(pyflannel.network.leases_info) reported, for the cluster's lines.
    type: dict
    version_added: 0.2.0
  nodes:
    description:
      - Every node of the cluster and what its lease is known by (the preflight role's
        C(_flannel_nodes)); the nodes that are not in O(_input) get a short entry with their lease.
    type: dict
    version_added: 0.2.0
  other_suites:
    description: The connectivity suite's setup on the nodes outside a limited run (the verify role's
      loop's registered result); an unreachable node is named, with its lease still held.
    type: dict
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '_flannel_verify_report')))
         | pyflannel.network.verify_summary(leases=__flannel_verify_leases) }}
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""


def _get(report: Mapping[str, Any] | None, name: str) -> Any:
    value = (report or {}).get(name)
    return value if isinstance(value, Mapping) and not value.get("skipped") else None


def loop_items(result: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    """A registered loop over nodes, by node."""
    return {str(item.get("item")): item for item in (result or {}).get("results") or ()}


def _node_lines(host: str, report: Mapping[str, Any]) -> list[str]:
    routes = _get(report, "routes") or {}
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
    lines += [f"    rejected    {lease}" for lease in routes.get("rejected", [])]
    if routes.get("writes"):
        lines.append(f"    repaired    {routes['writes']} kernel writes")
    ipam = _get(report, "ipam") or {}
    for usage in ipam.get("usage", []):
        leaked = f", {usage['leaked']} look leaked" if usage.get("leaked") else ""
        lines.append(
            f"  pod addresses {usage['used']} of {usage['capacity']} in use, "
            f"{usage['free']} free{leaked}"
        )
    lines += _suite_lines(
        _get(report, "suite") or {},
        _get(report, "connectivity") or {},
    )
    return lines


def _suite_lines(suite: Mapping[str, Any], run: Mapping[str, Any]) -> list[str]:
    """The connectivity suite's probe pods on the node, and its VXLAN device's offload as the
    suite left it (auto may have turned it off)."""
    pods = ", ".join(str(pod["ip"]) for pod in suite.get("pods", ()))
    lines = [f"  probe pods    {pods or 'not run'}"]
    offload = run.get("offload") or suite.get("offload") or {}
    if offload:
        state = {True: "on", False: "off"}.get(offload.get("enabled"), "unknown")
        lines.append(
            f"  tx offload    {offload['device']} {state} "
            f"(flannel_vxlan_tx_checksum_offload: {offload['mode']})"
        )
    return lines


def _held_leases(reports: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The lease store's leases, as the first node of the run that listed them saw them."""
    for report in reports.values():
        leases = (_get(report, "routes") or {}).get("lease_list")
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
    name: str,
    node: Mapping[str, Any],
    suite: Mapping[str, Any],
    leases: Sequence[Mapping[str, Any]],
) -> list[str]:
    unreachable = suite.get("unreachable")
    reason = (str(suite.get("msg") or "").strip().splitlines() or [""])[0]
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
    if not unreachable and suite:
        lines += _suite_lines(suite, {})
    return lines


def verify_summary(
    reports: Mapping[str, Any],
    leases: Mapping[str, Any] | None = None,
    nodes: Mapping[str, Mapping[str, Any]] | None = None,
    other_suites: Mapping[str, Any] | None = None,
) -> list[str]:
    lines = [line for host, report in reports.items() for line in _node_lines(host, report or {})]
    others = loop_items(other_suites)
    held = _held_leases(reports)
    for name, node in (nodes or {}).items():
        if name not in reports:
            lines += _other_lines(name, node, others.get(name, {}), held)
    return lines + _leases(_get({"leases": leases}, "leases"))


def _leases(found: Mapping[str, Any] | None) -> list[str]:
    """The cluster's leases, orphans and subnets, as leases_info reported them."""
    if found is None:
        return []
    orphans = found.get("orphans", [])
    lines = [f"leases        {len(found.get('leases', []))}, {len(orphans)} orphans"]
    for lease in orphans:
        subnets = ", ".join(s for s in (lease.get("subnet"), lease.get("ipv6_subnet")) if s)
        lines.append(f"  orphan      {subnets} (public IP {lease.get('public_ip')})")
    for usage in found.get("utilisation", []):
        outside = f", {usage['outside']} leases outside them" if usage.get("outside") else ""
        lines.append(
            f"subnets       {usage['network']}: {usage['used']} of {usage['total']} used, "
            f"{usage['free']} free{outside}"
        )
    return lines


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"verify_summary": verify_summary}
