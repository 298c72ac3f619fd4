#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.publish."""

from __future__ import annotations

DOCUMENTATION = r"""
module: network_config
short_description: Publish flannel's network config in etcd and pin subnet reservations
version_added: 0.1.0
description:
  - Makes C(<prefix>/config) in etcd hold exactly O(config), the net-conf flanneld reads with the
    etcd datastore. The config is checked as flanneld decodes it before anything is written; the
    key is written only when its value differs.
  - Optionally pins subnets (flannel's reservations, keys without an etcd lease) for nodes whose
    subnet is fixed in the inventory. A subnet an agent already holds under a lease becomes a
    reservation with the agent's own value; one leased by another node is an error.
  - On a node the roles provisioned it needs no etcd options; every etcd setting of the agent's
    it is not given comes from the agent's environment file, as C(pyflannel config publish)
    takes them.
  - Runs with the agent's virtualenv's Python (it uses the agent's own etcd client; see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
options:
  config:
    description:
      - The net-conf JSON text, as C(pyflannel.network.render_node) renders it.
      - Left out, only O(reservations) are pinned.
    type: str
  reservations:
    description: Subnets to pin, one per node.
    type: list
    elements: dict
    default: []
    suboptions:
      subnet:
        description: The node's IPv4 subnet (C(null) with an IPv6-only network).
        type: str
      ipv6_subnet:
        description: The node's IPv6 subnet, when the network has IPv6.
        type: str
      public_ip:
        description: The node's public IPv4 address, which the agent finds its lease by.
        type: str
      public_ipv6:
        description: The node's public IPv6 address.
        type: str
  known_config:
    description:
      - What C(<prefix>/config) held when C(pyflannel.network.node_facts) read it earlier in the same
        run, with the same etcd settings (its C(checks.network_config)). When it is O(config) and
        there are no O(reservations), the action plugin reports no change without running the
        module (the config is compared, and nothing would be written). Needs O(etcd_prefix).
    type: str
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: Publish the network config
  pyflannel.network.network_config:
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: /etc/pyflannel/pki/ca.crt
    etcd_certfile: /etc/pyflannel/pki/client.crt
    etcd_keyfile: /etc/pyflannel/pki/client.key
    config: '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'

- name: Pin node n1 to 10.244.7.0/24, on a node with the agent's etcd settings
  pyflannel.network.network_config:
    reservations:
      - {subnet: 10.244.7.0/24, public_ip: 192.0.2.21}
"""

RETURN = r"""
keys:
  description: Every key the module manages, with its value before and after.
  returned: always
  type: list
  elements: dict
  contains:
    key:
      description: The etcd key.
      type: str
      sample: /coreos.com/network/config
    before:
      description: The value before (null when the key was absent).
      type: str
    after:
      description: The value now (or, in check mode, the one it would get).
      type: str
    changed:
      description: Whether the key was (or would be) written.
      type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    etcd_settings,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **ETCD_ARGUMENT_SPEC,
            "config": {"type": "str"},
            "known_config": {"type": "str"},
            "reservations": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "subnet": {"type": "str"},
                    "ipv6_subnet": {"type": "str"},
                    "public_ip": {"type": "str"},
                    "public_ipv6": {"type": "str"},
                },
            },
        },
        supports_check_mode=True,
    )


def _reservation(entry):
    from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

    from pyflannel_runtime.ops.publish import Reservation

    def parse(kind, value):
        return None if value in (None, "") else kind(value)

    return Reservation(
        subnet=parse(IPv4Network, entry["subnet"]),
        ipv6_subnet=parse(IPv6Network, entry["ipv6_subnet"]),
        public_ip=parse(IPv4Address, entry["public_ip"]),
        public_ipv6=parse(IPv6Address, entry["public_ipv6"]),
    )


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime import PyflannelError
    from pyflannel_runtime.ops.publish import publish

    try:
        reservations = [_reservation(entry) for entry in module.params["reservations"]]
    except ValueError as err:
        module.fail_json(msg=f"reservations: {err}")
    try:
        changes = publish(
            etcd_settings(module.params),
            module.params["config"],
            reservations,
            check=module.check_mode,
        )
    except (PyflannelError, OSError) as err:
        module.fail_json(msg=str(err) or type(err).__name__)
    keys = [
        {"key": c.key, "before": c.before, "after": c.after, "changed": c.changed} for c in changes
    ]
    result = {"changed": any(c.changed for c in changes), "keys": keys}
    if module._diff:
        result["diff"] = [
            {
                "before_header": c.key,
                "after_header": c.key,
                "before": "" if c.before is None else c.before,
                "after": c.after,
            }
            for c in changes
            if c.changed
        ]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
