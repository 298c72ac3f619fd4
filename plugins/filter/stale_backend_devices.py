"""Filter: the flannel devices a node has that the configured backend does not use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: stale_backend_devices
short_description: The flannel devices of another backend, or of another VNI, on a node
version_added: 0.1.0
description:
  - The agent creates its own backend's device but never removes another's. After a switch of
    C(flannel_backend_type), or of C(flannel_vxlan_vni), the old device stays, with its routes,
    neighbours and FDB entries.
  - Of the given link names, returns those that some flannel backend creates (C(flannel.<VNI>),
    C(flannel-v6.<VNI>), C(flannel<N>)) and that the configured backend, with its options, does
    not use; with no cluster (C(none)), as on a reset, every one of them.
positional: cluster
options:
  _input:
    description: The node's link names.
    type: list
    elements: str
    required: true
  cluster:
    description:
      - The cluster settings as the preflight role's C(_flannel_cluster) fact has them.
      - C(none) for no backend at all.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Remove the devices of a previous backend
  ansible.builtin.command:
    argv: [ip, link, delete, "{{ item }}"]
  loop: "{{ ansible_facts.pyflannel_host.links | map(attribute='name')
            | pyflannel.network.stale_backend_devices(_flannel_cluster) }}"
  register: deleted
  # Links gathered earlier: udp's flannel0 goes with the agent that held it.
  changed_when: deleted.rc == 0
  failed_when: deleted.rc != 0 and 'Cannot find device' not in deleted.stderr

- name: Every flannel device, as a reset removes them
  ansible.builtin.debug:
    msg: "{{ ansible_facts.pyflannel_host.links | map(attribute='name')
             | pyflannel.network.stale_backend_devices(none) }}"
"""

RETURN = r"""
_value:
  description: Link names, in the order given.
  type: list
  elements: str
"""


def stale_backend_devices(
    link_names: Iterable[str], cluster: Mapping[str, Any] | None
) -> list[str]:
    try:
        from pyflannel_controller.model.cluster_settings import backend_options
        from pyflannel_runtime import PyflannelError
        from pyflannel_runtime.backend_spec.specs import flannel_devices, stale_devices
    except ImportError as why:
        raise AnsibleFilterError(
            f"pyflannel.network needs the pyflannel project (pyflannel_runtime and pyflannel_controller) "
            f"on the controller: {why}"
        ) from why
    if cluster is None:
        return flannel_devices(list(link_names))
    try:
        return stale_devices(list(link_names), backend_options(cluster))
    except (PyflannelError, KeyError) as why:
        raise AnsibleFilterError(f"stale_backend_devices: {why}") from why


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"stale_backend_devices": stale_backend_devices}
