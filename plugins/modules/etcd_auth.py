#!/usr/bin/python
"""Documentation only: the action plugin of this name (plugins/action/etcd_auth.py) runs on the
controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: etcd_auth
short_description: Turn on etcd authentication with a user for flannel's agents
version_added: 0.2.0
description:
  - Makes etcd hold a role that may read and write flannel's prefix (O(etcd_prefix)) and nothing
    else, the agents' user O(agent_user) with that role, a user of that role for each of
    O(certificate_users) (etcd takes a client certificate's common name as its user), the
    operator's C(root) with O(root_password), and turns authentication on. Only what differs is
    written; a password is checked by authenticating with it.
  - An action plugin; it runs on the controller, where the operator's root password is and stays,
    and contacts no host but etcd. The agents get only their own user.
  - Through etcd's JSON gateway, as every pyflannel client. With authentication on, etcd refuses
    gateway clients whose certificate has a common name, so O(etcd_certfile) must have none.
extends_documentation_fragment:
  - pyflannel.network.attributes
attributes:
  diff_mode:
    support: none
options:
  etcd_endpoints:
    description: etcd client URLs, tried in order.
    type: list
    elements: str
    required: true
  etcd_prefix:
    description: The key prefix flannel's data lives under (flanneld's C(--etcd-prefix)).
    type: str
    default: /coreos.com/network
  etcd_cafile:
    description: CA bundle that signed the etcd server certificates, on the controller.
    type: path
  etcd_certfile:
    description: Client certificate for etcd (with no common name), on the controller, with O(etcd_keyfile).
    type: path
  etcd_keyfile:
    description: Private key of the client certificate, on the controller.
    type: path
  agent_user:
    description: The agents' etcd user (flanneld's C(--etcd-username)).
    type: str
    required: true
  agent_password:
    description: Its password (flanneld's C(--etcd-password)).
    type: str
    required: true
  root_password:
    description: The password of etcd's C(root) user, the operator's.
    type: str
    required: true
  certificate_users:
    description:
      - Common names of client certificates that may use flannel's prefix on their own (without a
        user), such as those of flanneld nodes talking gRPC.
    type: list
    elements: str
    default: []
requirements:
  - pyflannel_runtime on the controller (C(pip install 'pyflannel[controller]') in Ansible's environment)
"""

EXAMPLES = r"""
- name: Etcd authentication for the agents
  pyflannel.network.etcd_auth:
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: inventories/mycluster-credentials/etcd-pki/ca.crt
    etcd_certfile: inventories/mycluster-credentials/etcd-pki/node1/client.crt
    etcd_keyfile: inventories/mycluster-credentials/etcd-pki/node1/client.key
    agent_user: pyflannel
    agent_password: "{{ lookup('ansible.builtin.password', 'credentials/etcd-agent') }}"
    root_password: "{{ lookup('ansible.builtin.password', 'credentials/etcd-root') }}"
  run_once: true
"""

RETURN = r"""
changes:
  description: What was (or, in check mode, would be) done, one line each.
  returned: always
  type: list
  elements: str
  sample: [add role pyflannel, add user pyflannel, grant role pyflannel to pyflannel, enable authentication]
"""
