"""Filter: a Prometheus file_sd document of the agents' metrics, one target group per node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: prometheus_file_sd
short_description: A Prometheus file_sd document of the agents' metrics
version_added: 0.2.0
description:
  - Prometheus's file-based service discovery reads a list of target groups. This gives one per
    node, its target C(<address>:<port>) (an IPv6 address in brackets), labelled C(node) with the
    node's name and the O(labels) every node shares.
  - A node without an address is reached by its name. The groups keep the input's order.
positional: port, labels
options:
  _input:
    description: Each node's name and the address Prometheus reaches it at (or none).
    type: dict
    required: true
  port:
    description: The health port the agents serve C(/metrics) on (C(flannel_healthz_port)).
    type: int
    required: true
  labels:
    description: Labels of every node's target, such as C(backend).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: The lab's nodes
  ansible.builtin.debug:
    msg: >-
      {{ {'node1': '198.51.100.11', 'node2': 'fd00::12'}
         | pyflannel.network.prometheus_file_sd(8081, {'backend': 'vxlan'}) }}
  # [{"targets": ["198.51.100.11:8081"], "labels": {"node": "node1", "backend": "vxlan"}},
  #  {"targets": ["[fd00::12]:8081"], "labels": {"node": "node2", "backend": "vxlan"}}]
"""

RETURN = r"""
_value:
  description: The target groups, as a file_sd JSON or YAML file holds them.
  type: list
  elements: dict
"""


def prometheus_file_sd(
    addresses: Mapping[str, Any], port: Any, labels: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    try:
        number = int(port)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"prometheus_file_sd: port {port!r} is not a number") from None
    if not 0 < number < 65536:
        raise AnsibleFilterError(f"prometheus_file_sd: port {number} is not 1 to 65535")
    shared = {str(key): str(value) for key, value in (labels or {}).items()}
    groups = []
    for node, address in addresses.items():
        host = str(address) if address else str(node)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        groups.append({"targets": [f"{host}:{number}"], "labels": {"node": str(node), **shared}})
    return groups


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"prometheus_file_sd": prometheus_file_sd}
