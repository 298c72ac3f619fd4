"""``pyflannel status``: the local agent's health, the cluster's leases, and whether this
host's datapath holds what its agent would program for each peer.

The command line and the renderings only: ``ops.agent`` asks the agent's health server (or,
with none, looks for its process), ``ops.verify`` reads the leases and the kernel and compares
them, exactly as the agent's reconcile would see them. Read-only: nothing is written to etcd, the API server or the kernel.
A summary counts only what was checked, and says what was not.

Exit status: 0 when the agent is ready (or cannot be checked), every peer is programmed and
nothing is stale; 1 when the agent is down or not ready, or something is missing, stale,
rejected or wrong; 2 when the leases or the kernel could not be read. With ``--wait`` the
check is made again until it says 0 or the time is up, and the last one decides.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.agent.cli_flags import (
    ETCD_FLAGS,
    AgentFlagsError,
    add_agent_flags,
    agent_environment,
    agent_options,
)
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.agent.lease_note import LeaseNote, note_file_for, read_note
from pyflannel_runtime.ipam.node import (
    DEFAULT_CONFLIST,
    PodAddresses,
    pod_addresses,
    usage_dict,
    usage_text,
)
from pyflannel_runtime.ops.agent import AgentHealth, agent_endpoint, duration
from pyflannel_runtime.ops.agent_settings import lease_store
from pyflannel_runtime.ops.leases import iso_time, lease_fields, vtep_macs
from pyflannel_runtime.ops.node_check import (
    DeviceOffload,
    ask_agent,
    check_node,
    lease_label,
    problems,
    read_tx_offload,
    rejected,
    subnets_text,
    summary,
)
from pyflannel_runtime.ops.verify import (
    Datapath,
    Host,
    LeaseStatus,
    LeaseStoreError,
    OwnLeaseUnknown,
    VerifyError,
    VerifyReport,
    describe,
    verify,
)
from pyflannel_runtime.wire.lease import Lease

HELP = "show the agent's health, the leases, and whether this host's datapath holds every peer"
DESCRIPTION = (
    "Ask the local agent's health server (/healthz, /readyz, and pyflanneld's /statusz for "
    "its version and uptime; with --healthz-port=0, its pid file beside the subnet file, else "
    "a flanneld or pyflanneld process in this network namespace), list the cluster's leases (etcd, or the Kubernetes API with "
    "--kube-subnet-mgr), and check that this host's datapath holds what its agent programs "
    "for each peer: routes, neighbours and FDB entries (vxlan, host-gw), or flannel0, its "
    "route, its forwarding workers and the forwarder's routes (udp). The flags shared with "
    "pyflanneld resolve as the agent's do: the command line, else FLANNELD_* variables, else "
    "the agent's environment file. Exit status: 0 agent ready and all programmed, 1 agent "
    "down or not ready, or something missing or stale, 2 could not read the leases or the "
    "kernel. With --wait SECONDS the check is made again every 2 seconds until the node is "
    "healthy or the time is up; the last check is shown and decides the exit status."
)

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_ERROR = 2


# --- rendering (pure) -------------------------------------------------------------------------


def public_ips_text(lease: Lease) -> str:
    attrs = lease.attrs
    shown = [str(attrs.public_ip)] if lease.subnet is not None or not attrs.public_ipv6 else []
    if attrs.public_ipv6 is not None:
        shown.append(str(attrs.public_ipv6))
    return ", ".join(shown)


def remaining(expiration: float | None, now: float, store: str) -> str:
    if expiration is None:
        return "never" if store == "etcd" else "-"
    left = int(expiration - now)
    return duration(left) if left > 0 else "expired"


def _datapath_cell(status: LeaseStatus) -> str:
    if status.datapath is Datapath.MISSING:
        if not status.expected:  # a userspace forwarder's route
            return "missing"
        return f"missing {len(status.missing)}/{len(status.expected)}"
    if status.datapath is Datapath.UNCHECKED:
        return "-"
    state: str = status.datapath.value
    return state


def _box(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [rule, line(header), rule, *(line(r) for r in rows), rule]


def render_table(
    report: VerifyReport,
    now: float,
    agent: AgentHealth | None = None,
    pods: PodAddresses | None = None,
    offload: Sequence[DeviceOffload] = (),
    lease_note: LeaseNote | None = None,
) -> str:
    """The agent's health (when asked), the leases, what is wrong, this host's pod addresses
    (when read), the vxlan devices' tx checksum offload, the agent's note on this host's lease
    (when it left one), and the summary last."""
    kube = report.store == "kube"
    # Only node annotations name a node: an etcd lease holds a public IP and backend data, and
    # naming its host would take a reverse DNS lookup per lease (seconds each while DNS is
    # down, thousands of leases), so etcd tables show the public IP alone.
    header = ["NODE"] if kube else []
    header += ["SUBNET", "PUBLIC IP", "BACKEND", "VTEP MAC", "EXPIRES", "OWN", "DATAPATH"]
    rows = []
    for status in report.leases:
        lease = status.row.lease
        v4_mac, v6_mac = vtep_macs(lease)
        cells = [status.row.node] if kube else []
        cells += [
            subnets_text(lease),
            public_ips_text(lease),
            lease.attrs.backend_type or "-",
            ", ".join(m for m in (v4_mac, v6_mac) if m) or "-",
            remaining(lease.expiration, now, report.store),
            "yes" if status.datapath is Datapath.OWN else "",
            _datapath_cell(status),
        ]
        rows.append(cells)
    lines = ([agent.describe(), ""] if agent is not None else []) + _box(header, rows)
    sections: list[tuple[str, list[str]]] = [
        *_note_section(lease_note),
        (
            "Missing on this host:",
            [
                *(
                    f"{lease_label(s)}: {describe(entry, report.names)}"
                    for s in report.leases
                    for entry in s.missing
                ),
                *(
                    f"{lease_label(s)}: {s.note}"
                    for s in report.leases
                    if s.datapath is Datapath.MISSING and s.note
                ),
            ],
        ),
        ("Stale on this host (no lease explains them):", [
            describe(entry, report.names) for entry in report.stale
        ]),
        ("Skipped:", [
            f"{lease_label(s)}: {s.note}" for s in report.leases if s.datapath is Datapath.SKIPPED
        ]),
        ("Rejected (never programmed):", rejected(report)),
        ("Problems:", problems(report)),
        ("Checked on this host:", [*checked(report), *(o.describe() for o in offload)]),
        ("udp forwarder counters (since the agent started):", forwarder_counters(agent)),
        ("Pod addresses on this host:", [usage_text(u) for u in pods.usage] if pods else []),
        ("Notes:", [*report.notes, *_pods_unchecked(pods)]),
    ]  # fmt: skip
    for title, items in sections:
        if items:
            lines += ["", title, *(f"  {item}" for item in items)]
    lines += ["", summary(report, agent)]
    return "\n".join(lines) + "\n"


def _note_section(note: LeaseNote | None) -> list[tuple[str, list[str]]]:
    if note is None:
        return []
    return [
        (f"This host's lease (the agent's note, since {iso_time(note.since)}):", [note.message])
    ]


# The udp forwarder's counters (backend/udp/worker.py Counter), as an operator reads them.
_COUNTER_TEXT = {
    "foreign_source": "datagrams from addresses that are no peer's, dropped by the forwarder",
    "no_route": "packets for no peer's subnet, answered net unreachable",
    "ttl_exceeded": "packets whose TTL ran out, dropped",
    "send_errors": "packets the forwarder failed to send",
    "malformed": "datagrams that are no IPv4 packet, dropped",
    "socket_drops": "datagrams the kernel dropped at the sockets (no peer's, or buffer full)",
}


def forwarder_counters(agent: AgentHealth | None) -> list[str]:
    """What the udp forwarder dropped or could not send, as the agent counts it."""
    forwarder = None if agent is None else agent.facts.forwarder
    if forwarder is None:
        return []
    return [
        f"{_COUNTER_TEXT.get(name, name)}: {count}" for name, count in forwarder.counters.items()
    ]


def _pods_unchecked(pods: PodAddresses | None) -> list[str]:
    if pods is None or pods.unchecked is None:
        return []
    return [f"pod addresses not checked: {pods.unchecked}"]


def checked(report: VerifyReport) -> list[str]:
    """What was found right besides the peers' entries: devices, routes, workers, MTUs."""
    mtus = [f"{m.device} has MTU {m.actual}" for m in report.mtus if m.ok]
    return [*report.checked, *mtus]


def report_dict(
    report: VerifyReport,
    agent: AgentHealth | None = None,
    pods: PodAddresses | None = None,
    offload: Sequence[DeviceOffload] = (),
    lease_note: LeaseNote | None = None,
) -> dict[str, Any]:
    """The report for scripts: the agent, every lease, every mismatch, this host's pod
    addresses (None: not asked), the vxlan devices' tx checksum offload, the agent's note on
    this host's lease, and the counts."""

    leases = []
    for status in report.leases:
        leases.append(
            {
                **lease_fields(status.row),
                "own": status.datapath is Datapath.OWN,
                "datapath": status.datapath.value,
                "missing": [describe(e, report.names) for e in status.missing]
                + ([status.note] if status.datapath is Datapath.MISSING and status.note else []),
                "note": status.note or None,
            }
        )
    forwarder = None if agent is None else agent.facts.forwarder
    return {
        "agent": agent.as_dict() if agent is not None else None,
        "lease_note": None
        if lease_note is None
        else {
            "message": lease_note.message,
            "since": iso_time(lease_note.since),
            "problem": lease_note.problem,
        },
        "udp_counters": None if forwarder is None else dict(forwarder.counters),
        "store": report.store,
        "leases": leases,
        "unreadable": [{"name": u.name, "reason": u.reason} for u in report.unreadable],
        "stale": [describe(e, report.names) for e in report.stale],
        "mtu": [
            {"device": m.device, "actual": m.actual, "expected": m.expected} for m in report.mtus
        ],
        "subnet_env": list(report.subnet_env),
        "problems": list(report.problems),
        "checked": checked(report),
        "tx_checksum_offload": [o.as_dict() for o in offload],
        "notes": list(report.notes),
        "pod_addresses": None
        if pods is None
        else {
            "checked": pods.unchecked is None,
            "reason": pods.unchecked,
            "usage": [usage_dict(u) for u in pods.usage],
        },
        "summary": {
            "datapath_checked": report.actual is not None,
            "leases": len(report.leases),
            "programmed": report.count(Datapath.PROGRAMMED),
            "missing": report.count(Datapath.MISSING),
            "stale": len(report.stale),
            "skipped": report.count(Datapath.SKIPPED),
            "rejected": report.rejected,
        },
        "ok": healthy(report, agent, lease_note),
    }


def render_json(
    report: VerifyReport,
    agent: AgentHealth | None = None,
    pods: PodAddresses | None = None,
    offload: Sequence[DeviceOffload] = (),
    lease_note: LeaseNote | None = None,
) -> str:
    return json.dumps(report_dict(report, agent, pods, offload, lease_note), indent=2) + "\n"


def healthy(
    report: VerifyReport, agent: AgentHealth | None, lease_note: LeaseNote | None = None
) -> bool:
    """Nothing wrong: the datapath as the leases want it, the agent ready (or not asked), and
    no problem with this host's lease."""
    note_ok = lease_note is None or not lease_note.problem
    return report.ok and (agent is None or agent.ok) and note_ok


# --- the command ------------------------------------------------------------------------------

# pyflanneld's flags that say where the leases, the health server and this host's lease are.
AGENT_FLAGS = (
    *ETCD_FLAGS,
    "kube-subnet-mgr",
    "kube-api-url",
    "kubeconfig-file",
    "kube-annotation-prefix",
    "net-config-path",
    "subnet-file",
    "public-ip",
    "healthz-ip",
    "healthz-port",
    "vxlan-tx-checksum-offload",
)
_HINT = (
    "hint: status uses the agent's settings, from its flags (e.g. --etcd-endpoints, or "
    "--kube-subnet-mgr --kubeconfig-file), FLANNELD_* variables or its environment file "
    "(--agent-env); see pyflannel status --help"
)


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """What says where this node's agent, leases and pod addresses are: the agent's flags,
    --conflist and --timeout (``pyflannel bundle`` takes them too)."""
    add_agent_flags(parser, AGENT_FLAGS)
    parser.add_argument(
        "--conflist",
        metavar="FILE",
        default=DEFAULT_CONFLIST,
        help="the CNI conflist whose host-local store holds this host's pod addresses, counted "
        f"without asking the container runtimes (`pyflannel ipam` does; default {DEFAULT_CONFLIST})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="for etcd, the API server and the agent (default 10)",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument(
        "--netns",
        metavar="NAME",
        help="check this network namespace: the agent, the lease store and the kernel are all "
        "reached from inside it (default: this one)",
    )
    parser.add_argument(
        "--leases-only",
        action="store_true",
        help="list the leases; check neither the agent nor the datapath",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="output format (default table)",
    )
    parser.add_argument(
        "--wait",
        type=_seconds,
        metavar="SECONDS",
        help="check again every 2 seconds until the node is healthy (exit status 0) or SECONDS "
        "have passed; what changes is said on stderr, and the last check is shown",
    )


@dataclass(frozen=True)
class Status:
    report: VerifyReport
    agent: AgentHealth | None  # None: not asked (--leases-only)
    pods: PodAddresses | None = None  # None: not asked (--leases-only)
    offload: tuple[DeviceOffload, ...] = ()  # the vxlan devices' (none with --leases-only)
    lease_note: LeaseNote | None = None  # why this host has no lease, or lost or changed it


def target_host(args: argparse.Namespace, opts: Options, environ: Mapping[str, str]) -> Host:
    """The host to check. Its own lease: by --public-ip, else by subnet.env, which is then
    checked too (with --public-ip only when a subnet file is named explicitly)."""
    public_ip = None
    if opts.public_ip:
        public_ip = ip_address(opts.public_ip)  # checked by the agent's flag validation
    named = args.subnet_file is not None or "FLANNELD_SUBNET_FILE" in environ
    subnet_file = opts.subnet_file if public_ip is None or named else None
    return Host(netns=args.netns, public_ip=public_ip, subnet_file=subnet_file)


class StatusFailed(PyflannelError):
    """The settings are unusable, or the leases or the kernel could not be read; `agent` is
    the agent's health when it was asked before."""

    def __init__(self, message: str, agent: AgentHealth | None = None) -> None:
        super().__init__(message)
        self.agent = agent


def collect(args: argparse.Namespace, environ: Mapping[str, str]) -> Status:
    try:
        env = agent_environment(args, environ)
        opts = agent_options(args, AGENT_FLAGS, env)
        endpoint = agent_endpoint(opts.healthz_ip, opts.healthz_port)
        agent = (
            None
            if args.leases_only
            else ask_agent(endpoint, args.netns, args.timeout, opts.subnet_file)
        )
    except (AgentFlagsError, VerifyError) as err:
        raise StatusFailed(str(err)) from None
    host, store = target_host(args, opts, env), lease_store(opts, args.timeout)
    note = None if args.leases_only else read_note(note_file_for(opts.subnet_file))
    try:
        if agent is None:
            report = verify(store, host, leases_only=True)
        else:
            try:
                report = check_node(store, host, agent)
            except OwnLeaseUnknown:
                if note is None:
                    raise
                # No subnet.env, and the agent left word why: the leases, and its note.
                report = verify(store, host, leases_only=True)
    except OwnLeaseUnknown as err:
        raise StatusFailed(
            f"{err}; pass --public-ip, --subnet-file or --leases-only", agent
        ) from None
    except LeaseStoreError as err:
        raise StatusFailed(f"{err}\n{_HINT}", agent) from None
    except VerifyError as err:
        raise StatusFailed(str(err), agent) from None
    if args.leases_only:
        return Status(report, agent)
    offload = read_tx_offload(report, args.netns, opts.vxlan_tx_checksum_offload)
    return Status(report, agent, pod_addresses(args.conflist), tuple(offload), note)


# --- waiting (--wait) -------------------------------------------------------------------------

WAIT_INTERVAL = 2.0


@dataclass(frozen=True)
class Attempt:
    """One check: the status, or why it could not be read."""

    status: Status | None = None
    error: StatusFailed | None = None

    @property
    def healthy(self) -> bool:
        st = self.status
        return st is not None and healthy(st.report, st.agent, st.lease_note)

    def verdict(self) -> str:
        """The check in one line, as the table's summary ends it."""
        if self.status is None:
            return str(self.error).split("\n", 1)[0]
        return summary(self.status.report, self.status.agent)


def wait_for_health(
    check: Callable[[float], Attempt],
    seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say: Callable[[str], None] = lambda line: None,
    interval: float = WAIT_INTERVAL,
) -> Attempt:
    """Check (given the seconds left) until a check is healthy or `seconds` have passed, every
    `interval`; the last check. `say` hears the verdict whenever it changes, as cilium status
    --wait reports its progress: sparingly."""
    deadline = clock() + seconds
    said = None
    while True:
        attempt = check(max(deadline - clock(), 0.0))
        left = deadline - clock()
        if attempt.healthy or left <= 0:
            return attempt
        verdict = attempt.verdict()
        if verdict != said:
            say(f"waiting, {math.ceil(left)}s left: {verdict}")
            said = verdict
        sleep(min(interval, left))


def _check(args: argparse.Namespace, left: float) -> Attempt:
    """One check whose requests end by the deadline (a second at least)."""
    bounded = argparse.Namespace(**{**vars(args), "timeout": min(args.timeout, max(left, 1.0))})
    try:
        return Attempt(collect(bounded, os.environ))
    except StatusFailed as err:
        return Attempt(error=err)


# --- the command ------------------------------------------------------------------------------


def command(args: argparse.Namespace) -> int:
    # The lease stores log retries and TLS warnings; a failure is reported below instead.
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    if args.wait is None:
        attempt = _check(args, args.timeout)
    else:

        def say(line: str) -> None:
            print(f"pyflannel status: {line}", file=sys.stderr, flush=True)

        attempt = wait_for_health(lambda left: _check(args, left), args.wait, say=say)
        if not attempt.healthy:
            say(f"not healthy after {args.wait:g}s")
    return show(attempt, args.output)


def show(attempt: Attempt, output: str) -> int:
    """The check as the output format wants it; its exit status."""
    if attempt.status is None:
        err = attempt.error
        assert err is not None
        if err.agent is not None and output == "table":
            print(err.agent.describe(), flush=True)
        print(f"pyflannel status: {err}", file=sys.stderr)
        return EXIT_ERROR
    status = attempt.status
    report, agent, note = status.report, status.agent, status.lease_note
    if output == "json":
        sys.stdout.write(render_json(report, agent, status.pods, status.offload, note))
    else:
        sys.stdout.write(
            render_table(report, time.time(), agent, status.pods, status.offload, note)
        )
    return EXIT_OK if attempt.healthy else EXIT_MISMATCH
