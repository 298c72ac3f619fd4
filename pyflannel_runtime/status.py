"""``pyflannel status``: the cluster's leases, and whether this host's kernel holds what its
agent would program for each peer.

The expected entries come from the backends' own ``peers`` functions and the actual ones from
the datapath's dump, so this reports exactly what the agent's reconcile would repair.
Read-only: nothing is written to etcd, the API server or the kernel.

Exit status: 0 when every peer is programmed and nothing is stale, 1 when something is missing,
stale or wrong, 2 when the leases or the kernel could not be read.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from ipaddress import ip_address
from typing import Any

from pyflannel_runtime.agent.flags import FlagError, Options, parse_flags
from pyflannel_runtime.backend.peers import (
    PeerSkipped,
    VxlanDevices,
    hostgw_peer_entries,
    vxlan_peer_entries,
)
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.model.lease import Lease
from pyflannel_runtime.model.netconf import NetworkConfig, vxlan_options
from pyflannel_runtime.model.subnet_env import read_previous_subnets
from pyflannel_runtime.netlink.entries import (
    DatapathState,
    Entry,
    Fdb,
    IPAddress,
    IPNetwork,
    Neigh,
    Route,
)
from pyflannel_runtime.subnet.watcher import LeaseWatcher

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
    """The leases or the kernel could not be read; ``str()`` says what and why."""


# --- the comparison (pure) --------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRow:
    lease: Lease
    node: str = ""  # the node's name (Kubernetes); etcd leases have none


@dataclass(frozen=True)
class HostDatapath:
    """What this host's backend programs a peer with, as far as its kernel tells.

    A device the backend needs but the kernel lacks gets a negative index, which no kernel
    entry has: every entry on it then shows as missing, which is what the host lacks.
    """

    backend_type: str
    devices: VxlanDevices = field(default_factory=lambda: VxlanDevices(None, None))
    direct_oifs: Mapping[IPAddress, int] = field(default_factory=dict)
    ext_index: int = -1
    ipv4: bool = True
    ipv6: bool = False
    ownership_devices: frozenset[int] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    names: Mapping[int, str] = field(default_factory=dict)  # ifindex -> device name
    problems: tuple[str, ...] = ()


def expected_entries(lease: Lease, host: HostDatapath) -> tuple[Entry, ...]:
    """The agent's entries for one peer; raises PeerSkipped when it programs none."""
    if host.backend_type == "vxlan":
        return vxlan_peer_entries(lease, host.devices, host.direct_oifs)
    if host.backend_type == "host-gw":
        return hostgw_peer_entries(lease, host.ext_index, host.ipv4, host.ipv6)
    raise PeerSkipped(f"the {host.backend_type} backend's datapath is not checked")


class Datapath(enum.Enum):
    OWN = "own"
    PROGRAMMED = "programmed"
    MISSING = "missing"
    SKIPPED = "skipped"
    UNCHECKED = "unchecked"


@dataclass(frozen=True)
class LeaseStatus:
    row: LeaseRow
    datapath: Datapath
    expected: int = 0  # entries the agent programs for this peer
    missing: tuple[Entry, ...] = ()
    note: str = ""  # why a peer is skipped


@dataclass(frozen=True)
class StatusReport:
    store: str  # "etcd" or "kube"
    leases: tuple[LeaseStatus, ...]
    stale: tuple[Entry, ...] = ()
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    names: Mapping[int, str] = field(default_factory=dict)

    def count(self, state: Datapath) -> int:
        return sum(1 for status in self.leases if status.datapath is state)

    @property
    def ok(self) -> bool:
        return not (self.count(Datapath.MISSING) or self.stale or self.problems)


def find_own_lease(
    rows: Sequence[LeaseRow], public_ip: IPAddress | None, subnets: Sequence[IPNetwork]
) -> Lease | None:
    """The lease holding this host's public IP when it is given, else the one holding a subnet
    from its subnet.env."""
    for row in rows:
        lease = row.lease
        if public_ip is not None:
            if public_ip in (lease.attrs.public_ip, lease.attrs.public_ipv6):
                return lease
        elif any(s in (lease.subnet, lease.ipv6_subnet) for s in subnets):
            return lease
    return None


def compare(
    rows: Sequence[LeaseRow],
    own: Lease | None,
    host: HostDatapath | None,
    actual: DatapathState | None,
    store: str,
    problems: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> StatusReport:
    """Each lease's state on this host, and the owned entries no lease explains. Without a
    host (or its dump) the datapath is not checked."""
    watcher = LeaseWatcher(own) if own is not None else None
    present = actual.entries() if actual is not None else frozenset()
    explained: set[Entry] = set()
    statuses = []
    for row in rows:
        if watcher is not None and watcher.is_own(row.lease):
            statuses.append(LeaseStatus(row, Datapath.OWN))
            continue
        if host is None or actual is None:
            statuses.append(LeaseStatus(row, Datapath.UNCHECKED))
            continue
        try:
            expected = expected_entries(row.lease, host)
        except PeerSkipped as why:
            statuses.append(LeaseStatus(row, Datapath.SKIPPED, note=str(why)))
            continue
        explained.update(expected)
        missing = tuple(e for e in expected if e not in present)
        state = Datapath.MISSING if missing else Datapath.PROGRAMMED
        statuses.append(LeaseStatus(row, state, len(expected), missing))
    stale = sorted(present - explained, key=_entry_order) if host is not None else []
    return StatusReport(
        store=store,
        leases=tuple(statuses),
        stale=tuple(stale),
        problems=tuple(problems) + (host.problems if host is not None else ()),
        notes=tuple(notes),
        names=dict(host.names) if host is not None else {},
    )


def _entry_order(entry: Entry) -> tuple[int, str]:
    return ({Neigh: 0, Fdb: 1, Route: 2}[type(entry)], repr(entry))


# --- rendering (pure) -------------------------------------------------------------------------


def describe(entry: Entry, names: Mapping[int, str]) -> str:
    """An entry in `ip` / `bridge` syntax."""

    def dev(index: int) -> str:
        return names.get(index, f"if{index}")

    if isinstance(entry, Route):
        words = [f"route {entry.dst}"]
        if entry.gateway is not None:
            words.append(f"via {entry.gateway}")
        words.append(f"dev {dev(entry.oif)}")
        if entry.onlink:
            words.append("onlink")
        if entry.priority:
            words.append(f"metric {entry.priority}")
        return " ".join(words)
    if isinstance(entry, Neigh):
        return f"neigh {entry.ip} lladdr {entry.lladdr} dev {dev(entry.ifindex)}"
    return f"fdb {entry.lladdr} dev {dev(entry.ifindex)} dst {entry.dst}"


def subnets_text(lease: Lease) -> str:
    return ", ".join(str(s) for s in (lease.subnet, lease.ipv6_subnet) if s is not None)


def public_ips_text(lease: Lease) -> str:
    attrs = lease.attrs
    shown = [str(attrs.public_ip)] if lease.subnet is not None or not attrs.public_ipv6 else []
    if attrs.public_ipv6 is not None:
        shown.append(str(attrs.public_ipv6))
    return ", ".join(shown)


def vtep_macs(lease: Lease) -> tuple[str, str]:
    from pyflannel_runtime.subnet.kube_nodes import vtep_mac

    return vtep_mac(lease.attrs.backend_data), vtep_mac(lease.attrs.backend_v6_data)


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
        return f"missing {len(status.missing)}/{status.expected}"
    if status.datapath is Datapath.UNCHECKED:
        return "-"
    state: str = status.datapath.value
    return state


def summary(report: StatusReport) -> str:
    leases, programmed = len(report.leases), report.count(Datapath.PROGRAMMED)
    text = (
        f"{leases} lease{'s' * (leases != 1)}, "
        f"{programmed} peer{'s' * (programmed != 1)} programmed, "
        f"{report.count(Datapath.MISSING)} missing, {len(report.stale)} stale"
    )
    skipped = report.count(Datapath.SKIPPED)
    return text + (f", {skipped} skipped" if skipped else "")


def _box(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return [rule, line(header), rule, *(line(r) for r in rows), rule]


def render_table(report: StatusReport, now: float) -> str:
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
        ("Skipped:", [f"{_label(s)}: {s.note}" for s in report.leases if s.note]),
        ("Problems:", list(report.problems)),
        ("Notes:", list(report.notes)),
    ]  # fmt: skip
    for title, items in sections:
        if items:
            lines += ["", title, *(f"  {item}" for item in items)]
    lines += ["", summary(report)]
    return "\n".join(lines) + "\n"


def _label(status: LeaseStatus) -> str:
    return status.row.node or subnets_text(status.row.lease)


def _iso(expiration: float | None) -> str | None:
    if expiration is None:
        return None
    return datetime.fromtimestamp(expiration, UTC).isoformat().replace("+00:00", "Z")


def report_dict(report: StatusReport) -> dict[str, Any]:
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
        "stale": [describe(e, report.names) for e in report.stale],
        "problems": list(report.problems),
        "notes": list(report.notes),
        "summary": {
            "leases": len(report.leases),
            "programmed": report.count(Datapath.PROGRAMMED),
            "missing": report.count(Datapath.MISSING),
            "stale": len(report.stale),
            "skipped": report.count(Datapath.SKIPPED),
        },
        "ok": report.ok,
    }


def render_json(report: StatusReport) -> str:
    return json.dumps(report_dict(report), indent=2) + "\n"


# --- reading the leases -----------------------------------------------------------------------


async def etcd_leases(opts: Options, timeout: float) -> tuple[NetworkConfig, list[LeaseRow]]:
    from pyflannel_runtime.agent.stores import etcd_settings
    from pyflannel_runtime.model.netconf import ConfigError
    from pyflannel_runtime.subnet.etcd import ETCD_ERRORS, EtcdError, EtcdSubnetManager
    from pyflannel_runtime.subnet.etcd import (
        describe as etcd_describe,
    )

    settings = etcd_settings(opts, request_timeout=timeout)
    where = f"etcd {opts.etcd_endpoints} (prefix {opts.etcd_prefix})"
    failures: tuple[type[BaseException], ...] = (*ETCD_ERRORS, EtcdError, ConfigError)
    try:
        sm = EtcdSubnetManager(settings)
    except EtcdError as err:
        raise StatusError(f"cannot read leases from {where}: {err}") from None
    try:
        async with asyncio.timeout(timeout):
            config = await sm.get_network_config()
            listed = await sm.list_leases()
    except TimeoutError:
        raise StatusError(f"cannot read leases from {where}: no answer in {timeout:g}s") from None
    except failures as err:
        raise StatusError(f"cannot read leases from {where}: {etcd_describe(err)}") from None
    finally:
        await sm.close()
    return config, [LeaseRow(lease) for lease in sorted(listed, key=_lease_order)]


def kube_leases(opts: Options, timeout: float) -> tuple[NetworkConfig, list[LeaseRow], list[str]]:
    """Leases of the flannel nodes, and a problem line for each node that has none."""
    import kubernetes.client
    import urllib3
    from kubernetes.client.exceptions import ApiException

    from pyflannel_runtime.subnet.annotations import AnnotationPrefixError, Annotations
    from pyflannel_runtime.subnet.kube import (
        KubeSubnetError,
        api_error_text,
        build_api_client,
        read_net_config,
    )
    from pyflannel_runtime.subnet.kube_nodes import (
        NodeLeaseError,
        is_flannel_node,
        node_name,
        node_to_lease,
    )

    try:
        config = read_net_config(opts.net_config_path)
        keys = Annotations.for_prefix(opts.kube_annotation_prefix)
        api: Any = build_api_client(opts.kube_api_url, opts.kubeconfig_file)
    except (KubeSubnetError, AnnotationPrefixError) as err:
        raise StatusError(str(err)) from None
    try:
        response: Any = kubernetes.client.CoreV1Api(api).list_node(
            _preload_content=False, _request_timeout=timeout
        )
        nodes = json.loads(response.data).get("items") or []
    except (ApiException, urllib3.exceptions.HTTPError, ValueError) as err:
        raise StatusError(f"cannot list nodes: {api_error_text(err)}") from None
    finally:
        api.close()
    rows, problems = [], []
    for node in sorted(nodes, key=node_name):
        if not is_flannel_node(node, keys):
            continue
        try:
            lease = node_to_lease(node, keys, config.enable_ipv4, config.enable_ipv6)
        except NodeLeaseError as err:
            problems.append(f"node {node_name(node)} has no usable lease: {err}")
            continue
        rows.append(LeaseRow(lease, node_name(node)))
    return config, rows, problems


def _lease_order(lease: Lease) -> tuple[int, int]:
    subnet = lease.subnet or lease.ipv6_subnet
    assert subnet is not None
    return subnet.version, int(subnet.network_address)


# --- reading this host ------------------------------------------------------------------------


def inspect_host(
    netns: str | None, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """The devices the backend uses on this host and, with DirectRouting, which peers it
    reaches directly (read with pyroute2, never changed)."""
    from pyflannel_runtime.netlink.netns import iproute

    try:
        with iproute(netns) as ipr:
            names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
            if config.backend_type == "vxlan":
                return _vxlan_host(ipr, config, names, leases)
            return _hostgw_host(ipr, config, own, names)
    except OSError as err:
        raise StatusError(f"cannot read the kernel's devices: {err}") from None


def _networks(config: NetworkConfig) -> tuple[IPNetwork, ...]:
    wanted = (
        config.network if config.enable_ipv4 else None,
        config.ipv6_network if config.enable_ipv6 else None,
    )
    return tuple(n for n in wanted if n is not None)


def _vxlan_host(
    ipr: Any, config: NetworkConfig, names: dict[int, str], leases: Sequence[Lease]
) -> HostDatapath:
    opts = vxlan_options(config)
    by_name = {name: index for index, name in names.items()}
    problems = []
    indexes: dict[int, int | None] = {}
    for version, enabled, name, absent in (
        (4, config.enable_ipv4, f"flannel.{opts.vni}", -1),
        (6, config.enable_ipv6, f"flannel-v6.{opts.vni}", -2),
    ):
        if not enabled:
            indexes[version] = None
            continue
        index = by_name.get(name)
        if index is None:
            problems.append(f"device {name} does not exist")
            names[absent] = name
        indexes[version] = index if index is not None else absent
    return HostDatapath(
        backend_type="vxlan",
        devices=VxlanDevices(indexes[4], indexes[6]),
        direct_oifs=_direct_oifs(ipr, config, leases) if opts.direct_routing else {},
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        ownership_devices=frozenset(i for i in indexes.values() if i is not None and i > 0),
        networks=_networks(config),
        names=names,
        problems=tuple(problems),
    )


def _direct_oifs(ipr: Any, config: NetworkConfig, leases: Sequence[Lease]) -> dict[IPAddress, int]:
    """The route lookup the agent's DirectRouting makes for each peer's public IPs."""
    from pyflannel_runtime.backend.vxlan import _direct_oif

    ips: set[IPAddress | None] = set()
    for lease in leases:
        ips.add(lease.attrs.public_ip if config.enable_ipv4 else None)
        ips.add(lease.attrs.public_ipv6 if config.enable_ipv6 else None)
    found = {ip: _direct_oif(ipr, ip) for ip in ips if ip is not None}
    return {ip: oif for ip, oif in found.items() if oif is not None}


def _hostgw_host(
    ipr: Any, config: NetworkConfig, own: Lease, names: dict[int, str]
) -> HostDatapath:
    public = own.attrs.public_ip if config.enable_ipv4 else own.attrs.public_ipv6
    ext_index = -1
    problems = []
    found = ipr.get_addr(address=str(public)) if public is not None else []
    if found:
        ext_index = found[0]["index"]
    else:
        problems.append(f"no interface holds the public IP {public} of this host's lease")
        names[-1] = f"<interface of {public}>"
    return HostDatapath(
        backend_type=config.backend_type,
        ext_index=ext_index,
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        networks=_networks(config),
        names=names,
        problems=tuple(problems),
    )


def read_kernel(netns: str | None, host: HostDatapath) -> DatapathState:
    from pyflannel_runtime.netlink.dump import Ownership, open_dump_socket, read_owned_state

    ownership = Ownership(host.ownership_devices, host.networks)
    try:
        sock = open_dump_socket(netns)
        try:
            return read_owned_state(sock, ownership)
        finally:
            sock.close()
    except OSError as err:
        raise StatusError(f"cannot dump the kernel's routes and neighbours: {err}") from None


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
    parser.add_argument("--netns", metavar="NAME", help="check this network namespace's kernel")
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
    return replace(base, **{k: v for k, v in given.items() if v is not None})


def own_subnets(opts: Options) -> list[IPNetwork]:
    try:
        text = read_small_file(opts.subnet_file).decode("utf-8", errors="replace")
    except OSError as err:
        raise StatusError(
            f"cannot tell which lease is this host's: {opts.subnet_file}: "
            f"{err.strerror or err}; pass --public-ip, --subnet-file or --leases-only"
        ) from None
    previous = read_previous_subnets(text)
    return [s for s in (previous.subnet, previous.ipv6_subnet) if s is not None]


def collect(args: argparse.Namespace, environ: Mapping[str, str]) -> StatusReport:
    opts = agent_options(args, environ)
    store = "kube" if opts.kube_subnet_mgr else "etcd"
    problems: list[str] = []
    if opts.kube_subnet_mgr:
        config, rows, problems = kube_leases(opts, args.timeout)
    else:
        config, rows = asyncio.run(etcd_leases(opts, args.timeout))
    if args.leases_only:
        return compare(rows, None, None, None, store, problems)
    public_ip = None
    if opts.public_ip:
        try:
            public_ip = ip_address(opts.public_ip)
        except ValueError:
            raise StatusError(f"invalid --public-ip {opts.public_ip!r}") from None
    subnets = own_subnets(opts) if public_ip is None else []
    own = find_own_lease(rows, public_ip, subnets)
    if own is None:
        named = public_ip or ", ".join(map(str, subnets)) or "nothing"
        problems.append(f"no lease belongs to this host ({named}); the datapath was not checked")
        return compare(rows, None, None, None, store, problems)
    if config.backend_type not in ("vxlan", "host-gw"):
        note = f"the {config.backend_type} backend's datapath is not checked"
        return compare(rows, own, None, None, store, problems, [note])
    host = inspect_host(args.netns, config, own, [row.lease for row in rows])
    actual = read_kernel(args.netns, host)
    return compare(rows, own, host, actual, store, problems)


def command(args: argparse.Namespace) -> int:
    # The lease stores log retries and TLS warnings; a failure is reported below instead.
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    try:
        report = collect(args, os.environ)
    except StatusError as err:
        print(f"pyflannel status: {err}", file=sys.stderr)
        return EXIT_ERROR
    if args.output == "json":
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_table(report, time.time()))
    return EXIT_OK if report.ok else EXIT_MISMATCH
