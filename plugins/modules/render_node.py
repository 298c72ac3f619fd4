#!/usr/bin/python
"""Documentation only: the action plugin of this name (plugins/action/render_node.py) runs on the
controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: render_node
short_description: Render a flannel node's files on the controller
version_added: 0.1.0
description:
  - Checks the inventory as one cluster (as pyflannel.network.preflight does) and renders this host's
    files from the cluster model with pyflannel's jinja2 templates, byte for byte as flannel's own
    tooling writes them (the CNI conflist, net-conf.json, the agent's environment file and systemd
    unit, a pinned subnet's subnet.env, a copied kubeconfig).
  - Returns their contents and modes for pyflannel.network.files, which writes them on the node;
    the node needs neither jinja2 nor pydantic.
  - An action plugin; it runs on the controller and contacts no host.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.cluster
attributes:
  check_mode:
    support: full
    details: Renders in either mode and writes nothing.
  diff_mode:
    support: none
options:
  files:
    description: Which of the node's files to render.
    type: list
    elements: str
    choices: [conflist, net_conf, agent_env, systemd_unit, subnet_env, kubeconfig]
    default: [conflist, net_conf, agent_env, systemd_unit, subnet_env, kubeconfig]
  kubeconfig_src:
    description:
      - A controller file (found as M(ansible.builtin.copy) finds its C(src); vault-encrypted is fine) that
        becomes C(flannel_kubeconfig_file) on the node, with O(files) holding C(kubeconfig).
      - Not with O(hosts) (it is one host's file).
    type: str
  hosts:
    description:
      - Also render the files of each of these inventory hosts, as a run on that host would, and
        return them in RV(hosts).
      - With C(run_once) and the play's hosts (C(ansible_play_hosts)), one task checks the cluster
        once for every node, where a task per host checks it once per host (each check reads
        every node's variables and facts, so the per-host tasks cost the controller the square of
        the number of hosts).
    type: list
    elements: str
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: Render the agent's files
  pyflannel.network.render_node:
    files: [agent_env, systemd_unit]
  register: __flannel_rendered

- name: Write them on the node
  pyflannel.network.files:
    files: "{{ __flannel_rendered.files }}"

- name: Render every node's conflist in one check of the cluster
  pyflannel.network.render_node:
    files: [conflist]
    hosts: "{{ ansible_play_hosts }}"
  run_once: true
  register: __flannel_every_conflist

- name: Write each node's
  pyflannel.network.files:
    files: "{{ __flannel_every_conflist.hosts[inventory_hostname] }}"
"""

RETURN = r"""
files:
  description: The files, each with its absolute C(path), C(content), C(mode) and whether it is
    C(sensitive); the O(pyflannel.network.files#module:files) option of that module.
  returned: success
  type: list
  elements: dict
  sample: [{path: /etc/cni/net.d/10-flannel.conflist, content: "{...}", mode: "0644", sensitive: false}]
net_conf:
  description: The net-conf.json text, also for the etcd datastore (where it goes into C(<prefix>/config)).
  returned: success
  type: str
hosts:
  description: Each host of O(hosts) with its files, as RV(files) gives this host's.
  returned: with O(hosts)
  type: dict
  sample: {node1: [{path: /etc/cni/net.d/10-flannel.conflist, content: "{...}", mode: "0644", sensitive: false}]}
"""
