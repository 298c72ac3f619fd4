#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.etcd_auth."""

from __future__ import annotations

DOCUMENTATION = r"""
module: etcd_auth
short_description: Turn on etcd authentication with a user for flannel's agents
version_added: 0.1.0
description:
  - Makes etcd hold a role that may read and write flannel's prefix (O(etcd_prefix)) and nothing
    else, the agents' user O(agent_user) with that role, a user of that role for each of
    O(certificate_users) (etcd takes a client certificate's common name as its user), the
    operator's C(root) with O(root_password), and turns authentication on. Only what differs is
    written; a password is checked by authenticating with it.
  - Run it where the operator's root password is, the controller; the agents get only their own
    user. Through etcd's JSON gateway, as every pyflannel client: with authentication on, etcd
    refuses gateway clients whose certificate has a common name, so O(etcd_certfile) must have
    none.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
attributes:
  diff_mode:
    support: none
options:
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
"""

EXAMPLES = r"""
- name: etcd authentication for the agents
  pyflannel.network.etcd_auth:
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: inventories/mycluster-credentials/etcd-pki/ca.crt
    etcd_certfile: inventories/mycluster-credentials/etcd-pki/node1/client.crt
    etcd_keyfile: inventories/mycluster-credentials/etcd-pki/node1/client.key
    agent_user: pyflannel
    agent_password: "{{ lookup('ansible.builtin.password', 'credentials/etcd-agent') }}"
    root_password: "{{ lookup('ansible.builtin.password', 'credentials/etcd-root') }}"
  delegate_to: localhost
"""

RETURN = r"""
changes:
  description: What was (or, in check mode, would be) done, one line each.
  returned: always
  type: list
  elements: str
  sample: [add role pyflannel, add user pyflannel, grant role pyflannel to pyflannel, enable authentication]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    etcd_settings,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **ETCD_ARGUMENT_SPEC,
            "agent_user": {"type": "str", "required": True},
            "agent_password": {"type": "str", "required": True, "no_log": True},
            "root_password": {"type": "str", "required": True, "no_log": True},
            "certificate_users": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.ops.etcd_auth import AuthSetup, ensure_auth
    from pyflannel_runtime.ops.publish import PublishError
    from pyflannel_runtime.subnet.etcd import EtcdError
    from pyflannel_runtime.subnet.etcd_client import EtcdClientError

    params = module.params
    setup = AuthSetup(
        prefix=params["etcd_prefix"],
        agent_user=params["agent_user"],
        agent_password=params["agent_password"],
        root_password=params["root_password"],
        certificate_users=tuple(params["certificate_users"]),
    )
    try:
        changes = ensure_auth(etcd_settings(params), setup, check=module.check_mode)
    except (PublishError, EtcdError, EtcdClientError, OSError) as err:
        module.fail_json(msg=str(err) or type(err).__name__)
    module.exit_json(changed=bool(changes), changes=changes)


if __name__ == "__main__":
    main()
