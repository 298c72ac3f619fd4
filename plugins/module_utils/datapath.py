"""A node's datapath checked against the lease store, and its drift repaired: the routes
module's work (pyflannel_runtime.ops.node_check, ops.repair). pyflannel.network.node_facts does
the same check, read-only, at the start of a run with the agent's own settings, so that a run
that changes nothing need not check again at its end.

Needs pyflannel_runtime (the agent's virtualenv's Python).
"""

from __future__ import annotations


class DatapathError(Exception):
    """The check could not be made, or the repair failed; ``result`` holds what is known."""

    def __init__(self, message: str, result: dict | None = None) -> None:
        super().__init__(message)
        self.result = result or {}


def check_datapath(opts, repair: bool, diff: bool) -> tuple[dict, list[str]]:
    """The routes module's result for this node as the agent's settings ``opts`` describe it,
    and its warnings (an agent that is not ready, rejected leases): drift written back when
    ``repair`` (``changed`` then says whether the kernel was written to; without it, whether
    there is drift), ``diff`` for Ansible's --diff, and ``clean``: nothing missing, stale,
    rejected or wrong, and the agent ready (or without a health server to ask). Raises
    DatapathError."""
    import time
    from ipaddress import ip_address

    from pyflannel_runtime.ops import node_check
    from pyflannel_runtime.ops.agent import agent_endpoint
    from pyflannel_runtime.ops.agent_settings import lease_store
    from pyflannel_runtime.ops.repair import RepairError, apply_repair, plan_repair
    from pyflannel_runtime.ops.verify import Host, VerifyError

    # Checked by the agent's own flag validation.
    public_ip = ip_address(opts.public_ip) if opts.public_ip else None
    endpoint = agent_endpoint(opts.healthz_ip, opts.healthz_port)
    host = Host(public_ip=public_ip, subnet_file=opts.subnet_file)
    try:
        agent = node_check.ask_agent(endpoint, None, subnet_file=opts.subnet_file)
        store = lease_store(opts, node_check.DEFAULT_TIMEOUT)
        report = node_check.check_node(store, host, agent)
    except (VerifyError, OSError) as err:
        raise DatapathError(f"cannot verify: {err}") from err
    missing = [report.describe(e) for e in report.missing]
    ops = plan_repair(report)
    writes = 0
    if ops and repair:
        try:
            writes = apply_repair(ops, host, report.names)
        except RepairError as err:
            raise DatapathError(
                f"repair failed after {err.writes} writes: {err}", {"missing": missing}
            ) from err
    result = {
        "changed": writes > 0 if repair else bool(ops),
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
        "subnet_env": node_check.read_subnet_env(opts.subnet_file),
        "problems": node_check.problems(report),
        "rejected": node_check.rejected(report),
        "clean": report.ok and agent.ok and report.actual is not None and not ops,
    }
    drift = node_check.drift_diff(report)
    if diff and drift is not None:
        result["diff"] = drift
    warnings = [] if agent.ok else [agent.describe()]
    if result["rejected"]:
        warnings.append(
            f"{len(result['rejected'])} lease(s) rejected, never programmed: "
            + "; ".join(result["rejected"])
        )
    return result, warnings
