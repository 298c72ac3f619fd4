#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.connectivity."""

from __future__ import annotations

DOCUMENTATION = r"""
module: connectivity
short_description: The connectivity suite on a node, through probe pods wired by the real CNI plugin
version_added: 0.2.0
description:
  - With O(state=present), wires two probe pods through the first plugin of the node's conflist (the
    flannel plugin), as a container runtime would, starts the suite's responder in them and on the host
    (a process of its own until O(state=absent)), and returns where the other nodes reach them, with what
    a failure's cause needs (the pod MTU, the firewall, the VXLAN device's tx checksum offload).
  - With O(state=tested), runs every scenario from this node to the nodes in O(setups) (the
    O(state=present) results of all nodes) - pod to pod on the node and across nodes (ICMP, a TCP stream
    with its byte count and digest checked, UDP with the payload checksummed end to end), pod to a remote
    host and host to a remote pod, pod to O(outside), the MTU (a DF packet of the pod MTU passes, one byte
    more is answered with a frag needed), and a burst of UDP datagrams with the receiver's checksum-error
    counters read around it. Returns one row per scenario and path. With O(tx_checksum_offload=auto) and the
    UDP checksum scenario failing with checksum errors, turns the device's tx checksum offload off, records
    why for the agent, and runs that scenario again (C(changed)).
  - With O(state=absent), stops the responder, runs CNI DEL for the probe pods, removes their namespaces,
    and fails when anything of them is left (a namespace, the process, a host-local allocation, a flannel
    state file).
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
attributes:
  check_mode:
    support: none
    details: The probe pods are real pods; skip the suite in check mode.
  diff_mode:
    support: none
options:
  name:
    description: Name of the first probe pod's network namespace and CNI container ID; the second one's
      has C(-2) appended.
    type: str
    default: pyflannel-probe
  state:
    description: Set the suite up, run it, or remove it.
    type: str
    choices: [present, tested, absent]
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
    description: The node's address, where the other nodes' pods reach its host (O(state=present)).
    type: str
  nftables:
    description: Whether the agent runs its firewall rules in nftables mode (C(EnableNFTables)).
    type: bool
    default: false
  vxlan_device:
    description: The node's VXLAN device, whose tx checksum offload is reported and, in C(auto) mode,
      switched; empty for the other backends.
    type: str
    default: ""
  tx_checksum_offload:
    description: The agent's C(--vxlan-tx-checksum-offload).
    type: str
    choices: ['on', 'off', auto]
    default: 'on'
  node:
    description: This node's name among O(setups) (O(state=tested)).
    type: str
  setups:
    description: Every node's O(state=present) result, by node name (O(state=tested)).
    type: dict
    default: {}
  pod_network:
    description: The cluster's pod network (C(Network)); a masqueraded packet comes from outside it.
    type: str
    default: 10.244.0.0/16
  groups:
    description: The groups of scenarios to run (O(state=tested)), in this order; the default runs them all.
    type: list
    elements: str
    choices: [pods, hosts, outside, mtu, checksums]
    default: [pods, hosts, outside, mtu, checksums]
  outside:
    description: An address outside the pod network to reach from the pods, C(ADDRESS) or C(ADDRESS:PORT)
      with a UDP echo at that port (the suite's responder with C(--outside)), which shows the source address
      it sees; empty skips the scenario.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Set the suite up
  pyflannel.network.connectivity:
    host_address: 198.51.100.11
    vxlan_device: flannel.1
  register: suite

- name: Run it from every node
  pyflannel.network.connectivity:
    state: tested
    node: "{{ inventory_hostname }}"
    setups: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, ['suite']))) }}"

- name: Remove it
  pyflannel.network.connectivity:
    state: absent
"""

RETURN = r"""
pods:
  description: The probe pods (O(state=present)), with the responder's ports in each.
  returned: when O(state=present)
  type: list
  elements: dict
  sample: [{name: pyflannel-probe, ip: 10.244.1.2, tcp_port: 40123, udp_port: 51000, burst_port: 51001}]
pod_mtu:
  description: The probe pod's interface MTU.
  returned: when O(state=present)
  type: int
host:
  description: The node's address and the port of the host's UDP echo.
  returned: when O(state=present)
  type: dict
firewall:
  description: A FORWARD policy that drops (chains), and whether flannel's forward and masquerade rules are
    in place.
  returned: when O(state=present)
  type: dict
offload:
  description: The VXLAN device's tx checksum offload (C(device), C(enabled), C(mode)); empty without one.
  returned: when O(state=present)
  type: dict
rows:
  description: One verdict per scenario and path (C(scenario), C(source), C(target), C(verdict) of C(ok),
    C(FAIL) or C(skipped), C(detail), C(data)).
  returned: when O(state=tested)
  type: list
  elements: dict
times:
  description: Seconds each group of scenarios took on this node.
  returned: when O(state=tested)
  type: dict
  sample: {pods: 0.31, hosts: 0.12, outside: 0.02, mtu: 0.05, checksums: 0.21}
csum_errors:
  description: UDP checksum errors this node's probe pods (C(pod)) and host (C(host)) counted during the run.
  returned: when O(state=tested)
  type: dict
offload_change:
  description: What C(auto) did to the VXLAN device, empty when nothing.
  returned: when O(state=tested)
  type: str
failures:
  description: How many rows failed.
  returned: when O(state=tested)
  type: int
failed_paths:
  description: The failed rows as C(<scenario> to <target>).
  returned: when O(state=tested)
  type: list
  elements: str
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

# pyflannel_runtime.connectivity.scenarios.GROUPS, in their order (checked by the unit tests).
GROUPS = ["pods", "hosts", "outside", "mtu", "checksums"]


def main():
    module = AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            "name": {"type": "str", "default": "pyflannel-probe"},
            "state": {
                "type": "str",
                "choices": ["present", "tested", "absent"],
                "default": "present",
            },
            "conflist": {"type": "path", "default": "/etc/cni/net.d/10-flannel.conflist"},
            "bin_dir": {"type": "path", "default": "/opt/cni/bin"},
            "host_address": {"type": "str"},
            "nftables": {"type": "bool", "default": False},
            "vxlan_device": {"type": "str", "default": ""},
            "tx_checksum_offload": {
                "type": "str",
                "choices": ["on", "off", "auto"],
                "default": "on",
            },
            "node": {"type": "str"},
            "setups": {"type": "dict", "default": {}},
            "pod_network": {"type": "str", "default": "10.244.0.0/16"},
            "outside": {"type": "str", "default": ""},
            "groups": {
                "type": "list",
                "elements": "str",
                "choices": GROUPS,
                "default": GROUPS,
            },
        },
        required_if=[("state", "present", ["host_address"]), ("state", "tested", ["node"])],
        supports_check_mode=False,
    )
    require_runtime(module)
    from ipaddress import IPv4Network

    from pyflannel_runtime.ops import connectivity
    from pyflannel_runtime.ops.probe import ProbeError

    params = module.params
    name, conflist, bin_dir = params["name"], params["conflist"], params["bin_dir"]
    if params["state"] == "absent":
        result = connectivity.teardown(name, conflist, bin_dir)
        if result["left_behind"] or result["problems"]:
            left = "; ".join(result["problems"] + result["left_behind"])
            module.fail_json(msg=f"the probe pods left something behind: {left}", **result)
        module.exit_json(changed=bool(result["removed"]), **result)
    if params["state"] == "present":
        try:
            setup = connectivity.setup(
                name,
                conflist,
                bin_dir,
                params["host_address"],
                nftables_mode=params["nftables"],
                vxlan_device=params["vxlan_device"],
                offload_mode=params["tx_checksum_offload"],
            )
        except ProbeError as err:
            module.fail_json(msg=str(err))
        module.exit_json(changed=True, **setup)
    setups = params["setups"]
    if params["node"] not in setups:
        module.fail_json(msg=f"setups has no entry for this node, {params['node']}")
    try:
        pod_network = IPv4Network(params["pod_network"])
        result = connectivity.run(
            params["node"],
            setups,
            pod_network,
            params["outside"],
            vxlan_device=params["vxlan_device"],
            offload_mode=params["tx_checksum_offload"],
            groups=params["groups"],
        )
    except (ValueError, KeyError) as err:
        module.fail_json(msg=f"cannot run the suite: {err}")
    module.exit_json(changed=bool(result.offload_change), **result.as_dict())


if __name__ == "__main__":
    main()
