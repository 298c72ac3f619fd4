#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.probe."""

from __future__ import annotations

DOCUMENTATION = r"""
module: pod_probe
short_description: A throwaway pod wired through the node's CNI conflist, to test pod reachability
version_added: 0.1.0
description:
  - With O(state=present), creates the network namespace O(name) and runs CNI ADD for it through the
    first plugin of the conflist (the flannel plugin), as a container runtime would; returns the pod's
    address. A probe pod that is already there is reused.
  - With O(ping), pings each address from inside the pod and reports which answered.
  - With O(state=absent), runs CNI DEL and removes the namespace.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
attributes:
  check_mode:
    support: none
    details: A probe is a real pod; skip the probe in check mode.
  diff_mode:
    support: none
options:
  name:
    description: Name of the probe pod's network namespace (and its CNI container ID).
    type: str
    default: pyflannel-probe
  state:
    description: Whether the probe pod should exist.
    type: str
    choices: [present, absent]
    default: present
  conflist:
    description: The node's conflist.
    type: path
    default: /etc/cni/net.d/10-flannel.conflist
  bin_dir:
    description: The CNI bin directory holding the flannel plugin and its delegates.
    type: path
    default: /opt/cni/bin
  ping:
    description: Addresses to ping from inside the probe pod (with O(state=present)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Wire a probe pod
  pyflannel.network.pod_probe:
  register: probe

- name: Ping the other nodes' probe pods from it
  pyflannel.network.pod_probe:
    ping: [10.244.1.2, 10.244.2.2]

- name: Remove the probe pod
  pyflannel.network.pod_probe:
    state: absent
"""

RETURN = r"""
ip:
  description: The probe pod's IPv4 address.
  returned: when O(state=present)
  type: str
  sample: 10.244.0.2
reachable:
  description: Each pinged address and whether it answered.
  returned: when O(state=present)
  type: dict
  sample: {10.244.1.2: true}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    VENV_ARGUMENT_SPEC,
    require_runtime,
)


def main():
    module = AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            "name": {"type": "str", "default": "pyflannel-probe"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "conflist": {"type": "path", "default": "/etc/cni/net.d/10-flannel.conflist"},
            "bin_dir": {"type": "path", "default": "/opt/cni/bin"},
            "ping": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=False,
    )
    require_runtime(module)
    from pyflannel_runtime.ops.probe import ProbeError, add_pod, ping_from, remove_pod

    params = module.params
    try:
        if params["state"] == "absent":
            removed = remove_pod(params["name"], params["conflist"], params["bin_dir"])
            module.exit_json(changed=removed)
        pod = add_pod(params["name"], params["conflist"], params["bin_dir"])
        reachable = ping_from(pod.name, params["ping"])
    except ProbeError as err:
        module.fail_json(msg=str(err))
    module.exit_json(changed=pod.created, ip=pod.ip, reachable=reachable)


if __name__ == "__main__":
    main()
