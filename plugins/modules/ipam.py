#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ipam.node.manage_leaks (what `pyflannel ipam` shows and
`pyflannel ipam gc` releases)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ipam
short_description: Report a node's pod addresses and release the leaked ones
version_added: 0.1.0
description:
  - Reads the node's pod subnet (C(subnet.env)), the addresses host-local has handed out for the
    flannel network and the flannel plugin's state files, as C(pyflannel ipam) shows them.
  - An allocation looks leaked when no flannel state file backs it (no CNI DEL will ever release
    it) or when no container runtime knows its container any more. The runtimes (podman, crictl)
    are asked which containers exist, unless O(valid_containers) names them.
  - Releases the allocations and state files of containers that are gone through the flannel
    CNI plugin's own GC, as C(pyflannel ipam gc) does; containers a runtime still knows are
    never touched. C(changed) is true only when something was released.
  - Warns when a family of the pod subnet has fewer than O(free_warning_percent) percent of its
    addresses free.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
attributes:
  check_mode:
    support: full
    details: Reports, and predicts what would be released; releases nothing.
  diff_mode:
    support: none
options:
  conflist:
    description: The node's CNI conflist holding the flannel plugin.
    type: path
    default: /etc/cni/net.d/10-flannel.conflist
  cni_path:
    description: Where the CNI plugins are (colon-separated), for the DELs that release addresses.
    type: str
    default: /opt/cni/bin
  valid_containers:
    description:
      - The CNI container IDs (pod sandbox IDs) of the node's live containers.
      - When omitted, podman and crictl are asked; if neither can say, check mode releases
        nothing and a normal run fails rather than guess.
    type: list
    elements: str
  free_warning_percent:
    description: Warn when fewer than this percentage of a pod subnet's addresses are free; 0 never warns.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Report the node's pod addresses and the leaked ones
  pyflannel.network.ipam:
  check_mode: true
  register: __flannel_ipam

- name: Release the addresses of containers the runtime no longer knows
  pyflannel.network.ipam:
    cni_path: /opt/cni/bin

- name: Release leaks with the live pod sandboxes named by the caller
  pyflannel.network.ipam:
    valid_containers: "{{ __flannel_live_sandboxes.stdout_lines }}"
"""

RETURN = r"""
network:
  description: The CNI network name (the conflist's C(name)).
  returned: always
  type: str
  sample: cbr0
subnets:
  description: The node's pod subnets from C(subnet.env); empty when it cannot be read.
  returned: always
  type: list
  elements: str
  sample: [10.244.3.0/24]
usage:
  description: Per address family of the pod subnet, the addresses host-local hands out and how many are held.
  returned: always
  type: list
  elements: dict
  contains:
    family:
      description: C(ipv4) or C(ipv6).
      type: str
    subnet:
      description: The pod subnet.
      type: str
    capacity:
      description: Addresses host-local can hand out (the gateway and IPv4 broadcast excluded).
      type: int
    used:
      description: Addresses handed out.
      type: int
    free:
      description: Addresses left.
      type: int
    leaked:
      description: Of the used addresses, how many look leaked.
      type: int
allocations:
  description: Every address host-local has handed out for the network, after any release.
  returned: always
  type: list
  elements: dict
  contains:
    address:
      description: The pod address.
      type: str
    family:
      description: C(ipv4) or C(ipv6).
      type: str
    container_id:
      description: The CNI container ID holding it.
      type: str
    ifname:
      description: The interface it was allocated for (empty for files of old host-local versions).
      type: str
    state_file:
      description: Whether a flannel state file backs it (DEL can release it).
      type: bool
    container_known:
      description: Whether a runtime knows the container; null when that cannot be told.
      type: bool
    leaked:
      description: Whether it looks leaked.
      type: bool
    reasons:
      description: Why it looks leaked.
      type: list
      elements: str
    releasable:
      description: Whether its container is gone, so that a release frees it.
      type: bool
leaked:
  description: How many allocations look leaked.
  returned: always
  type: int
stale_state_files:
  description: Containers that are gone but left a flannel state file and hold no address.
  returned: always
  type: list
  elements: str
runtime:
  description: Who said which containers exist (C(sources)) and how many they know (C(containers), null when unknown).
  returned: always
  type: dict
gc:
  description: What was released (or, in check mode, would be), and what failed.
  returned: when the live containers are known, or in a normal run
  type: dict
  contains:
    dry_run:
      description: True in check mode.
      type: bool
    released:
      description: Per container and interface, the addresses released and how.
      type: list
      elements: dict
    errors:
      description: One line per failure.
      type: list
      elements: str
problems:
  description: What could not be read (subnet.env, a runtime, an allocation file).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    VENV_ARGUMENT_SPEC,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            "conflist": {"type": "path", "default": "/etc/cni/net.d/10-flannel.conflist"},
            "cni_path": {"type": "str", "default": "/opt/cni/bin"},
            "valid_containers": {"type": "list", "elements": "str"},
            "free_warning_percent": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.ops.ipam import IpamError, manage_leaks

    params = module.params
    try:
        result = manage_leaks(
            params["conflist"],
            params["valid_containers"],
            params["cni_path"],
            os.environ,
            check_mode=module.check_mode,
            free_percent=params["free_warning_percent"],
        )
    except IpamError as err:
        module.fail_json(msg=str(err))
    for warning in result.pop("warnings"):
        module.warn(warning)
    errors = result.get("gc", {}).get("errors")
    if errors:
        module.fail_json(msg=f"{len(errors)} release(s) failed: {'; '.join(errors)}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
