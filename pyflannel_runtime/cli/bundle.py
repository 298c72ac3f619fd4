"""``pyflannel bundle``: what support needs to diagnose this node, in one ``.tar.gz``.

It holds ``pyflannel status -o json`` and ``pyflannel ipam -o json``, and what
`ops.bundle_node` collects: the leases and the network config, subnet.env, the conflist, the
agent's settings, flannel's devices, routes, neighbours and FDB entries, its iptables chains and
nft tables, the CNI plugin's state, the agent's unit and journal, and the versions. Secrets are
left out (`ops.redact`). A part that cannot be collected is named in the bundle's
``errors.txt`` and ``manifest.json``, and the bundle is written all the same, as ``cilium
sysdump`` and ``calicoctl cluster diags`` do.

Exit status: 0 everything collected, 1 written but some part is missing (see its errors.txt),
2 no bundle written.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyflannel_runtime.agent.cli_flags import AgentFlagsError, agent_environment, agent_options
from pyflannel_runtime.agent.envfile import AGENT_ENV_FILE
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.cli import status

# The bundle's machinery loads when the command runs: `pyflannel config check` stays quick.
if TYPE_CHECKING:
    from pyflannel_runtime.ops.bundle import Collector, Files
    from pyflannel_runtime.ops.bundle_node import NodeSettings

HELP = "write a diagnostics bundle of this node, secrets left out"
DESCRIPTION = (
    "Write one .tar.gz with what support needs to diagnose this node: pyflannel status and "
    "pyflannel ipam as JSON, the leases and the network config (from the agent's datastore), "
    "subnet.env, the CNI conflist, the agent's settings, flannel's devices, addresses, routes, "
    "neighbours and FDB entries, flannel's iptables chains and nft tables, the CNI plugin's "
    "state, the agent's systemd unit and the last 2000 lines of its journal, and the versions "
    "of the kernel, pyflannel, Python, pyroute2, iptables and nft. No secret goes in: the etcd "
    "password, the kubeconfig's credentials and private keys are replaced by <redacted>. A "
    "part that cannot be collected is named in the bundle (errors.txt, manifest.json) and the "
    "rest is written. The agent's flags resolve as for pyflannel status. Exit status: 0 all "
    "collected, 1 written with some part missing, 2 not written."
)
EXIT_COMPLETE = 0
EXIT_PARTIAL = 1
EXIT_ERROR = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    status.add_node_arguments(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the bundle (mode 0600): a file, a directory to put it in, or - "
        "for standard output; default pyflannel-bundle-<node>-<UTC time>.tar.gz in the "
        "current directory",
    )


def node_name(environ: Mapping[str, str]) -> str:
    """The node's name as the agent knows it (NODE_NAME), else the host's, safe in a file
    name."""
    name = environ.get("NODE_NAME") or socket.gethostname() or "node"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def bundle_stem(node: str, created: float) -> str:
    return f"pyflannel-bundle-{node}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(created))}"


def output_path(output: str | None, stem: str) -> str:
    """Where the archive goes: `output`, or the default name in it when it is a directory
    (the current one when not given)."""
    if output is None or os.path.isdir(output):
        return os.path.join(output or ".", f"{stem}.tar.gz")
    return output


def _env_file(args: argparse.Namespace) -> str | None:
    if args.agent_env is not None:
        return args.agent_env or None
    return AGENT_ENV_FILE if os.path.exists(AGENT_ENV_FILE) else None


def _status(args: argparse.Namespace, environ: Mapping[str, str]) -> Files:
    from pyflannel_runtime.ops.bundle import CollectorFailed

    checked = argparse.Namespace(**{**vars(args), "netns": None, "leases_only": False})
    try:
        found = status.collect(checked, environ)
    except status.StatusFailed as err:
        raise CollectorFailed(str(err)) from None
    text = status.render_json(
        found.report, found.agent, found.pods, found.offload, found.lease_note
    )
    return {"status.json": text.encode()}


def _ipam(args: argparse.Namespace) -> Files:
    from pyflannel_runtime.cli import ipam
    from pyflannel_runtime.ipam.node import IpamError
    from pyflannel_runtime.ops.bundle import CollectorFailed

    asked = argparse.Namespace(conflist=args.conflist, valid_containers=None)
    try:
        node = ipam.node_ipam(asked)
    except IpamError as err:
        raise CollectorFailed(str(err)) from None
    return {"ipam.json": ipam.render_json(node).encode()}


def _failing(name: str, error: str) -> Collector:
    from pyflannel_runtime.ops.bundle import Collector, CollectorFailed

    def fail() -> Files:
        raise CollectorFailed(error)

    return Collector(name, "the agent's settings (flags, FLANNELD_* variables, its file)", fail)


def collectors(
    args: argparse.Namespace, environ: Mapping[str, str]
) -> tuple[list[Collector], NodeSettings]:
    """Everything the bundle collects, and the node's settings. Settings the agent would
    refuse are a failed part of their own: the rest is collected with the defaults."""
    from pyflannel_runtime.ops.bundle import LARGE_LIMIT, Collector
    from pyflannel_runtime.ops.bundle_node import NodeSettings, node_collectors

    parts: list[Collector] = []
    try:
        env = agent_environment(args, environ)
        opts = agent_options(args, status.AGENT_FLAGS, env)
    except AgentFlagsError as err:
        parts.append(_failing("settings", str(err)))
        env, opts = dict(environ), Options()
    settings = NodeSettings(opts, args.conflist, _env_file(args), args.timeout, env)
    parts += [
        Collector("status", "pyflannel status -o json", lambda: _status(args, environ),
                  timeout=args.timeout * 4 + 10, limit=LARGE_LIMIT),
        Collector("ipam", "pyflannel ipam -o json", lambda: _ipam(args), timeout=150.0,
                  limit=LARGE_LIMIT),
        *node_collectors(settings),
    ]  # fmt: skip
    return parts, settings


def command(args: argparse.Namespace) -> int:
    from pyflannel_runtime.fsutil import os_error_text
    from pyflannel_runtime.ops.bundle import Record, archive, collect, write_bundle
    from pyflannel_runtime.ops.node_secrets import known_secrets

    # The lease stores log retries and TLS warnings; a failure is recorded in the bundle.
    logging.basicConfig(level=logging.CRITICAL, format="%(message)s")
    to_stdout = args.output == "-"
    if to_stdout and sys.stdout.isatty():
        print("pyflannel bundle: not writing a .tar.gz to a terminal; redirect it", file=sys.stderr)
        return EXIT_ERROR
    created = time.time()
    parts, settings = collectors(args, os.environ)

    def said(record: Record) -> None:
        if record.failed:
            print(f"pyflannel bundle: {record.name}: {record.status}: {record.error}",
                  file=sys.stderr, flush=True)  # fmt: skip

    found = collect(parts, known_secrets(settings), progress=said)
    node = node_name(settings.environ)
    stem = bundle_stem(node, created)
    data = archive(found, stem, node, created)
    if to_stdout:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        where = "standard output"
    else:
        path = output_path(args.output, stem)
        try:
            write_bundle(path, data)
        except OSError as err:
            print(f"pyflannel bundle: cannot write {path}: {os_error_text(err)}", file=sys.stderr)
            return EXIT_ERROR
        where = path
    failed = [record.name for record in found.records if record.failed]
    missing = f"; missing: {', '.join(failed)} (see errors.txt)" if failed else ""
    print(f"pyflannel bundle: wrote {where} ({len(found.files)} files){missing}", file=sys.stderr)
    return EXIT_PARTIAL if failed else EXIT_COMPLETE
