"""Filter: the agent role's restart batches, from each host's agent state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: restart_batches
short_description: The batches in which the agent role restarts agents
version_added: 0.2.0
description:
  - Orders agent restarts (pyflannel_controller.rolling). Every host whose agent is C(down) comes
    first, all in one batch, since restarting those stops nothing that runs. Then the C(outdated)
    ones (their agent runs another runtime, other settings or another network config) in batches
    of O(batch) hosts. C(current) hosts are left out.
positional: batch, hosts
options:
  _input:
    description: Each host's agent state, C(down), C(outdated) or C(current), in the play's order.
    type: dict
    required: true
  batch:
    description:
      - Hosts per batch (C(flannel_agent_restart_batch)), as Ansible's C(serial) takes it, a number
        of hosts or a percentage of O(hosts) such as C(25%) (rounded down, at least one host).
    type: raw
    required: true
  hosts:
    description: How many hosts the play has, which a percentage is of.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Plan the restarts
  ansible.builtin.set_fact:
    batches: >-
      {{ {'node1': 'current', 'node2': 'outdated', 'node3': 'outdated', 'node4': 'down'}
         | pyflannel.network.restart_batches(1, 4) }}
  # [[node4], [node2], [node3]]
"""

RETURN = r"""
_value:
  description: The batches, each a list of host names.
  type: list
  elements: list
"""


def restart_batches(states: Mapping[str, str], batch: Any, hosts: int) -> list[list[str]]:
    try:
        from pyflannel_controller.rolling import (
            VARIABLE,
            AgentState,
            BatchSizeError,
            batch_size,
        )
        from pyflannel_controller.rolling import restart_batches as batches
    except ImportError as why:
        raise AnsibleFilterError(
            f"pyflannel.network needs the pyflannel_controller package on the controller: {why}"
        ) from why
    try:
        size = batch_size(batch, int(hosts))
    except BatchSizeError as why:
        raise AnsibleFilterError(f"{VARIABLE}: {why}") from why
    try:
        parsed = {str(host): AgentState(state) for host, state in states.items()}
    except ValueError as why:
        raise AnsibleFilterError(f"restart_batches: {why}") from why
    return batches(parsed, size)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"restart_batches": restart_batches}
