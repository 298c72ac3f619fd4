"""One node's pod addresses: who holds which, how many are free, which look leaked.

The flannel network is read from the node's CNI conflist the way a runtime would run it, and
releasing goes through the CNI plugin's own GC code (``pyflannel_runtime/cni/gc.py``), so the
operator's view and the runtime's GC agree on what is leaked.

An allocation looks leaked when no flannel state file backs it (no DEL will ever release it:
flannel's DEL replays that file) or when no container runtime knows its container any more.
Only the second kind is released: an allocation of a container the runtime still knows is
never touched.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.cni.gc import GcReport, GcTarget, collect_garbage, saved_container_ids
from pyflannel_runtime.cni.hostlocal_store import Allocation, address_pool, read_allocations
from pyflannel_runtime.cni.plugin_config import NetConfError
from pyflannel_runtime.gojson.core import GoJSONError, decode
from pyflannel_runtime.gojson.encode import marshal
from pyflannel_runtime.ipam.runtimes import RuntimeView, live_containers

DEFAULT_CONFLIST = "/etc/cni/net.d/10-flannel.conflist"
DEFAULT_CNI_PATH = "/opt/cni/bin"
_MAX_CONFLIST_SIZE = 1 << 20


class IpamError(PyflannelError):
    """The node's flannel network cannot be read; ``str()`` says what and why."""


# --- the pure part ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyUsage:
    """One address family of the node's subnet: host-local's pool and how much of it is held."""

    version: int
    subnet: str
    capacity: int
    used: int
    leaked: int  # of ``used``, how many look leaked

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.used)


def usage_text(usage: FamilyUsage) -> str:
    """One family's usage as `pyflannel ipam` and `pyflannel status` print it."""
    leaked = f", {usage.leaked} of them look leaked" if usage.leaked else ""
    return (
        f"IPv{usage.version} {usage.subnet}: {usage.used} of {usage.capacity} addresses in use, "
        f"{usage.free} free{leaked}"
    )


def usage_dict(usage: FamilyUsage) -> dict[str, Any]:
    return {
        "family": f"ipv{usage.version}",
        "subnet": usage.subnet,
        "capacity": usage.capacity,
        "used": usage.used,
        "free": usage.free,
        "leaked": usage.leaked,
    }


@dataclass(frozen=True)
class AllocationRow:
    allocation: Allocation
    state_file: bool  # a flannel state file backs it
    known: bool | None  # the runtime knows its container; None: nobody could tell

    @property
    def releasable(self) -> bool:
        """GC releases it: the container is gone."""
        return self.known is False

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why it looks leaked; empty when it does not."""
        found = []
        if not self.state_file:
            found.append("no flannel state file")
        if self.known is False:
            found.append("container unknown to the runtime")
        return tuple(found)


def classify(
    allocations: Sequence[Allocation], saved: Collection[str], known: frozenset[str] | None
) -> list[AllocationRow]:
    return [
        AllocationRow(
            a,
            state_file=a.container_id in saved,
            known=None if known is None else a.container_id in known,
        )
        for a in allocations
    ]


def ipam_usage(
    subnets: Sequence[str],
    allocations: Sequence[Allocation],
    leaked: Collection[Allocation] = (),
) -> list[FamilyUsage]:
    """Per subnet (one per family, masked CIDR text as in subnet.env): host-local's pool size,
    the allocations inside it and how many of those look leaked. Pure: ``pyflannel status`` and
    the Ansible module call it with what they read."""
    usage = []
    for subnet in subnets:
        pool = address_pool(subnet)
        inside = [a for a in allocations if pool.contains(a.address)]
        usage.append(
            FamilyUsage(
                version=pool.version,
                subnet=subnet,
                capacity=pool.capacity,
                used=len(inside),
                leaked=sum(1 for a in inside if a in leaked),
            )
        )
    return usage


# --- reading the node ---------------------------------------------------------------------------


def load_target(conflist: str) -> GcTarget:
    """The flannel plugin of a conflist, with ``name`` and ``cniVersion`` set as libcni does."""
    try:
        with open(conflist, "rb") as handle:
            data = handle.read(_MAX_CONFLIST_SIZE + 1)
    except OSError as err:
        raise IpamError(f"cannot read {conflist}: {err.strerror or err}") from None
    if len(data) > _MAX_CONFLIST_SIZE:
        raise IpamError(f"{conflist} is larger than {_MAX_CONFLIST_SIZE} bytes")
    try:
        parsed = decode(data)  # as libcni reads it, within the gojson core's limits
    except GoJSONError as err:
        raise IpamError(f"{conflist} is not JSON: {err}") from None
    plugins = parsed.get("plugins") if isinstance(parsed, dict) else None
    flannel = [p for p in plugins or [] if isinstance(p, dict) and p.get("type") == "flannel"]
    if not flannel:
        raise IpamError(f"{conflist} has no plugin of type flannel")
    conf = dict(flannel[0], name=parsed.get("name"), cniVersion=parsed.get("cniVersion"))
    try:
        return GcTarget.from_stdin(marshal(conf))
    except NetConfError as err:
        raise IpamError(f"{conflist}: {err}") from None


@dataclass(frozen=True)
class NodeIpam:
    target: GcTarget
    runtime: RuntimeView
    subnets: tuple[str, ...]  # from subnet.env; empty when it cannot be read
    usage: tuple[FamilyUsage, ...]
    rows: tuple[AllocationRow, ...]
    stale_state_files: tuple[str, ...]  # containers gone, state file left, no address held
    problems: tuple[str, ...] = field(default=())

    @property
    def leaked(self) -> list[AllocationRow]:
        return [row for row in self.rows if row.reasons]

    @property
    def releasable(self) -> list[AllocationRow]:
        return [row for row in self.rows if row.releasable]


def _subnets(target: GcTarget) -> tuple[tuple[str, ...], list[str]]:
    from pyflannel_runtime.cni.commands import load_subnet_env

    try:
        env = load_subnet_env(target.conf.subnet_file)
    except ValueError as err:
        return (), [f"the node's subnet is unknown: {err}"]
    return tuple(s for s in (env.subnet, env.ipv6_subnet) if s is not None), []


def inspect_node(target: GcTarget, runtime: RuntimeView) -> NodeIpam:
    problems = list(runtime.problems)
    subnets, unknown = _subnets(target)
    problems += unknown
    allocations: list[Allocation] = []
    if target.hostlocal_dir is None:
        problems.append("the delegate's IPAM is not host-local: its allocations are not read")
    else:
        allocations, unreadable = read_allocations(target.hostlocal_dir)
        problems += unreadable
    saved = saved_container_ids(target.state_dir)
    rows = classify(allocations, saved, runtime.containers)
    holders = {a.container_id for a in allocations}
    known = runtime.containers
    stale = [c for c in saved if known is not None and c not in known and c not in holders]
    leaked = {row.allocation for row in rows if row.reasons}
    return NodeIpam(
        target=target,
        runtime=runtime,
        subnets=subnets,
        usage=tuple(ipam_usage(subnets, allocations, leaked)),
        rows=tuple(rows),
        stale_state_files=tuple(stale),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class PodAddresses:
    """A node's pod address usage as far as its own files tell, or why they could not be read."""

    usage: tuple[FamilyUsage, ...]
    unchecked: str | None = None  # the reason nothing was counted


def pod_addresses(conflist: str) -> PodAddresses:
    """This node's usage without asking the container runtimes (slow, and `pyflannel ipam`'s
    job): an allocation looks leaked only when no flannel state file backs it."""
    try:
        node = inspect_node(load_target(conflist), RuntimeView((), None))
    except IpamError as err:
        return PodAddresses((), str(err))
    if not node.usage:
        return PodAddresses((), "; ".join(node.problems) or "the node has no pod subnet")
    return PodAddresses(node.usage)


def release_leaks(
    node: NodeIpam, cni_path: str, environ: Mapping[str, str], dry_run: bool = False
) -> tuple[GcReport, str]:
    """GC with the runtime's containers as the valid ones; the report and the plugins' log."""
    if node.runtime.containers is None:
        raise IpamError(
            "cannot tell which containers are gone: "
            + "; ".join(node.runtime.problems or ("no runtime answered",))
            + "; pass the IDs of the node's live containers (--valid-containers)"
        )
    env = dict(environ, CNI_PATH=cni_path)
    log = io.BytesIO()
    report = collect_garbage(node.target, node.runtime.containers, env, log, dry_run=dry_run)
    return report, log.getvalue().decode("utf-8", errors="replace")


# --- the report as data -------------------------------------------------------------------------


def report_dict(
    node: NodeIpam, gc: GcReport | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """What ``--output json`` prints and the Ansible module returns."""
    result: dict[str, Any] = {
        "network": node.target.network,
        "subnet_file": node.target.conf.subnet_file,
        "state_dir": node.target.state_dir,
        "store": node.target.hostlocal_dir,
        "subnets": list(node.subnets),
        "usage": [usage_dict(u) for u in node.usage],
        "runtime": {
            "sources": list(node.runtime.sources),
            "containers": None if node.runtime.containers is None else len(node.runtime.containers),
        },
        "allocations": [
            {
                "address": row.allocation.address,
                "family": f"ipv{row.allocation.version}",
                "container_id": row.allocation.container_id,
                "ifname": row.allocation.ifname,
                "state_file": row.state_file,
                "container_known": row.known,
                "leaked": bool(row.reasons),
                "reasons": list(row.reasons),
                "releasable": row.releasable,
            }
            for row in node.rows
        ],
        "leaked": len(node.leaked),
        "stale_state_files": list(node.stale_state_files),
        "problems": list(node.problems),
    }
    if gc is not None:
        result["gc"] = {
            "dry_run": dry_run,
            "released": [
                {
                    "container_id": r.container_id,
                    "ifname": r.ifname,
                    "addresses": list(r.addresses),
                    "how": "replayed DEL" if r.replay else "host-local DEL",
                }
                for r in gc.released
            ],
            "errors": list(gc.errors),
        }
    return result


def exhaustion_warnings(usage: Sequence[FamilyUsage], free_percent: int) -> list[str]:
    """A warning per family whose free addresses are below ``free_percent`` of the pool."""
    return [
        f"pod subnet {u.subnet} is nearly exhausted: {u.free} of {u.capacity} addresses free"
        + (f", and {u.leaked} of the {u.used} in use look leaked" if u.leaked else "")
        for u in usage
        if u.free * 100 < u.capacity * free_percent
    ]


def manage_leaks(
    conflist: str,
    valid_containers: Collection[str] | None,
    cni_path: str,
    environ: Mapping[str, str],
    check_mode: bool,
    free_percent: int = 0,
) -> dict[str, Any]:
    """What the Ansible module does on a node: the report, and the leaks released (only said,
    in check mode). ``changed`` is whether something was (or would be) released; with the
    runtimes unable to say which containers are gone, check mode predicts nothing and a real
    run raises IpamError. The report shows the node after the release."""
    target = load_target(conflist)
    node = inspect_node(target, live_containers(valid_containers, environ))
    gc = None
    if node.runtime.containers is not None or not check_mode:
        gc, _ = release_leaks(node, cni_path, environ, dry_run=check_mode)
        if not check_mode and gc.released:
            node = inspect_node(target, node.runtime)
    result = report_dict(node, gc, dry_run=check_mode)
    result["changed"] = bool(gc is not None and gc.released)
    result["warnings"] = exhaustion_warnings(node.usage, free_percent)
    return result
