"""One node's check as ``pyflannel status`` and the routes module report it: the local agent's
health, then the verify report, with a userspace forwarder's peers (udp) checked against the
routes the agent publishes on /statusz.

``ask_agent`` and ``check_node`` read (the agent, the leases, the kernel), inside the host's
network namespace when one is named; the texts below them are pure and shared by the CLI's
table and the module's result, so both say the same thing in the same words.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from pyflannel_runtime.backend.vxlan import offload_verdict
from pyflannel_runtime.backend_spec import tx_offload
from pyflannel_runtime.backend_spec.options import VxlanOptions
from pyflannel_runtime.ops.agent import AgentEndpoint, AgentHealth, AgentState, probe_agent
from pyflannel_runtime.ops.leases import lease_fields
from pyflannel_runtime.ops.verify import (
    Datapath,
    Host,
    LeaseStatus,
    LeaseStore,
    VerifyReport,
    read_subnet_env_text,
    require_netns,
    verify,
)
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.subnet_env import parse_dotenv

# The agent answers its health server at once; the lease store bounds its own requests.
DEFAULT_TIMEOUT = 10.0


def ask_agent(
    endpoint: AgentEndpoint | None,
    netns: str | None,
    timeout: float = DEFAULT_TIMEOUT,
    subnet_file: str | None = None,
) -> AgentHealth:
    """The agent's health, asked from inside the host's network namespace (None: this one);
    with no health server (`endpoint` None), its process is looked for there, by the pid file
    beside `subnet_file`. Raises VerifyError when the namespace does not exist."""
    from pyflannel_runtime.netlink.netns import run_in_netns

    require_netns(netns)
    return run_in_netns(netns, lambda: probe_agent(endpoint, timeout, subnet_file))


def check_node(store: LeaseStore, host: Host, agent: AgentHealth) -> VerifyReport:
    """Verify the host; a userspace forwarder's peers (udp) are checked against the routes that
    `agent` (its agent's health as `ask_agent` found it) publishes. Raises VerifyError when
    something could not be read."""
    forwarder = agent.facts.forwarder
    if forwarder is not None:
        host = replace(host, forwarder=forwarder.routes)
    return verify(store, host)


def summary(report: VerifyReport, agent: AgentHealth | None = None) -> str:
    """One line that counts only what was checked: without the kernel read it says the
    datapath was not checked rather than "0 missing"; `agent` None: not asked at all (said
    when nothing was read but the leases)."""
    leases, programmed = len(report.leases), report.count(Datapath.PROGRAMMED)
    parts = [f"{leases} lease{'s' * (leases != 1)}"]
    if report.actual is None:
        parts.append("agent and datapath not checked" if agent is None else "datapath not checked")
    else:
        missing = report.count(Datapath.MISSING)
        if programmed or missing or not report.count(Datapath.UNCHECKED):
            parts += [
                f"{programmed} peer{'s' * (programmed != 1)} programmed",
                f"{missing} missing",
            ]
        else:
            parts.append("peers not checked")
        parts.append(f"{len(report.stale)} stale")
    skipped = report.count(Datapath.SKIPPED)
    parts += [f"{skipped} skipped"] if skipped else []
    parts += [f"{report.rejected} rejected"] if report.rejected else []
    text = ", ".join(parts)
    if agent is None:
        return text
    return f"{text}; agent {'health ' * (agent.state is AgentState.UNCHECKED)}{agent.state.value}"


def subnets_text(lease: Lease) -> str:
    """The lease's subnets; its key when it holds none (a key such as "0.0.0.0-0")."""
    return ", ".join(str(s) for s in (lease.subnet, lease.ipv6_subnet) if s is not None) or (
        lease.key()
    )


def lease_label(status: LeaseStatus) -> str:
    """The node's name (Kubernetes), else the lease's subnets."""
    return status.row.node or subnets_text(status.row.lease)


def lease_rows(report: VerifyReport, now: float) -> list[dict[str, Any]]:
    """Every lease in the store, as scripts read one (`ops.leases.lease_fields`: its subnets,
    the public IPs its node is known by, the node's name on Kubernetes, backend, VTEP MACs,
    expiry), with the seconds until it expires (None: a reservation, or unknown) and where this
    node stands with it (own, programmed, missing, skipped, rejected, unchecked): how the verify
    role names a node outside the run, and how the agent role's roll sees that peers hold a
    restarted node."""
    rows = []
    for status in report.leases:
        expiration = status.row.lease.expiration
        expires_in = None
        if expiration is not None and math.isfinite(expiration):
            expires_in = max(0, round(expiration - now))
        rows.append(
            {**lease_fields(status.row), "expires_in": expires_in, "state": status.datapath.value}
        )
    return rows


def mtu_problems(report: VerifyReport) -> list[str]:
    return [
        f"{m.device} has MTU {m.actual}, expected {m.expected}" for m in report.mtus if not m.ok
    ]


def problems(report: VerifyReport) -> list[str]:
    """What is wrong on this host and no kernel write repairs: the network config, MTUs,
    subnet.env. Rejected leases are the store's, not the host's: see `rejected`."""
    return [*report.problems, *mtu_problems(report), *report.subnet_env]


def rejected(report: VerifyReport) -> list[str]:
    """Leases the agent never programs, and why: outside the network, or unreadable."""
    return [
        *(f"{lease_label(s)}: {s.note}" for s in report.leases if s.datapath is Datapath.REJECTED),
        *(f"{u.name}: {u.reason}" for u in report.unreadable),
    ]


def lease_counts(report: VerifyReport) -> dict[str, int]:
    """How many leases, and how many peers are programmed, missing entries, skipped, rejected
    or not checked."""
    return {
        "total": len(report.leases),
        "programmed": report.count(Datapath.PROGRAMMED),
        "missing": report.count(Datapath.MISSING),
        "skipped": report.count(Datapath.SKIPPED),
        "rejected": report.rejected,
        "unchecked": report.count(Datapath.UNCHECKED),
    }


def drift_diff(report: VerifyReport) -> dict[str, str] | None:
    """flannel's kernel entries before and after a repair, in Ansible's diff form; None when
    nothing differs."""
    missing = {report.describe(e) for e in report.missing}
    stale = {report.describe(e) for e in report.stale}
    if not (missing or stale):
        return None
    wanted = {report.describe(e) for status in report.leases for e in status.expected}
    return {
        "before_header": "kernel (flannel's entries)",
        "after_header": "what the leases need",
        "before": "".join(line + "\n" for line in sorted(stale | (wanted - missing))),
        "after": "".join(line + "\n" for line in sorted(wanted)),
    }


def read_subnet_env(path: str) -> dict[str, str]:
    """subnet.env's variables as flanneld's reader takes them; empty when it cannot be read
    (verify says why)."""
    try:
        return parse_dotenv(read_subnet_env_text(path))
    except OSError:
        return {}


@dataclass(frozen=True)
class DeviceOffload:
    """A vxlan device's tx checksum offload as the kernel has it, and the agent's setting."""

    device: str
    enabled: bool | None  # None: could not be read
    mode: str  # the agent's --vxlan-tx-checksum-offload
    verdict: str | None = None  # why auto turned it off (auto mode only)
    error: str = ""

    @property
    def as_wanted(self) -> bool:
        return self.enabled is None or self.enabled == tx_offload.wanted(self.mode, self.verdict)

    def describe(self) -> str:
        text = f"{self.device}: {tx_offload.describe(self.mode, self.enabled, self.verdict)}"
        if self.error:
            return f"{text}: {self.error}"
        if not self.as_wanted:
            text += "; the agent applies its setting when it next creates or finds the device"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device,
            "enabled": self.enabled,
            "mode": self.mode,
            "auto_verdict": self.verdict,
        }


def read_tx_offload(
    report: VerifyReport,
    netns: str | None,
    mode: str,
    verdict_file: str = tx_offload.AUTO_VERDICT_FILE,
) -> list[DeviceOffload]:
    """The tx checksum offload of each vxlan device the report checked (none for the other
    backends)."""
    from pyflannel_runtime.netlink.ethtool import tx_checksum_offload

    verdict = offload_verdict.read_auto_verdict(verdict_file) if mode == "auto" else None
    found = []
    for device in sorted({m.device for m in report.mtus}):
        if not re.fullmatch(VxlanOptions.DEVICES, device):
            continue
        try:
            found.append(DeviceOffload(device, tx_checksum_offload(device, netns), mode, verdict))
        except OSError as err:
            found.append(DeviceOffload(device, None, mode, verdict, str(err)))
    return found
