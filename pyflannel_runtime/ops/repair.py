"""Repair a host's datapath from a verify report: the kernel writes that make it hold exactly
what its agent would program, and applying them through the agent's batched netlink writer.

``plan_repair`` is pure and is all that check mode runs; ``apply_repair`` sends the plan and
returns how many writes it made. The plan is the agent's own reconcile (`netlink.diff.diff_ops`)
over the entries the report expected and the owned entries it found, so a route that is not
flannel's is never replaced: it is created, and left alone (reported) when something else
holds its destination.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping, Sequence

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.netlink.batch import BatchSender, OpFailure
from pyflannel_runtime.netlink.diff import desired_state, diff_ops
from pyflannel_runtime.netlink.entries import Action, Op
from pyflannel_runtime.netlink.netns import NETNS_RUN_DIR
from pyflannel_runtime.ops.verify import Host, VerifyReport, describe


class RepairError(PyflannelError):
    """Some writes failed: ``writes`` were made, ``failures`` say which were not and why."""

    def __init__(self, writes: int, failures: Sequence[str]) -> None:
        self.writes = writes
        self.failures = tuple(failures)
        super().__init__("; ".join(failures))


def plan_repair(report: VerifyReport) -> list[Op]:
    """The writes that turn the owned kernel state the report found into the expected one:
    none when the datapath was not read, or is in sync."""
    if report.actual is None:
        return []
    desired = desired_state(entry for status in report.leases for entry in status.expected)
    return diff_ops(desired, report.actual)


def apply_repair(ops: Sequence[Op], host: Host, names: Mapping[int, str] | None = None) -> int:
    """Send the ops to the host's kernel in order; returns the writes made. RepairError when
    the kernel refused some (`names`, ifindex -> device, only make its messages readable)."""
    if not ops:
        return 0
    if host.netns is not None and not os.path.exists(os.path.join(NETNS_RUN_DIR, host.netns)):
        raise RepairError(0, [f"network namespace {host.netns} does not exist"])
    sender = BatchSender.open(host.netns)
    try:
        failures = sender.send(ops)
    finally:
        sender.close()
    if failures:
        texts = [_failure_text(failure, names or {}) for failure in failures]
        raise RepairError(len(ops) - len(failures), texts)
    return len(ops)


def _failure_text(failure: OpFailure, names: Mapping[int, str]) -> str:
    op = failure.op
    entry = describe(op.entry, names)
    if op.action is Action.CREATE and failure.errno == errno.EEXIST:
        return f"{entry}: the kernel has another route there that is not flannel's; left alone"
    detail = f" ({failure.message})" if failure.message else ""
    return f"{op.action.value} {entry}: {os.strerror(failure.errno)}{detail}"
