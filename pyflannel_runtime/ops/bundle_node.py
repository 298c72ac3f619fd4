"""What a diagnostics bundle collects on a pyflannel node, and the secrets it must never hold.

`node_collectors` reads the agent's files (subnet.env, net-conf.json on the Kubernetes
datastore, the CNI conflist, the agent's environment file), the leases and the network config
through the agent's own lease store (`ops.leases`), flannel's part of the kernel
(`ops.flannel_kernel`), flannel's iptables chains and nft tables, the CNI plugin's state (its
saved configs and host-local's store), the agent's systemd unit and the end of its journal,
and the versions of what runs. ``pyflannel bundle`` adds ``pyflannel status`` and
``pyflannel ipam`` (pyflannel_runtime/cli/bundle.py).

What the node holds that no bundle may is in `ops.node_secrets`.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_network
from typing import Any

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.flags import Options
from pyflannel_runtime.firewall.rules import FORWARD_CHAIN, MASQ_CHAIN, nft_owned_tables, nft_table
from pyflannel_runtime.ipam.node import IpamError, load_target
from pyflannel_runtime.ops.agent_settings import lease_store
from pyflannel_runtime.ops.bundle import (
    DEFAULT_LIMIT,
    LARGE_LIMIT,
    Collector,
    CollectorFailed,
    Files,
    Skipped,
)
from pyflannel_runtime.ops.flannel_kernel import DEFAULT_BRIDGE, IPNetwork, flannel_kernel
from pyflannel_runtime.ops.leases import lease_fields, leases_report, usage_fields
from pyflannel_runtime.ops.verify import LeaseStoreError, list_leases, store_kind
from pyflannel_runtime.wire.netconf import encode_config
from pyflannel_runtime.wire.subnet_env import SubnetEnvError, parse_cni_subnet_env

UNIT = "pyflanneld"
JOURNAL_LINES = 2000
# Read beyond a file's limit, so that the bundle cuts it at a whole line.
_SLACK = 64 * 1024
_JOURNAL_LIMIT = 8 << 20
_STATE_FILES = 4096  # per CNI state directory
_STATE_FILE_LIMIT = 64 * 1024
_COMMAND_TIMEOUT = 20.0
_STDERR_LIMIT = 4096


@dataclass(frozen=True)
class NodeSettings:
    """Where the node's agent keeps its settings and files, as its flags say."""

    opts: Options
    conflist: str
    env_file: str | None = None  # the agent's environment file; None: it has none
    timeout: float = 10.0  # for each request to the lease store
    environ: Mapping[str, str] = field(default_factory=dict)


# --- commands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    returncode: int
    stdout: bytes
    stderr: bytes
    cut: bool  # stdout went past its window and the command was stopped


def run_bounded(
    argv: Sequence[str],
    timeout: float = _COMMAND_TIMEOUT,
    limit: int = DEFAULT_LIMIT,
    keep_tail: bool = False,
) -> Output:
    """`argv`'s output, at most `limit` bytes of it and a little more (its first, or with
    `keep_tail` its last); a command still running after `timeout` seconds is killed
    (CollectorFailed), and so is one whose output goes past its window when the first bytes
    are kept. Skipped when the program is not installed."""
    program = shutil.which(argv[0])
    if program is None:
        raise Skipped(f"{argv[0]} is not installed")
    window = limit + _SLACK
    process = subprocess.Popen(
        [program, *argv[1:]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": "", "PAGER": "cat"},
    )
    assert process.stdout is not None and process.stderr is not None
    stdout, stderr, cut = bytearray(), bytearray(), False
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, stdout)
            selector.register(process.stderr, selectors.EVENT_READ, stderr)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectorFailed(f"{' '.join(argv)}: still running after {timeout:g}s")
                for key, _events in selector.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffer: bytearray = key.data
                    buffer += chunk
                    room = window if buffer is stdout else _STDERR_LIMIT
                    if len(buffer) <= room:
                        continue
                    if buffer is stdout and keep_tail:
                        del buffer[: len(buffer) - room]
                    else:
                        del buffer[room:]
                        if buffer is stdout and not cut:
                            cut = True
                            process.kill()
            returncode = process.wait(max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        raise CollectorFailed(f"{' '.join(argv)}: still running after {timeout:g}s") from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()
    return Output(returncode, bytes(stdout), bytes(stderr), cut)


def command_output(
    argv: Sequence[str],
    timeout: float = _COMMAND_TIMEOUT,
    limit: int = DEFAULT_LIMIT,
    keep_tail: bool = False,
) -> bytes:
    """`argv`'s standard output; CollectorFailed when it exits non-zero (with its error)."""
    done = run_bounded(argv, timeout, limit, keep_tail)
    if done.returncode != 0 and not done.cut:
        said = (
            done.stderr.decode("utf-8", errors="replace").strip()
            or done.stdout[-300:].decode("utf-8", errors="replace").strip()
        )
        raise CollectorFailed(f"{' '.join(argv)} exited {done.returncode}: {said}")
    return done.stdout


# --- files ------------------------------------------------------------------------------------


def read_head(path: str, limit: int = DEFAULT_LIMIT) -> bytes:
    """The first `limit` bytes of a file and a little more; Skipped when it does not exist,
    CollectorFailed when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + _SLACK)
    except FileNotFoundError:
        raise Skipped(f"{path} does not exist") from None
    except OSError as err:
        raise CollectorFailed(f"{path}: {err.strerror or err}") from None


def _file(name: str, what: str, path: str, bundle_path: str) -> Collector:
    return Collector(name, f"read {path} ({what})", lambda: {bundle_path: read_head(path)})


def directory_files(directory: str, prefix: str) -> Files:
    """The regular files of a directory (not below it), each up to a limit, by name under
    `prefix`: a CNI state directory holds one small file per container or address."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise CollectorFailed(f"{directory}: {err.strerror or err}") from None
    files: dict[str, bytes] = {}
    for entry in entries:
        if len(files) >= _STATE_FILES:
            raise CollectorFailed(f"{directory}: more than {_STATE_FILES} files; the first kept")
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            with open(entry.path, "rb") as handle:
                files[f"{prefix}/{entry.name}"] = handle.read(_STATE_FILE_LIMIT)
        except OSError:
            continue  # gone meanwhile (a container's DEL)
    return files


# --- what the node holds ----------------------------------------------------------------------


def pod_networks(subnet_file: str) -> list[IPNetwork]:
    """The pod networks subnet.env names (none when it cannot be read)."""
    try:
        with open(subnet_file, encoding="utf-8", errors="replace") as handle:
            env = parse_cni_subnet_env(handle.read(DEFAULT_LIMIT), subnet_file)
    except (OSError, SubnetEnvError):
        return []
    return [ip_network(n) for n in (*env.networks, *env.ipv6_networks)]


def _kernel(settings: NodeSettings) -> Files:
    bridges = {DEFAULT_BRIDGE}
    try:
        delegate = load_target(settings.conflist).conf.delegate or {}
    except IpamError:
        delegate = {}
    if isinstance(delegate.get("bridge"), str) and delegate["bridge"]:
        bridges.add(delegate["bridge"])
    networks = pod_networks(settings.opts.subnet_file)
    try:
        found = flannel_kernel(networks, sorted(bridges))
    except OSError as err:
        raise CollectorFailed(f"cannot read the kernel over netlink: {err}") from None
    found_networks = {"pod_networks": [str(n) for n in networks], "bridges": sorted(bridges)}
    files = {"kernel/scope.json": _json(found_networks)}
    files.update({f"kernel/{kind}.json": _json(items) for kind, items in found.items()})
    return files


def _leases(settings: NodeSettings) -> Files:
    store = lease_store(settings.opts, settings.timeout)
    try:
        config, listing = asyncio.run(list_leases(store))
    except LeaseStoreError as err:
        raise CollectorFailed(str(err)) from None
    report = leases_report(config, listing, store_kind(store), [])
    leases = {
        "store": report.store,
        "leases": [
            {**lease_fields(row), "value": json.loads(row.lease.attrs.to_json())}
            for row in report.leases
        ],
        "unreadable": [{"name": u.name, "reason": u.reason} for u in report.unreadable],
        "utilisation": [usage_fields(u) for u in report.usage],
        "notes": list(report.notes),
    }
    return {"leases.json": _json(leases), "network-config.json": encode_config(config).encode()}


def flannel_iptables(saved: str) -> str:
    """iptables-save's output cut to flannel's part: a table's header and COMMIT around its
    lines, flannel's chains (FLANNEL-POSTRTG, FLANNEL-FWD) and their rules, every jump into
    them, and the policies of FORWARD and POSTROUTING (a FORWARD policy of DROP stops pods'
    traffic when flannel's forward rules are off)."""
    ours = (MASQ_CHAIN, FORWARD_CHAIN)
    kept: list[str] = []
    table: list[str] = []
    for line in saved.splitlines():
        words = line.split()
        if line.startswith("*"):
            table = [line]
        elif line == "COMMIT":
            if len(table) > 1:
                kept += [*table, line]
            table = []
        elif line.startswith(":") and words:
            chain = words[0][1:]
            if chain in ours or chain in ("FORWARD", "POSTROUTING"):
                table.append(line)
        elif words[:1] == ["-A"] and len(words) > 1:
            jumps = [
                words[i + 1]
                for i, w in enumerate(words[:-1])
                if w in ("-j", "--jump", "-g", "--goto")
            ]
            if words[1] in ours or any(target in ours for target in jumps):
                table.append(line)
    return "".join(f"{line}\n" for line in kept)


def _iptables(save: str) -> Callable[[], Files]:
    def collect() -> Files:
        saved = command_output([save]).decode("utf-8", errors="replace")
        ours = flannel_iptables(saved) or f"# {save} lists none of flannel's chains\n"
        return {f"firewall/{save}.txt": ours.encode()}

    return collect


def _nft() -> Files:
    listed = command_output(["nft", "list", "tables"]).decode("utf-8", errors="replace")
    versions = nft_owned_tables(listed)
    if not versions:
        names = ", ".join(" ".join(nft_table(v)) for v in (4, 6))
        raise Skipped(f"no flannel nft table ({names})")
    text = b"".join(command_output(["nft", "list", "table", *nft_table(v)]) for v in versions)
    return {"firewall/nft.txt": text}


def _cni_state(settings: NodeSettings) -> Files:
    try:
        target = load_target(settings.conflist)
    except IpamError as err:
        raise CollectorFailed(str(err)) from None
    files = dict(directory_files(target.state_dir, "cni/flannel"))
    if target.hostlocal_dir is not None:
        files.update(directory_files(target.hostlocal_dir, f"cni/networks/{target.network}"))
    return files


def _versions() -> Files:
    found: dict[str, Any] = {
        "kernel": f"{platform.system()} {platform.release()} {platform.version()}",
        "machine": platform.machine(),
        "pyflannel": __version__,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "pyroute2": _distribution_version("pyroute2"),
    }
    for tool, argv in (("iptables", ["iptables", "--version"]), ("nft", ["nft", "--version"])):
        try:
            found[tool] = command_output(argv, timeout=5).decode(errors="replace").strip()
        except (Skipped, CollectorFailed) as why:
            found[tool] = None
            found.setdefault("notes", []).append(str(why))
    return {"versions.json": _json(found)}


def _distribution_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=False) + "\n").encode()


def node_collectors(settings: NodeSettings) -> list[Collector]:
    """Everything a bundle collects on the node besides the command line's own reports."""
    opts = settings.opts
    collectors = [
        Collector(
            "leases",
            "the leases and the network config, from "
            + ("the Kubernetes API" if opts.kube_subnet_mgr else f"etcd {opts.etcd_endpoints}"),
            lambda: _leases(settings),
            timeout=settings.timeout * 3 + 5,
            limit=LARGE_LIMIT,
        ),
        _file("subnet.env", "the agent's subnet file", opts.subnet_file, "files/subnet.env"),
    ]
    if opts.kube_subnet_mgr:
        collectors.append(
            _file(
                "net-conf.json", "the network config", opts.net_config_path, "files/net-conf.json"
            )
        )
    collectors.append(
        _file(
            "conflist",
            "the CNI conflist",
            settings.conflist,
            f"files/{os.path.basename(settings.conflist) or 'conflist'}",
        )
    )
    if settings.env_file:
        collectors.append(
            _file("agent env", "the agent's settings", settings.env_file, "files/pyflanneld.env")
        )
    collectors += [
        Collector(
            "kernel",
            "netlink: flannel's devices, their addresses, routes, neighbours and FDB entries, "
            "and the routes to the pod network",
            lambda: _kernel(settings),
            limit=LARGE_LIMIT,
        ),
        Collector("iptables", "iptables-save, flannel's chains", _iptables("iptables-save")),
        Collector("ip6tables", "ip6tables-save, flannel's chains", _iptables("ip6tables-save")),
        Collector("nft", "nft list table, flannel's tables", _nft),
        Collector(
            "cni state",
            "the CNI plugin's saved configs and host-local's store, from " + settings.conflist,
            lambda: _cni_state(settings),
            limit=_STATE_FILE_LIMIT,
        ),
        Collector(
            "unit",
            f"systemctl cat {UNIT}",
            lambda: {"systemd/pyflanneld.service": command_output(["systemctl", "cat", UNIT])},
        ),
        Collector(
            "journal",
            f"journalctl -u {UNIT} -n {JOURNAL_LINES} --no-pager",
            lambda: {
                "systemd/journal.txt": command_output(
                    ["journalctl", "-u", UNIT, "-n", str(JOURNAL_LINES), "--no-pager"],
                    limit=_JOURNAL_LIMIT,
                    keep_tail=True,
                )
            },
            limit=_JOURNAL_LIMIT,
            keep_tail=True,
        ),
        Collector(
            "versions", "the kernel, pyflannel, Python, pyroute2, iptables and nft", _versions
        ),
    ]
    return collectors
