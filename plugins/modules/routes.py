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
  - Runs with the agent's virtualenv interpreter.
extends_documentation_fragment:
  - pyflannel.network.attributes
  - pyflannel.network.attributes.venv
  - pyflannel.network.attributes.etcd
options:
  datastore:
    description: Where the leases are (C(kubernetes) is flanneld's C(--kube-subnet-mgr)).
    type: str
    choices: [etcd, kubernetes]
    default: etcd
  etcd_endpoints:
    description: etcd client URLs, with O(datastore=etcd).
    type: list
    elements: str
    required: false
  kubeconfig_file:
    description: With O(datastore=kubernetes), the kubeconfig (default in-cluster settings).
    type: path
  net_config_path:
    description: With O(datastore=kubernetes), the net-conf.json the agent reads.
    type: path
    default: /etc/kube-flannel/net-conf.json
  public_ip:
    description: The node's public IP, which names its own lease (default the lease subnet.env names).
    type: str
  subnet_file:
    description: The agent's subnet.env, checked against the lease and returned in RV(subnet_env).
    type: path
    default: /run/flannel/subnet.env
  healthz_ip:
    description: The agent's C(--healthz-ip); an unspecified address is asked on loopback.
    type: str
    default: 0.0.0.0
  healthz_port:
    description: The agent's C(--healthz-port); with C(0) (no health server) the agent's process is
      looked for instead (its pid file beside O(subnet_file), else a C(flanneld) or C(pyflanneld)
      process).
    type: int
    default: 8081
  fail_on_problems:
    description: Fail when the report has problems the module cannot repair.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check and repair this node's routes
  pyflannel.network.routes:
    etcd_endpoints: [https://198.51.100.11:2379]
    etcd_cafile: /etc/pyflannel/pki/etcd-ca.crt
    etcd_certfile: /etc/pyflannel/pki/etcd-client.crt
    etcd_keyfile: /etc/pyflannel/pki/etcd-client.key
    public_ip: 198.51.100.12
  vars:
    ansible_python_interpreter: /opt/pyflannel/venv/bin/python
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
  description: Every lease in the store (this node's too), with the public IPs its node is known by, the node's
    name (Kubernetes datastore), the seconds until it expires (null for an etcd reservation), and whether this
    node programs it (C(programmed)), lacks some of its entries (C(missing)), or C(own), C(skipped),
    C(rejected) or C(unchecked).
  returned: always
  type: list
  elements: dict
  sample: [{subnet: 10.244.3.0/24, ipv6_subnet: null, public_ip: 198.51.100.13, public_ipv6: null, node: null,
            expires_in: 86170, state: programmed}]
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
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    STORE_ARGUMENT_SPEC,
    STORE_REQUIRED_IF,
    etcd_settings,
    require_runtime,
)


def build_module():
    return AnsibleModule(
        argument_spec={
            **STORE_ARGUMENT_SPEC,
            "net_config_path": {"type": "path", "default": "/etc/kube-flannel/net-conf.json"},
            "public_ip": {"type": "str"},
            "subnet_file": {"type": "path", "default": "/run/flannel/subnet.env"},
            "healthz_ip": {"type": "str", "default": "0.0.0.0"},
            "healthz_port": {"type": "int", "default": 8081},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        required_if=STORE_REQUIRED_IF,
        supports_check_mode=True,
    )


def _store(params):
    if params["datastore"] == "etcd":
        return etcd_settings(params)
    from pyflannel_runtime.subnet.kube import KubeSettings

    return KubeSettings(
        kubeconfig_file=params["kubeconfig_file"] or "",
        net_config_path=params["net_config_path"],
    )


def main():
    module = build_module()
    require_runtime(module)
    import time
    from ipaddress import ip_address

    from pyflannel_runtime.ops import node_check
    from pyflannel_runtime.ops.agent import agent_endpoint
    from pyflannel_runtime.ops.repair import RepairError, apply_repair, plan_repair
    from pyflannel_runtime.ops.verify import Host, VerifyError

    params = module.params
    try:
        public_ip = ip_address(params["public_ip"]) if params["public_ip"] else None
    except ValueError as err:
        module.fail_json(msg=f"public_ip: {err}")
    try:
        endpoint = agent_endpoint(params["healthz_ip"], params["healthz_port"])
    except ValueError as err:
        module.fail_json(msg=f"healthz_ip, healthz_port: {err}")
    host = Host(public_ip=public_ip, subnet_file=params["subnet_file"])
    try:
        agent = node_check.ask_agent(endpoint, None, subnet_file=params["subnet_file"])
        report = node_check.check_node(_store(params), host, agent)
    except (VerifyError, OSError) as err:
        module.fail_json(msg=f"cannot verify: {err}")
    missing = [report.describe(e) for e in report.missing]
    ops = plan_repair(report)
    writes = 0
    if ops and not module.check_mode:
        try:
            writes = apply_repair(ops, host, report.names)
        except RepairError as err:
            module.fail_json(msg=f"repair failed after {err.writes} writes: {err}", missing=missing)
    result = {
        "changed": bool(ops) if module.check_mode else writes > 0,
        "summary": node_check.summary(report, agent),
        "agent": agent.as_dict(),
        "leases": node_check.lease_counts(report),
        "lease_list": node_check.lease_rows(report, time.time()),
        "notes": list(report.notes),
        "missing": missing,
        "stale": [report.describe(e) for e in report.stale],
        "writes": writes,
        "mtus": [
            {"device": m.device, "actual": m.actual, "expected": m.expected} for m in report.mtus
        ],
        "subnet_env": node_check.read_subnet_env(params["subnet_file"]),
        "problems": node_check.problems(report),
        "rejected": node_check.rejected(report),
    }
    if not agent.ok:
        module.warn(agent.describe())
    if result["rejected"]:
        module.warn(
            f"{len(result['rejected'])} lease(s) rejected, never programmed: "
            + "; ".join(result["rejected"])
        )
    diff = node_check.drift_diff(report)
    if module._diff and diff is not None:
        result["diff"] = diff
    if result["problems"] and params["fail_on_problems"]:
        module.fail_json(msg="; ".join(result["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
