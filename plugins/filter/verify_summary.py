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
    subnet.env, the pod address usage, the probe pod and its pings) and once for the cluster (the
    leases, the orphans among them and the free subnets).
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
"""

EXAMPLES = r"""
- name: Summary
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts | pyflannel.network.verify_summary(hostvars) }}"
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


def verify_summary(hosts: Sequence[str], hostvars: Mapping[str, Any]) -> list[str]:
    lines = []
    pods: dict[str, str] = {}
    for host in hosts:
        routes = _get(hostvars, host, "__flannel_verify_routes") or {}
        env = routes.get("subnet_env") or {}
        pod = _get(hostvars, host, "__flannel_verify_pod") or {}
        if pod.get("ip"):
            pods[host] = pod["ip"]
        lines.append(f"{host}:")
        lines.append(f"  subnet        {env.get('FLANNEL_SUBNET', 'unknown')}")
        lines.append(f"  MTU           {env.get('FLANNEL_MTU', 'unknown')}")
        if routes.get("summary"):
            lines.append(f"  datapath      {routes['summary']}")
        for note in routes.get("notes", []):
            lines.append(f"    note        {note}")
        for entry in routes.get("missing", []):
            lines.append(f"    missing     {entry}")
        for entry in routes.get("stale", []):
            lines.append(f"    stale       {entry}")
        if routes.get("writes"):
            lines.append(f"    repaired    {routes['writes']} kernel writes")
        ipam = _get(hostvars, host, "__flannel_verify_ipam") or {}
        for usage in ipam.get("usage", []):
            leaked = f", {usage['leaked']} look leaked" if usage.get("leaked") else ""
            lines.append(
                f"  pod addresses {usage['used']} of {usage['capacity']} in use, "
                f"{usage['free']} free{leaked}"
            )
        lines.append(f"  probe pod     {pod.get('ip', 'not run')}")
    # Registered once (run_once), on every host.
    registered = [_get(hostvars, host, "__flannel_verify_leases") for host in hosts]
    lines += _leases(next((found for found in registered if found), None))
    if pods:
        width = max(len("FAIL"), *(len(h) for h in hosts)) + 2
        lines.append("pod reachability (row pings column):")
        lines.append(" " * width + "".join(h.ljust(width) for h in pods))
        for source in pods:
            reached = (_get(hostvars, source, "__flannel_verify_ping") or {}).get("reachable", {})
            cells = []
            for target, ip in pods.items():
                mark = "-" if target == source else ("ok" if reached.get(ip) else "FAIL")
                cells.append(mark.ljust(width))
            lines.append(source.ljust(width) + "".join(cells))
        every = all(
            ok
            for source in pods
            for ok in (
                (_get(hostvars, source, "__flannel_verify_ping") or {}).get("reachable") or {}
            ).values()
        )
        lines.append(
            "every pod reaches every other pod" if every else "SOME PODS CANNOT REACH EACH OTHER"
        )
    return lines


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
