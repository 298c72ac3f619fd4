#!/usr/bin/python
"""Thin adapter over pyflannel_runtime.ops.verify and ops.repair."""

from __future__ import annotations

DOCUMENTATION = r"""
module: routes
short_description: Verify a node's flannel datapath against the lease store and repair drift
version_added: 0.1.0
description:
  - Lists the leases (etcd or the Kubernetes API, as the agent does), finds this node's own lease,
    and compares what the node's agent programs for each peer (routes, neighbours, FDB entries, by the
    backend's own rules) with what the kernel holds; also the flannel devices' MTU and subnet.env.
  - In check mode every missing or stale entry is reported as drift and nothing changes.
  - Otherwise only the difference is written, through the agent's batched netlink writer; C(changed)
    is true only when the kernel was written to. A route that is not flannel's is never replaced.
  - Problems it cannot repair (an MTU or subnet.env that disagrees with the lease, leases outside the
    network) are returned in RV(problems) and fail the module when O(fail_on_problems) is set.
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
  description: One line for people.
  returned: always
  type: str
  sample: 3 leases, 2 peers programmed, 0 missing, 0 stale
leases:
  description: How many leases, and how many peers are programmed, missing entries, skipped, rejected
    or not checked (a backend with no per-peer kernel entries, such as udp).
  returned: always
  type: dict
  sample: {total: 3, programmed: 2, missing: 0, skipped: 0, rejected: 0, unchecked: 0}
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
  sample: ["the udp backend's datapath is not checked"]
problems:
  description: What is wrong and is not repaired here.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pyflannel.network.plugins.module_utils.runtime import (
    ETCD_ARGUMENT_SPEC,
    etcd_settings,
    require_runtime,
)


def build_module():
    etcd = dict(ETCD_ARGUMENT_SPEC, etcd_endpoints={"type": "list", "elements": "str"})
    return AnsibleModule(
        argument_spec={
            **etcd,
            "datastore": {"type": "str", "choices": ["etcd", "kubernetes"], "default": "etcd"},
            "kubeconfig_file": {"type": "path"},
            "net_config_path": {"type": "path", "default": "/etc/kube-flannel/net-conf.json"},
            "public_ip": {"type": "str"},
            "subnet_file": {"type": "path", "default": "/run/flannel/subnet.env"},
            "fail_on_problems": {"type": "bool", "default": True},
        },
        required_if=[("datastore", "etcd", ["etcd_endpoints"])],
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


def _subnet_env(path):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(64 * 1024)
    except OSError:
        return {}
    pairs = (line.partition("=") for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, _, value in pairs}


def _problems(report):
    problems = list(report.problems) + list(report.subnet_env)
    problems += [
        f"{m.device}: MTU {m.actual}, subnet.env says {m.expected}" for m in report.mtus if not m.ok
    ]
    problems += [
        f"{s.row.lease.subnet}: {s.note}"
        for s in report.leases
        if s.note and s.datapath.value == "rejected"
    ]
    problems += [f"unreadable lease {u}" for u in report.unreadable]
    return problems


def summarize(counts, missing, stale):
    """One line for people; peers that were not checked are not counted as programmed."""
    peers = f"{counts['programmed']} peers programmed"
    if counts["unchecked"]:
        peers += f", {counts['unchecked']} not checked"
    return f"{counts['total']} leases, {peers}, {missing} missing, {stale} stale"


def main():
    module = build_module()
    require_runtime(module)
    from ipaddress import ip_address

    from pyflannel_runtime.ops.repair import RepairError, apply_repair, plan_repair
    from pyflannel_runtime.ops.verify import Datapath, Host, VerifyError, verify

    params = module.params
    try:
        public_ip = ip_address(params["public_ip"]) if params["public_ip"] else None
    except ValueError as err:
        module.fail_json(msg=f"public_ip: {err}")
    host = Host(public_ip=public_ip, subnet_file=params["subnet_file"])
    try:
        report = verify(_store(params), host)
    except (VerifyError, OSError) as err:
        module.fail_json(msg=f"cannot verify: {err}")
    missing = [report.describe(e) for e in report.missing]
    stale = [report.describe(e) for e in report.stale]
    ops = plan_repair(report)
    writes = 0
    if ops and not module.check_mode:
        try:
            writes = apply_repair(ops, host, report.names)
        except RepairError as err:
            module.fail_json(msg=f"repair failed after {err.writes} writes: {err}", missing=missing)
    counts = {
        "total": len(report.leases),
        "programmed": report.count(Datapath.PROGRAMMED),
        "missing": report.count(Datapath.MISSING),
        "skipped": report.count(Datapath.SKIPPED),
        "rejected": report.rejected,
        "unchecked": report.count(Datapath.UNCHECKED),
    }
    result = {
        "changed": bool(ops) if module.check_mode else writes > 0,
        "summary": summarize(counts, len(missing), len(stale)),
        "leases": counts,
        "notes": list(report.notes),
        "missing": missing,
        "stale": stale,
        "writes": writes,
        "mtus": [
            {"device": m.device, "actual": m.actual, "expected": m.expected} for m in report.mtus
        ],
        "subnet_env": _subnet_env(params["subnet_file"]),
        "problems": _problems(report),
    }
    if module._diff and (missing or stale):
        present = sorted(
            set(stale)
            | {report.describe(e) for s in report.leases for e in s.expected} - set(missing)
        )
        wanted = sorted({report.describe(e) for s in report.leases for e in s.expected})
        result["diff"] = {
            "before_header": "kernel (flannel's entries)",
            "after_header": "what the leases need",
            "before": "".join(line + "\n" for line in present),
            "after": "".join(line + "\n" for line in wanted),
        }
    if result["problems"] and params["fail_on_problems"]:
        module.fail_json(msg="; ".join(result["problems"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
