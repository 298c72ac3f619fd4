"""``pyflannel ipam`` and ``pyflannel ipam gc``: the node's pod addresses for operators.

Exit status of ``ipam``: 0 nothing looks leaked, 1 something does, 2 the network could not be
read. Of ``ipam gc``: 0 everything it set out to release was released, 1 something failed,
2 nothing was released because the network could not be read or nobody could say which
containers are gone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from pyflannel_runtime.cni.gc import GcReport, Release
from pyflannel_runtime.ipam.node import (
    DEFAULT_CNI_PATH,
    DEFAULT_CONFLIST,
    IpamError,
    NodeIpam,
    inspect_node,
    load_target,
    release_leaks,
    report_dict,
    usage_text,
)
from pyflannel_runtime.ipam.runtimes import live_containers

HELP = "show this node's pod addresses, and release leaked ones"
DESCRIPTION = (
    "Show the node's pod subnet, the addresses host-local has handed out and how many are "
    "free, each allocation's container, interface and whether a flannel state file backs it, "
    "and the allocations that look leaked: no state file, or a container no runtime knows "
    "(podman and crictl are asked unless --valid-containers names the live ones). "
    "Exit status: 0 nothing leaked, 1 leaks found, 2 could not read the network."
)
GC_HELP = "release the allocations of containers that are gone"
GC_DESCRIPTION = (
    "Release every allocation and flannel state file of a container the runtimes no longer "
    "know, through the flannel CNI plugin's own GC: its saved config is replayed as a DEL "
    "through the delegate, and what is left goes through host-local's DEL. Containers the "
    "runtime knows are never touched. Exit status: 0 all released, 1 some failed, 2 nothing "
    "released (the network could not be read, or nobody could say which containers are gone)."
)
EXIT_OK = 0
EXIT_FOUND = 1
EXIT_ERROR = 2
_SHORT_ID = 12


def _add_node_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The options both commands take; on ``gc`` they default to what was given before it."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--conflist",
        metavar="FILE",
        default=default(DEFAULT_CONFLIST),
        help=f"the CNI conflist with the flannel plugin (default {DEFAULT_CONFLIST})",
    )
    parser.add_argument(
        "--valid-containers",
        metavar="IDS",
        action="append",
        default=default(None),
        help="the CNI container IDs of the node's live containers (pod sandboxes), separated "
        "by commas or spaces, repeatable; instead of asking podman and crictl",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default=default("table"),
        help="output format (default table)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_node_options(parser, defaults=True)
    actions = parser.add_subparsers(title="commands", metavar="COMMAND")
    gc = actions.add_parser("gc", help=GC_HELP, description=GC_DESCRIPTION)
    gc.set_defaults(handler=gc_command)
    _add_node_options(gc, defaults=False)
    gc.add_argument(
        "--cni-path",
        metavar="DIRS",
        default=DEFAULT_CNI_PATH,
        help=f"where the CNI plugins are, colon-separated (default {DEFAULT_CNI_PATH})",
    )
    gc.add_argument("--dry-run", action="store_true", help="only say what would be released")


def node_ipam(args: argparse.Namespace) -> NodeIpam:
    """The node's pod addresses, from ``--conflist`` and ``--valid-containers`` (else the
    runtimes). Raises IpamError when the network cannot be read."""
    given = args.valid_containers
    ids = None if given is None else " ".join(given).replace(",", " ").split()
    return inspect_node(load_target(args.conflist), live_containers(ids, os.environ))


# --- rendering ----------------------------------------------------------------------------------


def render_json(node: NodeIpam) -> str:
    return json.dumps(report_dict(node), indent=2) + "\n"


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def render_table(node: NodeIpam) -> str:
    lines = [
        f"network {node.target.network} on this node (subnet.env {node.target.conf.subnet_file})"
    ]
    lines += [f"  {usage_text(usage)}" for usage in node.usage]
    lines.append(
        f"  host-local store {node.target.hostlocal_dir}, flannel state {node.target.state_dir}"
    )
    if node.runtime.containers is not None:
        lines.append(
            f"  containers known to {', '.join(node.runtime.sources)}: {len(node.runtime.containers)}"
        )
    lines += [f"warning: {problem}" for problem in node.problems]
    if node.rows:
        table = [("ADDRESS", "CONTAINER", "IFNAME", "STATE FILE", "RUNTIME", "LEAKED")]
        for row in node.rows:
            allocation = row.allocation
            table.append(
                (
                    allocation.address,
                    allocation.container_id[:_SHORT_ID],
                    allocation.ifname or "-",
                    "yes" if row.state_file else "no",
                    {True: "known", False: "gone", None: "?"}[row.known],
                    f"yes: {', '.join(row.reasons)}" if row.reasons else "no",
                )
            )
        lines += ["", *_columns(table)]
    else:
        lines.append("no addresses allocated")
    for container_id in node.stale_state_files:
        lines.append(f"state file without an address, container gone: {container_id[:_SHORT_ID]}")
    if node.leaked:
        lines.append(f"{len(node.leaked)} allocation(s) look leaked; {_what_gc_does(node)}")
    return "\n".join(lines) + "\n"


def _what_gc_does(node: NodeIpam) -> str:
    if node.runtime.containers is None:
        return (
            "nobody could say which containers are gone: name the live ones with --valid-containers"
        )
    if node.releasable:
        return f"`pyflannel ipam gc` releases the {len(node.releasable)} whose container is gone"
    return "their containers still exist, so `pyflannel ipam gc` leaves them"


def _release_text(release: Release) -> str:
    held = ", ".join(release.addresses) or "no address"
    how = "replaying its saved DEL" if release.replay else "host-local DEL"
    return f"{held} of container {release.container_id[:_SHORT_ID]} ({release.ifname or 'eth0'}): {how}"


def render_gc(report: GcReport, dry_run: bool) -> str:
    verb = "would release" if dry_run else "released"
    lines = [f"{verb} {_release_text(release)}" for release in report.released]
    lines += [f"failed: {error}" for error in report.errors]
    lines += [f"warning: {problem}" for problem in report.problems]
    if not report.released and not report.errors:
        lines.append("nothing to release")
    return "\n".join(lines) + "\n"


# --- the commands -------------------------------------------------------------------------------


def command(args: argparse.Namespace) -> int:
    try:
        node = node_ipam(args)
    except IpamError as err:
        print(f"pyflannel ipam: {err}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(render_json(node) if args.output == "json" else render_table(node))
    return EXIT_FOUND if node.leaked else EXIT_OK


def gc_command(args: argparse.Namespace) -> int:
    try:
        node = node_ipam(args)
        report, log = release_leaks(node, args.cni_path, os.environ, dry_run=args.dry_run)
    except IpamError as err:
        print(f"pyflannel ipam gc: {err}", file=sys.stderr)
        return EXIT_ERROR
    if not report.ok:
        sys.stderr.write(log)  # what the plugins said, for the failures
    if args.output == "json":
        print(json.dumps(report_dict(node, report, args.dry_run), indent=2))
    else:
        sys.stdout.write(render_gc(report, args.dry_run))
    return EXIT_OK if report.ok else EXIT_FOUND
