#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.disruption."""

from __future__ import annotations

DOCUMENTATION = r"""
module: disruption_probe
short_description: Long-lived TCP connections held open through an operation, and what the operation did to them
version_added: 0.2.0
description:
  - A probe of what an operation (agents restarting, a roll, a reboot) does to connections already open. Each
    connection sends a small numbered message every 100 ms and checks every echo; a check reports for each
    connection whether it was reset, the longest gap between two echoes and the messages lost.
  - With O(state=present), wires two probe pods through the node's CNI conflist (as the connectivity suite
    does, under the probe's own O(name)) and starts the suite's responder in them, for as long as the probe
    may live (O(lifetime)). Returns where the other nodes reach them.
  - With O(state=opened), starts the probe's process on the node (recorded by its PID in
    C(/run/NAME.disruption.pid)), which opens the node's connections and holds them after the task ends -
    from its probe pod to every other node's probe pod (pod to pod across nodes) and to its own second pod
    (pod to pod on the same node), to O(outside) (pod to outside, masqueraded), and from the host to every
    other node's probe pod (host to remote pod) - given O(setups), every node's O(state=present) result.
  - With O(state=checked), reports each connection's window since the opening or the last check, and
    starts the next window.
  - With O(state=absent), ends the process, removes the probe pods (the other nodes' connections to them
    go with them, so check every node before closing any), and fails when anything of them is left.
  - A probe that is never closed (its play failed before the check) ends when O(lifetime) runs out, and
    removes its pods on the way out.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
attributes:
  check_mode:
    support: none
    details: The probe pods are real pods; skip the probe in check mode.
  diff_mode:
    support: none
options:
  name:
    description: Name of the first probe pod's network namespace and CNI container ID (the second one's has
      C(-2) appended), and of the probe's PID file and control socket.
    type: str
    default: pyflannel-disrupt
  state:
    description: Set the probe up, open its connections, check them, or close it.
    type: str
    choices: [present, opened, checked, absent]
    default: present
  conflist:
    description: The node's conflist.
    type: path
    default: /etc/cni/net.d/10-flannel.conflist
  bin_dir:
    description: The CNI bin directory holding the flannel plugin and its delegates.
    type: path
    default: /opt/cni/bin
  host_address:
    description: The node's address, where the responder also answers the connectivity suite's UDP echo
      (O(state=present)); the probe itself does not need it.
    type: str
    default: ""
  node:
    description: This node's name among O(setups) (O(state=opened)).
    type: str
  setups:
    description: Every node's O(state=present) result, by node name (O(state=opened)).
    type: dict
    default: {}
  outside:
    description: The connectivity suite's responder outside the cluster, C(ADDRESS:PORT) (the verify role's
      C(flannel_verify_outside)); without a port, or empty, no connection goes outside.
    type: str
    default: ""
  lifetime:
    description: Seconds the probe lives at most; it ends by itself and removes its pods when nobody closed it
      by then.
    type: float
    default: 3600
  settle:
    description: Seconds a check gives the echoes of what was sent before it to come back (O(state=checked)).
    type: float
    default: 3
"""

EXAMPLES = r"""
- name: Set the probe up on every node
  pyflannel.network.disruption_probe:
  register: probe

- name: Open the connections
  pyflannel.network.disruption_probe:
    state: opened
    node: "{{ inventory_hostname }}"
    setups: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['probe']))) }}"

- name: What the operation did to them
  pyflannel.network.disruption_probe:
    state: checked
  register: disrupted

- name: Close the probe, once every node was checked
  pyflannel.network.disruption_probe:
    state: absent
"""

RETURN = r"""
pods:
  description: The probe pods (O(state=present)), with the responder's ports in each.
  returned: when O(state=present)
  type: list
  elements: dict
  sample: [{name: pyflannel-disrupt, ip: 10.244.1.2, tcp_port: 40123, udp_port: 51000, burst_port: 51001}]
rows:
  description:
    - One row per connection - C(path) (C(pod-pod), C(pod-pod-local), C(pod-outside), C(host-pod)),
      C(source), C(target) (a node, or C(outside)), C(address), C(port) - and its window - C(sent),
      C(echoed), C(lost) (never echoed, the connection broke first), C(pending) (not echoed yet on a
      connection still open), C(resets), C(reconnects), C(longest_gap) (seconds between two echoes),
      C(seconds) (the window's length), C(up), C(reasons) (why it broke).
    - With O(state=opened), each connection as it opened.
  returned: when O(state) is C(opened) or C(checked)
  type: list
  elements: dict
running:
  description: Whether the probe's process still ran when it was closed (O(state=absent)).
  returned: when O(state=absent)
  type: bool
left_behind:
  description: What is left of the probe pods after O(state=absent) (empty, or the module fails).
  returned: when O(state=absent)
  type: list
  elements: str
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
            "name": {"type": "str", "default": "pyflannel-disrupt"},
            "state": {
                "type": "str",
                "choices": ["present", "opened", "checked", "absent"],
                "default": "present",
            },
            "conflist": {"type": "path", "default": "/etc/cni/net.d/10-flannel.conflist"},
            "bin_dir": {"type": "path", "default": "/opt/cni/bin"},
            "host_address": {"type": "str", "default": ""},
            "node": {"type": "str"},
            "setups": {"type": "dict", "default": {}},
            "outside": {"type": "str", "default": ""},
            "lifetime": {"type": "float", "default": 3600},
            "settle": {"type": "float", "default": 3},
        },
        required_if=[("state", "opened", ["node"])],
        supports_check_mode=False,
    )
    require_runtime(module)
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops import disruption

    params = module.params
    name, conflist, bin_dir = params["name"], params["conflist"], params["bin_dir"]
    state = params["state"]
    try:
        if state == "present":
            setup = disruption.setup(
                name, conflist, bin_dir, params["host_address"], lifetime=params["lifetime"]
            )
            module.exit_json(changed=True, **setup)
        if state == "opened":
            rows = disruption.open_probe(
                name,
                params["node"],
                params["setups"],
                params["outside"],
                conflist=conflist,
                bin_dir=bin_dir,
                lifetime=params["lifetime"],
            )
            module.exit_json(changed=True, rows=rows)
        if state == "checked":
            module.exit_json(changed=False, rows=disruption.check(name, params["settle"]))
        result = disruption.close(name, conflist, bin_dir)
    except PyflannelError as err:
        module.fail_json(msg=str(err))
    if result["left_behind"] or result["problems"]:
        left = "; ".join(result["problems"] + result["left_behind"])
        module.fail_json(msg=f"the probe pods left something behind: {left}", **result)
    module.exit_json(changed=bool(result["removed"] or result["running"]), **result)


if __name__ == "__main__":
    main()
