#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.reset (what reset.yml removes besides files)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_reset
short_description: Remove what the flannel agent and CNI plugin leave on a node besides files
version_added: 0.2.0
description:
  - Removes flannel's iptables chains C(FLANNEL-POSTRTG) (nat) and C(FLANNEL-FWD) (filter) with
    every jump into them, for IPv4 and IPv6, in one C(iptables-restore) transaction per family,
    and flannel's nft tables C(ip flannel-ipv4) and C(ip6 flannel-ipv6).
  - Removes the routes the agent's datapath owns in the main table, via a gateway to a subnet of
    O(networks), such as host-gw's routes to the other nodes on the external interface. The other
    backends' routes go with their devices.
  - Removes the flannel CNI plugin's saved per-container state (its C(dataDir)) and the
    host-local address store of the network of O(conflist), read from that conflist.
  - With O(release_lease), releases in etcd the lease C(subnet.env) names, so that peers drop
    the node's routes at once and its subnet is free; a reservation stays. Stop the agent first.
  - Nothing else is touched; no table is flushed. Call it before the conflist and C(subnet.env)
    go, and before the agent's environment file; with O(release_lease), every etcd setting of the
    agent's it is not given comes from that file, as C(pyflannel status) takes them.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
options:
  conflist:
    description: The node's CNI conflist with the flannel plugin; without it no CNI state is removed.
    type: path
    default: /etc/cni/net.d/10-flannel.conflist
  networks:
    description: The cluster's pod networks (net-conf C(Network), C(IPv6Network)).
    type: list
    elements: str
    default: []
  release_lease:
    description: Also release the node's lease in etcd (the etcd options, else the agent's settings).
    type: bool
    default: false
  subnet_file:
    description:
      - The agent's subnet.env, which names its lease (default the agent's setting, else
        C(/run/flannel/subnet.env)).
    type: path
"""

EXAMPLES = r"""
- name: Remove flannel's firewall rules and CNI state
  pyflannel.network.node_reset:
    conflist: /etc/cni/net.d/10-flannel.conflist

- name: The same, and release the node's lease with the agent's etcd settings (agent stopped)
  pyflannel.network.node_reset:
    networks: [10.244.0.0/16]
    release_lease: true
"""

RETURN = r"""
lease:
  description: The subnets of the lease that was (or would be) released; null when none was.
  returned: always
  type: str
  sample: 10.244.57.0/24
routes:
  description: flannel's routes that were (or would be) removed.
  returned: always
  type: list
  elements: str
  sample: ["route 10.244.7.0/24 via 192.0.2.12 dev eth0"]
firewall:
  description: flannel's iptables lines (as C(iptables -S) prints them) and nft tables that were (or would be) removed.
  returned: always
  type: list
  elements: str
  sample: ["iptables -t nat -N FLANNEL-POSTRTG", "nft table ip flannel-ipv4"]
directories:
  description: The CNI state directories that were (or would be) removed.
  returned: always
  type: list
  elements: str
  sample: [/var/lib/cni/flannel, /var/lib/cni/networks/cbr0]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    agent_settings,
    require_runtime,
)


def main():
    module = AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **ETCD_ARGUMENT_SPEC,
            "conflist": {"type": "path", "default": "/etc/cni/net.d/10-flannel.conflist"},
            "networks": {"type": "list", "elements": "str", "default": []},
            "release_lease": {"type": "bool", "default": False},
            "subnet_file": {"type": "path"},
        },
        supports_check_mode=True,
    )
    require_runtime(module)
    from ipaddress import ip_network

    from pyflannel_runtime.ops.agent_settings import etcd_settings
    from pyflannel_runtime.ops.reset import ResetError, release_lease, remove_leftovers

    params = module.params
    try:
        networks = [ip_network(network) for network in params["networks"]]
    except ValueError as err:
        module.fail_json(msg=f"networks: {err}")
    lease = None
    try:
        # The lease first: its subnet.env goes with the rest of the agent's files.
        if params["release_lease"]:
            opts = agent_settings(module, [*ETCD_ARGUMENT_SPEC, "subnet_file"])
            lease = release_lease(etcd_settings(opts), opts.subnet_file, check=module.check_mode)
        leftovers = remove_leftovers(params["conflist"], networks, check=module.check_mode)
    except ResetError as err:
        module.fail_json(msg=str(err))
    found = [*leftovers.firewall, *leftovers.routes, *leftovers.directories]
    if lease is not None:
        found.append(f"lease {lease}")
    result = {
        "changed": bool(found),
        "lease": lease,
        "firewall": list(leftovers.firewall),
        "routes": list(leftovers.routes),
        "directories": list(leftovers.directories),
    }
    if module._diff and found:
        header = "flannel's lease, firewall rules, routes and CNI state"
        result["diff"] = {
            "before_header": header,
            "after_header": header,
            "before": "".join(f"{line}\n" for line in found),
            "after": "",
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
