"""Filter: a role variable's value converted to the type its argument spec gives it."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.pyflannel.network.plugins.plugin_utils.role_values import (
    convert_role_value,
    role_options,
)

DOCUMENTATION = r"""
name: role_value
short_description: A role variable's value as the type of its argument spec
version_added: 0.2.0
description:
  - C(-e key=value) values and INI C([group:vars]) values are strings, and ansible-core hands
    them to a role's tasks unconverted (it only checks that they could be converted).
  - Converts the value as Ansible converts a module option of the type the collection's roles
    give the variable in C(meta/argument_specs.yml), as the preflight role does for the cluster
    model, e.g. a comma-separated string to a list. For a bool, C(ansible.builtin.bool) does the
    same.
positional: name
options:
  _input:
    description: The variable's value.
    type: raw
    required: true
  name:
    description: The variable's name; one the roles document.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The devices a reset deletes, also when given as -e flannel_reset_devices=cni0,docker0
  ansible.builtin.debug:
    msg: "{{ flannel_reset_devices | pyflannel.network.role_value('flannel_reset_devices') }}"
"""

RETURN = r"""
_value:
  description: The converted value.
  type: raw
"""


def role_value(value: Any, name: str) -> Any:
    if name not in role_options():
        raise AnsibleFilterError(f"role_value: {name} is no variable of the collection's roles")
    converted, problem = convert_role_value(name, value)
    if problem is not None:
        raise AnsibleFilterError(f"role_value: {problem}")
    return converted


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"role_value": role_value}
