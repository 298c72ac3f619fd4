#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.leases."""

from __future__ import annotations

DOCUMENTATION = r"""
module: leases_info
short_description: List flannel's leases, the host each belongs to, orphans and free subnets
version_added: 0.2.0
description:
  - Lists every lease of the network as the agents see it (etcd, or the node annotations in the
    Kubernetes API), with its subnets, public IPs, backend, VTEP MACs and expiry.
  - Matches each lease to the host of O(hosts) that holds its public IP (IPv4, else IPv6). A lease
    no host holds is an orphan, as a node that left without releasing its lease leaves behind
    (flannel keeps it until its TTL runs out).
  - Counts the network's subnets between C(SubnetMin) and C(SubnetMax) (flanneld's defaults where
    the config leaves them out), as the agents' allocator hands them out, with how many a lease takes,
    how many are free, and how many leases lie outside them.
  - Reads only. On a node the roles provisioned it needs no options; every setting of the
    agent's it is not given comes from the agent's environment file.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
  - pyflannel.network.attributes.datastore
  - pyflannel.network.attributes.kubernetes
attributes:
  check_mode:
    support: full
    details: Reads only, in check mode as in a normal run.
  diff_mode:
    support: none
options:
  hosts:
    description:
      - The hosts the leases may belong to, each with the addresses it is known by.
      - Left out, the collection's action plugin fills it in on the controller with every host of
        the inventory and the addresses it knows for it, from the preflight's facts (its public IPs
        and the addresses of its links) and from C(ansible_host) when that is an IP address.
    type: list
    elements: dict
    suboptions:
      name:
        description: The host's name.
        type: str
        required: true
      addresses:
        description: Its IP addresses.
        type: list
        elements: str
        required: true
  known:
    description:
      - The leases as C(pyflannel.network.node_facts) read them earlier in the same run, with the same
        settings (its C(checks.leases)). Given, the action plugin matches them to O(hosts) on the
        controller and does not run the module.
    type: dict
    version_added: 0.2.0
"""

EXAMPLES = r"""
- name: The leases, once for the cluster, with the agent's own settings
  pyflannel.network.leases_info:
  run_once: true
  register: __flannel_leases

- name: Name the orphans
  ansible.builtin.debug:
    msg: "{{ __flannel_leases.orphans | map(attribute='subnet') | list }}"
  run_once: true
"""

RETURN = r"""
store:
  description: The lease store, C(etcd) or C(kube).
  returned: always
  type: str
  sample: etcd
leases:
  description: Every lease, by subnet.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node's name (Kubernetes datastore; null with etcd).
      type: str
    subnet:
      description: The IPv4 subnet.
      type: str
      sample: 10.244.57.0/24
    ipv6_subnet:
      description: The IPv6 subnet, when the network has IPv6.
      type: str
    public_ip:
      description: The node's public IPv4 address (C(0.0.0.0) on an IPv6-only node).
      type: str
    public_ipv6:
      description: The node's public IPv6 address.
      type: str
    backend:
      description: The backend type the lease was made for.
      type: str
      sample: vxlan
    vtep_mac:
      description: The VXLAN tunnel endpoint's MAC address (null for other backends).
      type: str
    vtep_mac_v6:
      description: The IPv6 tunnel endpoint's MAC address.
      type: str
    expires:
      description: When the lease expires, in UTC (null for a reservation or with the Kubernetes datastore).
      type: str
      sample: "2026-11-27T10:15:00Z"
    reservation:
      description: Whether it is an etcd reservation (a pinned subnet without an etcd lease).
      type: bool
    host:
      description: The host of O(hosts) holding its public IP; null for an orphan.
      type: str
orphans:
  description: The leases whose public IP no host of O(hosts) holds, as in RV(leases).
  returned: always
  type: list
  elements: dict
utilisation:
  description: Per address family, the network's subnets and how many the leases take.
  returned: always
  type: list
  elements: dict
  contains:
    family:
      description: C(ipv4) or C(ipv6).
      type: str
    network:
      description: The network (C(Network) or C(IPv6Network)).
      type: str
    subnet_len:
      description: The subnets' prefix length.
      type: int
    subnet_min:
      description: The first subnet handed out.
      type: str
    subnet_max:
      description: The last subnet handed out.
      type: str
    total:
      description: How many subnets there are from C(subnet_min) to C(subnet_max).
      type: int
    used:
      description: How many of them a lease takes.
      type: int
    free:
      description: How many are left.
      type: int
    outside:
      description: Leases of the family that take none of them (the agents reject those).
      type: int
unreadable:
  description: What is in the store but could not be read as a lease, and why.
  returned: always
  type: list
  elements: dict
notes:
  description: What was not counted, and why.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    KUBERNETES_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    agent_settings,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **ETCD_ARGUMENT_SPEC,
            **KUBERNETES_ARGUMENT_SPEC,
            "known": {"type": "dict"},
            "hosts": {
                "type": "list",
                "elements": "dict",
                "options": {
                    "name": {"type": "str", "required": True},
                    "addresses": {"type": "list", "elements": "str", "required": True},
                },
            },
        },
        supports_check_mode=True,
    )


def _host(entry):
    from ipaddress import ip_address

    from pyflannel_runtime.ops.leases import InventoryHost

    return InventoryHost(entry["name"], frozenset(ip_address(a) for a in entry["addresses"]))


def main():
    module = build_module()
    require_runtime(module)
    from pyflannel_runtime.ops.agent_settings import lease_store
    from pyflannel_runtime.ops.leases import read_leases, report_dict
    from pyflannel_runtime.ops.node_check import DEFAULT_TIMEOUT
    from pyflannel_runtime.ops.verify import VerifyError

    try:
        hosts = [_host(entry) for entry in module.params["hosts"] or []]
    except ValueError as err:
        module.fail_json(msg=f"hosts: {err}")
    opts = agent_settings(module, [*ETCD_ARGUMENT_SPEC, *KUBERNETES_ARGUMENT_SPEC])
    try:
        report = read_leases(lease_store(opts, DEFAULT_TIMEOUT), hosts)
    except VerifyError as err:
        module.fail_json(msg=str(err))
    module.exit_json(changed=False, **report_dict(report))


if __name__ == "__main__":
    main()
