"""``pyflannel status``: the cluster's leases, and whether this host's kernel holds what its
agent would program for each peer.

The command line and the renderings only: ``ops.verify`` reads the leases and the kernel and
compares them, exactly as the agent's reconcile would see them. Read-only: nothing is written
to etcd, the API server or the kernel.

Exit status: 0 when every peer is programmed and nothing is stale, 1 when something is missing,
stale, rejected or wrong, 2 when the leases or the kernel could not be read.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any

from pyflannel_runtime.agent.flags import FlagError, Options, parse_flags, validate
from pyflannel_runtime.backend import registry
from pyflannel_runtime.model.lease import Lease
from pyflannel_runtime.ops.verify import (
    Datapath,
    Host,
    LeaseStatus,
    LeaseStore,
    OwnLeaseUnknown,
    VerifyError,
    VerifyReport,
    describe,
    verify,
)

HELP = "show the leases and whether this host's datapath holds every peer"
DESCRIPTION = (
    "List the cluster's leases (etcd, or the Kubernetes API with --kube-subnet-mgr) and check "
    "that this host's kernel holds the routes, neighbours and FDB entries its agent programs "
    "for each peer. Flags the command shares with pyflanneld default to its FLANNELD_* "
    "environment. Exit status: 0 all programmed, 1 something missing or stale, 2 could not "
    "read the leases or the kernel."
)

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_ERROR = 2


class StatusError(Exception):
    """The command's settings are unusable; ``str()`` says what and why."""


# --- rendering (pure) -------------------------------------------------------------------------


def subnets_text(lease: Lease) -> str:
    return ", ".join(str(s) for s in (lease.subnet, lease.ipv6_subnet) if s is not None)


def public_ips_text(lease: Lease) -> str:
    attrs = lease.attrs
    shown = [str(attrs.public_ip)] if lease.subnet is not None or not attrs.public_ipv6 else []
    if attrs.public_ipv6 is not None:
        shown.append(str(attrs.public_ipv6))
    return ", ".join(shown)


def vtep_macs(lease: Lease) -> tuple[str, str]:
    spec = registry.find(lease.attrs.backend_type)
    if spec is None or spec.advertised_mac is None:
        return "", ""
    return spec.advertised_mac(lease.attrs.backend_data), spec.advertised_mac(
        lease.attrs.backend_v6_data
    )


def remaining(expiration: float | None, now: float, store: str) -> str:
    if expiration is None:
        return "never" if store == "etcd" else "-"
    left = int(expiration - now)
    if left <= 0:
        return "expired"
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def _datapath_cell(status: LeaseStatus) -> str:
    if status.datapath is Datapath.MISSING:
        return f"missing {len(status.missing)}/{len(status.expected)}"
    if status.datapath is Datapath.UNCHECKED:
        return "-"
    state: str = status.datapath.value
    return state


def summary(report: VerifyReport) -> str:
    leases, programmed = len(report.leases), report.count(Datapath.PROGRAMMED)
    text = (
        f"{leases} lease{'s' * (leases != 1)}, "
        f"{programmed} peer{'s' * (programmed != 1)} programmed, "
        f"{report.count(Datapath.MISSING)} missing, {len(report.stale)} stale"
    )
    skipped = report.count(Datapath.SKIPPED)
    text += f", {skipped} skipped" if skipped else ""
    return text + (f", {report.rejected} rejected" if report.rejected else "")


def _box(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [rule, line(header), rule, *(line(r) for r in rows), rule]


def render_table(report: VerifyReport, now: float) -> str:
    kube = report.store == "kube"
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
    lines = _box(header, rows)
    sections: list[tuple[str, list[str]]] = [
        (
            "Missing on this host:",
            [
                f"{_label(s)}: {describe(entry, report.names)}"
                for s in report.leases
                for entry in s.missing
            ],
        ),
        ("Stale on this host (no lease explains them):", [
            describe(entry, report.names) for entry in report.stale
        ]),
        ("Skipped:", [
            f"{_label(s)}: {s.note}" for s in report.leases if s.datapath is Datapath.SKIPPED
        ]),
        ("Rejected (never programmed):", [
            *(f"{_label(s)}: {s.note}" for s in report.leases if s.datapath is Datapath.REJECTED),
            *(f"{u.name}: {u.reason}" for u in report.unreadable),
        ]),
        ("Problems:", [*report.problems, *_mtu_problems(report), *report.subnet_env]),
        ("Notes:", list(report.notes)),
    ]  # fmt: skip
    for title, items in sections:
        if items:
            lines += ["", title, *(f"  {item}" for item in items)]
    lines += ["", summary(report)]
    return "\n".join(lines) + "\n"


def _mtu_problems(report: VerifyReport) -> list[str]:
    return [
        f"{m.device} has MTU {m.actual}, expected {m.expected}" for m in report.mtus if not m.ok
    ]


def _label(status: LeaseStatus) -> str:
    return status.row.node or subnets_text(status.row.lease)


def _iso(expiration: float | None) -> str | None:
    if expiration is None:
        return None
    return datetime.fromtimestamp(expiration, UTC).isoformat().replace("+00:00", "Z")


def report_dict(report: VerifyReport) -> dict[str, Any]:
    """The report for scripts: every lease, every mismatch, and the counts."""

    def text(value: object) -> str | None:
        return None if value is None else str(value)

    leases = []
    for status in report.leases:
        lease = status.row.lease
        v4_mac, v6_mac = vtep_macs(lease)
        leases.append(
            {
                "node": status.row.node or None,
                "subnet": text(lease.subnet),
                "ipv6_subnet": text(lease.ipv6_subnet),
                "public_ip": str(lease.attrs.public_ip),
                "public_ipv6": text(lease.attrs.public_ipv6),
                "backend": lease.attrs.backend_type,
                "vtep_mac": v4_mac or None,
                "vtep_mac_v6": v6_mac or None,
                "expires": _iso(lease.expiration),
                "own": status.datapath is Datapath.OWN,
                "datapath": status.datapath.value,
                "missing": [describe(e, report.names) for e in status.missing],
                "note": status.note or None,
            }
        )
    return {
        "store": report.store,
        "leases": leases,
        "unreadable": [{"name": u.name, "reason": u.reason} for u in report.unreadable],
        "stale": [describe(e, report.names) for e in report.stale],
        "mtu": [
            {"device": m.device, "actual": m.actual, "expected": m.expected} for m in report.mtus
        ],
        "subnet_env": list(report.subnet_env),
        "problems": list(report.problems),
        "notes": list(report.notes),
        "summary": {
            "leases": len(report.leases),
            "programmed": report.count(Datapath.PROGRAMMED),
            "missing": report.count(Datapath.MISSING),
            "stale": len(report.stale),
            "skipped": report.count(Datapath.SKIPPED),
            "rejected": report.rejected,
        },
        "ok": report.ok,
    }


def render_json(report: VerifyReport) -> str:
    return json.dumps(report_dict(report), indent=2) + "\n"


# --- the command ------------------------------------------------------------------------------

_AGENT_FLAGS = (
    ("--etcd-endpoints", "comma-separated etcd endpoints"),
    ("--etcd-prefix", "etcd prefix"),
    ("--etcd-keyfile", "TLS key file for etcd"),
    ("--etcd-certfile", "TLS certificate file for etcd"),
    ("--etcd-cafile", "TLS CA file for etcd"),
    ("--etcd-username", "etcd username"),
    ("--etcd-password", "etcd password"),
    ("--kube-api-url", "Kubernetes API server URL"),
    ("--kubeconfig-file", "kubeconfig file"),
    ("--kube-annotation-prefix", "node annotation prefix"),
    ("--net-config-path", "net-conf.json, read in Kubernetes mode"),
    ("--subnet-file", "this host's subnet.env, naming its own lease"),
    ("--public-ip", "this host's public IP, naming its own lease (instead of --subnet-file)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, text in _AGENT_FLAGS:
        parser.add_argument(flag, metavar="VALUE", help=f"{text} (as pyflanneld)")
    parser.add_argument(
        "--kube-subnet-mgr",
        action="store_true",
        default=None,
        help="read the leases from the Kubernetes API instead of etcd",
    )
    parser.add_argument(
        "--netns", metavar="NAME", help="check this network namespace (everything runs in it)"
    )
    parser.add_argument(
        "--leases-only", action="store_true", help="list the leases; do not check the kernel"
    )
    parser.add_argument("--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="for etcd or the API"
    )


def agent_options(args: argparse.Namespace, environ: Mapping[str, str]) -> Options:
    """pyflanneld's settings: its FLANNELD_* environment overridden by the given flags."""
    try:
        base = parse_flags([], environ)
    except FlagError as err:
        raise StatusError(str(err)) from None
    given = {
        flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
        for flag, _ in (*_AGENT_FLAGS, ("--kube-subnet-mgr", ""))
    }
    opts = replace(base, **{k: v for k, v in given.items() if v is not None})
    try:
        validate(opts)
    except FlagError as err:
        raise StatusError(str(err)) from None
    return opts


def lease_store(opts: Options, timeout: float) -> LeaseStore:
    from pyflannel_runtime.agent.stores import etcd_settings, kube_settings

    if opts.kube_subnet_mgr:
        return kube_settings(opts, request_timeout=timeout)
    return etcd_settings(opts, request_timeout=timeout)


def target_host(args: argparse.Namespace, opts: Options, environ: Mapping[str, str]) -> Host:
    """The host to check. Its own lease: by --public-ip, else by subnet.env, which is then
    checked too (with --public-ip only when a subnet file is named explicitly)."""
    public_ip = None
    if opts.public_ip:
        try:
            public_ip = ip_address(opts.public_ip)
        except ValueError:
            raise StatusError(f"invalid --public-ip {opts.public_ip!r}") from None
    named = args.subnet_file is not None or "FLANNELD_SUBNET_FILE" in environ
    subnet_file = opts.subnet_file if public_ip is None or named else None
    return Host(netns=args.netns, public_ip=public_ip, subnet_file=subnet_file)


def collect(args: argparse.Namespace, environ: Mapping[str, str]) -> VerifyReport:
    opts = agent_options(args, environ)
    host = target_host(args, opts, environ)
    try:
        return verify(lease_store(opts, args.timeout), host, leases_only=args.leases_only)
    except OwnLeaseUnknown as err:
        raise VerifyError(f"{err}; pass --public-ip, --subnet-file or --leases-only") from None


def command(args: argparse.Namespace) -> int:
    # The lease stores log retries and TLS warnings; a failure is reported below instead.
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    try:
        report = collect(args, os.environ)
    except (StatusError, VerifyError) as err:
        print(f"pyflannel status: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_table(report, time.time()))
    return EXIT_OK if report.ok else EXIT_MISMATCH
