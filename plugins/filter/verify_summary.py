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
  - Builds readable lines from what the verify role registered on each host (the routes report with
    subnet.env, the pod address usage, the connectivity suite's probe pods and the VXLAN device's tx
    checksum offload).
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
    for host in hosts:
        routes = _get(hostvars, host, "__flannel_verify_routes") or {}
        env = routes.get("subnet_env") or {}
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
        for lease in routes.get("rejected", []):
            lines.append(f"    rejected    {lease}")
        if routes.get("writes"):
            lines.append(f"    repaired    {routes['writes']} kernel writes")
        ipam = _get(hostvars, host, "__flannel_verify_ipam") or {}
        for usage in ipam.get("usage", []):
            leaked = f", {usage['leaked']} look leaked" if usage.get("leaked") else ""
            lines.append(
                f"  pod addresses {usage['used']} of {usage['capacity']} in use, "
                f"{usage['free']} free{leaked}"
            )
        lines += _suite_lines(
            _get(hostvars, host, "__flannel_verify_suite") or {},
            _get(hostvars, host, "__flannel_verify_connectivity") or {},
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


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"verify_summary": verify_summary}
