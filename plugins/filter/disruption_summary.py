"""Filter: the disruption probe's table, from each node's last check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: disruption_summary
short_description: The disruption probe's table, every connection of every node through the run
version_added: 0.2.0
description:
  - Builds readable lines from each node's last check of the disruption probe, as
    C(pyflannel.network.disruption_probe) with O(pyflannel.network.disruption_probe#module:state=checked)
    returned it. A line per connection says its path, from which node to which, whether it was reset, the
    longest gap between two echoes and the messages lost; then a line per path over all its connections.
  - A node whose probe did not answer the check is named so, and so is one whose probe could not be set up,
    with the reason.
  - Empty when no node had the probe open.
options:
  _input:
    description: Per node, the registered result of its check (a skipped one is left out).
    type: dict
    required: true
  setups:
    description: Per node, the registered result of its probe's setup
      (O(pyflannel.network.disruption_probe#module:state=present)); the failed ones are named.
    type: dict
"""

EXAMPLES = r"""
- name: The disruption probe's table
  ansible.builtin.debug:
    msg: >-
      {{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, '__flannel_disruption_checked')))
         | pyflannel.network.disruption_summary }}
"""

RETURN = r"""
_value:
  description: Lines of text.
  type: list
  elements: str
"""


def _failed(result: Any) -> bool:
    return isinstance(result, Mapping) and bool(result.get("failed"))


def disruption_summary(
    checks: Mapping[str, Any], setups: Mapping[str, Any] | None = None
) -> list[str]:
    from pyflannel_runtime.connectivity.disruption import Row, table_lines

    notes = [
        f"{node}: left out of the probe, its pods could not be set up: {result.get('msg', '')}"
        for node, result in (setups or {}).items()
        if _failed(result)
    ]
    notes += [
        f"{node}: the probe did not answer its check: {result.get('msg', '')}"
        for node, result in checks.items()
        if _failed(result)
    ]
    rows = [
        Row.of(row)
        for result in checks.values()
        if isinstance(result, Mapping) and not result.get("failed")
        for row in result.get("rows") or ()
    ]
    if not rows and not notes:
        return []
    title = "disruption probe, the connections held open through the run"
    return [*(table_lines(rows, title) if rows else []), *notes]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"disruption_summary": disruption_summary}
