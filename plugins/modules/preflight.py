#!/usr/bin/python
"""Documentation only: the action plugin of this name (plugins/action/preflight.py) runs on the
controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight
short_description: Check the inventory as one flannel cluster, on the controller, before any host changes
version_added: 0.1.0
description:
  - Reads every flannel node's C(flannel_*) settings (as the pyflannel.network.preflight role collects
    them into C(_flannel_settings)) and, with O(facts), the node facts pyflannel.network.node_facts
    gathered (links, routes, backend support, Python, runtime), and checks them together through the
    typed cluster model, flanneld's interface selection and the backends' rules.
  - An invalid inventory fails with every problem, one per line, each naming the host and the
    variable; nothing on the hosts has changed by then.
  - A limited run (C(--limit)) still checks every node of the group; the nodes outside the play
    with the settings the preflight role would have collected there and the node facts it gathered
    from them read-only.
  - Returns the cluster's settings and this host's plan as facts for the later roles.
  - An action plugin; it runs on the controller with the controller's pyflannel_runtime (C(pip install
    'pyflannel[controller]') in Ansible's environment) and contacts no host.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.cluster
attributes:
  check_mode:
    support: full
    details: Changes nothing in either mode.
  diff_mode:
    support: none
options:
  facts:
    description: Check the node facts too (interfaces, backends, Python); without them only the settings are checked.
    type: bool
    default: true
  allow_unreachable:
    description:
      - Check a host of the play that could not be reached without its facts, instead of stopping
        with its name and what to do (power it on, C(--limit) it out, or remove it with
        C(remove-node.yml), which sets this).
      - A limited run always checks the nodes outside it that cannot be reached without their facts.
    type: bool
    default: false
    version_added: 0.2.0
  hosts:
    description:
      - Plan these hosts (with C(run_once), the play's hosts) from one check of the cluster, and
        return their plans as C(_flannel_play_nodes) instead of this host's as C(_flannel_node).
        A check on each host reads every node's variables on each, a cost that grows with the
        square of the hosts.
    type: list
    elements: str
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: Check the inventory as one cluster
  pyflannel.network.preflight:
    group: flannel_nodes

- name: Check it once for the whole play
  pyflannel.network.preflight:
    hosts: "{{ ansible_play_hosts }}"
  run_once: true

- name: Take each host's plan
  ansible.builtin.set_fact:
    _flannel_node: "{{ ansible_facts._flannel_play_nodes[inventory_hostname] }}"
"""

RETURN = r"""
ansible_facts:
  description: The checked cluster.
  returned: success
  type: dict
  contains:
    _flannel_cluster:
      description: The cluster's settings, every C(flannel_*) variable after checking and defaults (secrets left out).
      type: dict
    _flannel_node:
      description:
        - This host's plan (its subnet, MTU, interface, public IPs, an etcd reservation for a pinned
          subnet); null for a host that is no flannel node (an etcd member only). Without O(hosts).
      type: dict
    _flannel_play_nodes:
      description: Each host of O(hosts) and its plan, as C(_flannel_node) has it. With O(hosts).
      type: dict
      version_added: 0.2.0
    _flannel_nodes:
      description:
        - Every flannel node of the cluster, in the play or not, and what its lease is known by
          (C(subnet), C(ipv6_subnet), C(public_ip), C(public_ipv6), and C(address), its
          C(ansible_host) when that is an IP address).
      type: dict
nodes:
  description: The flannel nodes, in inventory order.
  returned: success
  type: list
  elements: str
problems:
  description: Every problem of an invalid inventory, one per line.
  returned: failure
  type: list
  elements: str
"""
