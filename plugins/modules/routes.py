#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.verify and ops.repair."""

from __future__ import annotations

DOCUMENTATION = r"""
module: routes
short_description: Verify a node's flannel datapath against the lease store and repair drift
version_added: 0.1.0
description:
  - Asks the node's agent how it is (its C(/healthz), C(/readyz) and pyflanneld's C(/statusz)), as
    C(pyflannel status) does.
  - Lists the leases (etcd or the Kubernetes API, as the agent does), finds this node's own lease,
    and compares what the node's agent programs for each peer (routes, neighbours, FDB entries, by the
    backend's own rules) with what the kernel holds; also the flannel devices' MTU and subnet.env.
    With the udp backend, which forwards in user space, each peer is checked against the routes the
    agent's forwarder publishes on C(/statusz), and flannel0, its route and the forwarding workers
    against the kernel.
  - In check mode every missing or stale entry is reported as drift and nothing changes.
  - Otherwise only the difference is written, through the agent's batched netlink writer; C(changed)
    is true only when the kernel was written to. A route that is not flannel's is never replaced.
  - Problems of this node it cannot repair (an MTU or subnet.env that disagrees with the lease) are
    returned in RV(problems) and fail the module when O(fail_on_problems) is set. An agent that is down
    or not ready is a warning and ends RV(summary); the datapath is still checked and repaired without
    it.
  - Leases the agent never programs (outside the network, holding no subnet, or unreadable) are the
    lease store's problem, not this node's, and would show on every node alike; they are returned in
    RV(rejected), counted in RV(leases) and RV(summary), and warned about, without failing.
  - On a node the roles provisioned it needs no options; every setting of the agent's it is not
    given comes from the agent's environment file, as C(pyflannel status) takes them.
  - Runs with the agent's virtualenv's Python (see O(venv)).
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
  - pyflannel.network.attributes.datastore
  - pyflannel.network.attributes.kubernetes
options:
  public_ip:
    description:
      - The node's public IP, which names its own lease (default the agent's setting, else the
        lease subnet.env names).
    type: str
  subnet_file:
    description:
      - The agent's subnet.env, checked against the lease and returned in RV(subnet_env) (default
        the agent's setting, else C(/run/flannel/subnet.env)).
    type: path
  healthz_ip:
    description:
      - The agent's C(--healthz-ip); an unspecified address is asked on loopback (default the
        agent's setting, else C(0.0.0.0)).
    type: str
  healthz_port:
    description:
      - The agent's C(--healthz-port) (default the agent's setting, else flanneld's C(0)); with C(0)
        (no health server) the agent's process is looked for instead (its pid file beside
        O(subnet_file), else a C(flanneld) or C(pyflanneld) process).
    type: int
  fail_on_problems:
    description: Fail when the report has problems the module cannot repair.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Report drift on a node the roles provisioned (the agent's own settings)
  pyflannel.network.routes:
  check_mode: true

- name: Check and repair a node's routes, the etcd connection given
  pyflannel.network.routes:
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: /etc/pyflannel/pki/etcd-ca.crt
    etcd_certfile: /etc/pyflannel/pki/etcd-client.crt
    etcd_keyfile: /etc/pyflannel/pki/etcd-client.key
    public_ip: 198.51.100.12
"""

RETURN = r"""
summary:
  description: One line for people, as C(pyflannel status) ends.
  returned: always
  type: str
  sample: 3 leases, 2 peers programmed, 0 missing, 0 stale; agent ready
agent:
  description: The agent's state (C(ready), C(not ready), C(down), C(not checked)), why, and what it
    publishes about itself.
  returned: always
  type: dict
  sample: {state: ready, reason: null, endpoint: "http://127.0.0.1:8081", name: pyflanneld, version: 0.1.0,
           pid: 412, uptime_seconds: 73, backend: vxlan}
leases:
  description: How many leases, and how many peers are programmed, missing entries, skipped, rejected
    or not checked (udp peers when the agent does not publish its forwarder's routes).
  returned: always
  type: dict
  sample: {total: 3, programmed: 2, missing: 0, skipped: 0, rejected: 0, unchecked: 0}
lease_list:
  description: Every lease in the store (this node's too), with the fields C(pyflannel.network.leases_info)
    returns for it (the public IPs its node is known by, the node's name on the Kubernetes datastore, backend,
    VTEP MACs, expiry), the seconds until it expires (null for an etcd reservation), and whether this node
    programs it (C(programmed)), lacks some of its entries (C(missing)), or C(own), C(skipped), C(rejected) or
    C(unchecked).
  returned: always
  type: list
  elements: dict
  sample: [{subnet: 10.244.3.0/24, ipv6_subnet: null, public_ip: 198.51.100.13, public_ipv6: null, node: null,
            backend: vxlan, vtep_mac: "0a:58:0a:f4:03:00", vtep_mac_v6: null, expires: "2026-11-27T14:32:17Z",
            expires_in: 86170, state: programmed}]
  version_added: 0.2.0
missing:
  description: Entries the agent programs that the kernel lacks (C(ip)/C(bridge) syntax).
  returned: always
  type: list
  elements: str
stale:
  description: flannel-owned kernel entries no lease explains.
  returned: always
  type: list
  elements: str
writes:
  description: Kernel writes made (0 in check mode).
  returned: always
  type: int
mtus:
  description: The flannel devices' MTU against the one subnet.env announces.
  returned: always
  type: list
  elements: dict
subnet_env:
  description: The variables of subnet.env as the node has it (empty when absent).
  returned: always
  type: dict
notes:
  description: What was not checked, and why.
  returned: always
  type: list
  elements: str
  sample: ["subnet.env is not checked (no subnet file given)"]
problems:
  description: What is wrong on this node and is not repaired here.
  returned: always
  type: list
  elements: str
rejected:
  description: The leases the agent never programs, each with why (the node's name or the lease's subnets
    first).
  returned: always
  type: list
  elements: str
  sample: ["0.0.0.0-0: 0.0.0.0-0 holds no subnet (no IPv4 part, no IPv6 part)"]
  version_added: 0.2.0
clean:
  description: The datapath was checked and nothing is missing, stale, rejected or wrong (MTU, subnet.env),
    with the agent ready or without a health server to ask.
  returned: always
  type: bool
  version_added: 0.2.0
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.datapath import (
    DatapathError,
    check_datapath,
)
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    KUBERNETES_ARGUMENT_SPEC,
    VENV_ARGUMENT_SPEC,
    agent_settings,
    require_runtime,
)

# The agent's settings the module takes, each also an option of its own name.
AGENT_OPTIONS = (
    *ETCD_ARGUMENT_SPEC,
    "datastore",
    "kubeconfig_file",
    "net_config_path",
    "public_ip",
    "subnet_file",
    "healthz_ip",
    "healthz_port",
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **VENV_ARGUMENT_SPEC,
            **ETCD_ARGUMENT_SPEC,
            **KUBERNETES_ARGUMENT_SPEC,
            "public_ip": {"type": "str"},
            "subnet_file": {"type": "path"},
            "healthz_ip": {"type": "str"},
            "healthz_port": {"type": "int"},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )


def main():
    module = build_module()
    require_runtime(module)
    opts = agent_settings(module, AGENT_OPTIONS)
    try:
        result, warnings = check_datapath(opts, repair=not module.check_mode, diff=module._diff)
    except DatapathError as err:
        module.fail_json(msg=str(err), **err.result)
    for warning in warnings:
        module.warn(warning)
    if result["problems"] and module.params["fail_on_problems"]:
        module.fail_json(msg="; ".join(result["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
