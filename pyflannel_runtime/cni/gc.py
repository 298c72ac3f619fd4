"""CNI GC for the flannel plugin: release every attachment the runtime no longer knows.

The runtime passes the attachments that are still valid (``cni.dev/valid-attachments``). Every
other container of this network is released in two passes:

1. A container with a saved delegate config (``<dataDir>/<containerID>``) gets flannel's own
   DEL, replayed without a network namespace: the saved config goes to the delegate, so bridge
   and host-local clean up as on a normal DEL, and the file is removed.
2. host-local allocations whose container is not valid and has no saved config (a DEL that
   never came, a config lost, a failed first pass) are released through host-local's own DEL
   for that container ID and interface name, so host-local's lock and file format stay its
   business. host-local releases by container ID and interface name (``disk.Store.ReleaseByID``)
   and only needs a valid range, so each call gets the narrowest range host-local accepts around
   the addresses it releases: that works when subnet.env is gone or names another subnet, which
   is when leftovers of an older subnet are found.

flannel keys its saved configs by container ID alone, so validity is judged by container ID:
an allocation of a valid container is never touched, whatever its interface name. Nothing
valid is touched, a second GC finds nothing to do, and a failure for one container is reported
without stopping the others. Without the list of valid attachments nothing is released.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from pyflannel_runtime.cni.hostlocal_store import (
    Allocation,
    address_text,
    parse_address,
    read_allocations,
    store_dir,
)
from pyflannel_runtime.cni.plugin_config import FlannelNetConf, NetConfError, parse_netconf
from pyflannel_runtime.cni.skel import ERR_INTERNAL, CniError
from pyflannel_runtime.gojson.core import GoJSONError, decode, fold_fields, go_kind
from pyflannel_runtime.gojson.encode import marshal

DEFAULT_IFNAME = "eth0"  # what kubelet's runtimes and podman name the pod's interface
VALID_ATTACHMENTS = "cni.dev/valid-attachments"
# libcni sends the list under this name too, as the spec first (wrongly) named it
_ATTACHMENTS_ALIAS = "cni.dev/attachments"
_NARROWEST_RANGE = {4: 30, 6: 126}  # host-local refuses anything smaller
_WORKERS = 4


@dataclass(frozen=True)
class GcTarget:
    """Where one node keeps the state of one flannel network."""

    network: str
    state_dir: str  # flannel's saved delegate configs
    hostlocal_dir: str | None  # None when the delegate's IPAM is not host-local
    ipam_data_dir: str | None  # host-local's dataDir as configured, for its DEL
    conf: FlannelNetConf
    stdin: bytes  # the flannel network config, as DEL gets it

    @classmethod
    def from_stdin(cls, stdin: bytes) -> GcTarget:
        conf = parse_netconf(stdin)
        ipam = conf.ipam or {}
        data_dir = ipam.get("dataDir")
        data_dir = data_dir if isinstance(data_dir, str) and data_dir else None
        host_local = ipam.get("type", "host-local") == "host-local"
        return cls(
            network=conf.name,
            state_dir=conf.data_dir,
            hostlocal_dir=store_dir(data_dir, conf.name) if host_local else None,
            ipam_data_dir=data_dir,
            conf=conf,
            stdin=stdin,
        )


@dataclass(frozen=True)
class Release:
    """One container's interface to release, and the addresses host-local holds for it."""

    container_id: str
    ifname: str
    addresses: tuple[str, ...]
    replay: bool  # True: flannel's DEL with the saved config; False: host-local's DEL


@dataclass
class GcReport:
    released: list[Release] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one line per failure
    problems: list[str] = field(default_factory=list)  # what could not be read

    @property
    def ok(self) -> bool:
        return not self.errors


# --- deciding (pure) ----------------------------------------------------------------------------


def saved_container_ids(state_dir: str) -> list[str]:
    """The containers with a saved delegate config (atomic-write temp files start with a dot)."""
    try:
        names = os.listdir(state_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if not n.startswith("."))


def leaked(
    allocations: Sequence[Allocation], valid: Collection[str], saved: Collection[str]
) -> list[Allocation]:
    """Allocations no DEL will ever release: an invalid container, and no saved config."""
    return [a for a in allocations if a.container_id not in valid and a.container_id not in saved]


def _by_interface(allocations: Sequence[Allocation]) -> dict[tuple[str, str], list[str]]:
    """(container ID, ifname) -> the addresses host-local holds for that interface."""
    held: dict[tuple[str, str], list[str]] = {}
    for allocation in allocations:
        key = (allocation.container_id, allocation.ifname)
        held.setdefault(key, []).append(allocation.address)
    return held


def plan_gc(
    valid: Collection[str], saved: Collection[str], allocations: Sequence[Allocation]
) -> list[Release]:
    """What GC releases: first the replays (by container ID), then host-local's leftovers."""
    held = _by_interface(allocations)
    plan: list[Release] = []
    for container_id in saved:
        if container_id in valid:
            continue
        ifnames = sorted(i for c, i in held if c == container_id)
        ifname = (ifnames[0] if ifnames else "") or DEFAULT_IFNAME
        addresses = tuple(a for (c, _), found in held.items() if c == container_id for a in found)
        plan.append(Release(container_id, ifname, addresses, replay=True))
    orphans = _by_interface(leaked(allocations, valid, saved))
    for (container_id, ifname), found in sorted(orphans.items()):
        plan.append(Release(container_id, ifname, tuple(found), replay=False))
    return plan


def narrowest_ranges(addresses: Sequence[str]) -> list[list[dict[str, str]]]:
    """One host-local range set per address family, each the smallest subnet around an address."""
    ranges: dict[int, str] = {}
    for address in addresses:
        parsed = parse_address(address)
        if parsed is None or parsed[0] in ranges:
            continue
        version, value = parsed
        length = _NARROWEST_RANGE[version]
        host_bits = (32 if version == 4 else 128) - length
        network = address_text(version, value >> host_bits << host_bits)
        ranges[version] = f"{network}/{length}"
    return [[{"subnet": ranges[v]}] for v in sorted(ranges)]


def valid_container_ids(stdin: bytes) -> tuple[frozenset[str], list[Any]] | None:
    """The valid containers' IDs and the attachments as given; None when the list is absent."""
    try:
        conf = decode(stdin)
    except GoJSONError as err:
        raise NetConfError(f"failed to load netconf: {err}") from None
    if not isinstance(conf, dict):
        return None
    fields = fold_fields(conf.items(), (VALID_ATTACHMENTS, _ATTACHMENTS_ALIAS))
    attachments = fields.get(VALID_ATTACHMENTS, fields.get(_ATTACHMENTS_ALIAS))
    if attachments is None:
        return None
    if not isinstance(attachments, list):
        raise NetConfError(
            f"failed to load netconf: json: cannot unmarshal {go_kind(attachments)}"
            " into Go struct field NetConf.cni.dev/valid-attachments of type []types.GCAttachment"
        )
    ids: set[str] = set()
    for attachment in attachments:
        if not isinstance(attachment, dict):
            raise NetConfError(
                f"failed to load netconf: json: cannot unmarshal {go_kind(attachment)}"
                " into Go struct field NetConf.cni.dev/valid-attachments of type types.GCAttachment"
            )
        known = fold_fields(attachment.items(), ("containerID", "ifname"))
        for name, value in known.items():
            if value is not None and not isinstance(value, str):
                raise NetConfError(
                    f"failed to load netconf: json: cannot unmarshal {go_kind(value)} into Go"
                    f" struct field GCAttachment.cni.dev/valid-attachments.{name} of type string"
                )
        if known.get("containerID"):
            ids.add(known["containerID"])
    return frozenset(ids), attachments


# --- releasing ----------------------------------------------------------------------------------


def _environ(base: Mapping[str, str], container_id: str, ifname: str) -> dict[str, str]:
    """A DEL's environment: no network namespace, which GC may assume gone."""
    env = {k: v for k, v in base.items() if k not in ("CNI_NETNS", "CNI_COMMAND")}
    env["CNI_CONTAINERID"] = container_id
    env["CNI_IFNAME"] = ifname or DEFAULT_IFNAME
    return env


class _HostLocal:
    """host-local's DEL, with the newest CNI version it accepts (asked once)."""

    def __init__(self, target: GcTarget, environ: Mapping[str, str]) -> None:
        self._target = target
        self._environ = environ
        self._plugin: tuple[str, str] | None = None

    def _resolve(self) -> tuple[str, str]:
        if self._plugin is None:
            from pyflannel_runtime.cni.forward import newest_version, supported_versions
            from pyflannel_runtime.cni.invoke import InvokeError, find_in_path

            try:
                path = find_in_path("host-local", self._environ.get("CNI_PATH", ""))
            except InvokeError as err:
                raise CniError(0, str(err)) from None
            version = newest_version(supported_versions(path, self._environ))
            if version is None:
                raise CniError(0, f"{path} names no CNI version this plugin speaks")
            self._plugin = path, version
        return self._plugin

    def release(self, release: Release) -> bytes:
        from pyflannel_runtime.cni.invoke import exec_plugin

        path, version = self._resolve()
        ipam: dict[str, Any] = {"type": "host-local", "ranges": narrowest_ranges(release.addresses)}
        if self._target.ipam_data_dir is not None:
            ipam["dataDir"] = self._target.ipam_data_dir
        config = marshal({"cniVersion": version, "name": self._target.network, "ipam": ipam})
        env = _environ(self._environ, release.container_id, release.ifname)
        return exec_plugin("DEL", path, config, env)[1]


def _replay(target: GcTarget, release: Release, environ: Mapping[str, str]) -> bytes:
    """flannel's DEL for one container; a saved config DEL cannot parse is dropped (by DEL
    itself) and reported."""
    from pyflannel_runtime.cni.commands import cmd_del

    captured = io.BytesIO()
    env = _environ(environ, release.container_id, release.ifname)
    try:
        dropped = cmd_del(env, target.stdin, captured)
    except CniError as err:
        raise _Failed(captured.getvalue(), err.msg or str(err)) from None
    if dropped is not None:
        raise _Failed(captured.getvalue(), f"saved config dropped: {dropped}")
    return captured.getvalue()


class _Failed(Exception):
    def __init__(self, output: bytes, reason: str) -> None:
        super().__init__(reason)
        self.output = output
        self.reason = reason


def _describe(release: Release) -> str:
    held = ", ".join(release.addresses) or "no address"
    return f"container {release.container_id} ({release.ifname or DEFAULT_IFNAME}, {held})"


def collect_garbage(
    target: GcTarget,
    valid: Collection[str],
    environ: Mapping[str, str],
    log: BinaryIO,
    dry_run: bool = False,
) -> GcReport:
    """Release what ``valid`` no longer covers; with ``dry_run``, only say what that is."""
    report = GcReport()
    try:
        saved = saved_container_ids(target.state_dir)
    except OSError as err:  # which containers have a saved config decides everything else
        report.errors.append(f"cannot list {target.state_dir}: {err.strerror or err}")
        return report
    allocations = _allocations(target, report)
    plan = plan_gc(valid, saved, allocations)
    if dry_run:
        report.released = list(plan)
        return report
    replays = [r for r in plan if r.replay]
    _run_pass(report, replays, lambda r: _replay(target, r, environ), log)
    if target.hostlocal_dir is None:
        return report
    # the second pass sees what the replays left: failures, a container's other interfaces
    saved = [c for c in saved if os.path.exists(os.path.join(target.state_dir, c))]
    leftovers = plan_gc(valid, saved, _allocations(target, report))
    _run_pass(report, leftovers, _HostLocal(target, environ).release, log)
    still = {a.address for a in _allocations(target, report)}
    for release in list(report.released):
        kept = [a for a in release.addresses if a in still]
        if kept:
            report.released.remove(release)
            report.errors.append(f"{_describe(release)}: still allocated: {', '.join(kept)}")
    report.problems = sorted(set(report.problems))
    return report


def _run_pass(
    report: GcReport,
    releases: Sequence[Release],
    action: Callable[[Release], bytes],
    log: BinaryIO,
) -> None:
    """``action`` for every release, a few at once (each mostly waits for the plugins it runs
    and host-local's lock; no two touch the same container); reported in plan order."""
    from concurrent.futures import ThreadPoolExecutor

    def attempt(release: Release) -> tuple[bytes, str | None]:
        try:
            return action(release), None
        except _Failed as failed:
            return failed.output, failed.reason
        except CniError as err:
            return b"", err.msg or str(err)

    if not releases:
        return
    with ThreadPoolExecutor(max_workers=min(_WORKERS, len(releases))) as pool:
        outcomes = list(pool.map(attempt, releases))
    for release, (output, error) in zip(releases, outcomes, strict=True):
        log.write(output)
        how = "DEL replayed from its saved config" if release.replay else "host-local DEL"
        if error is not None:
            report.errors.append(f"{_describe(release)}: {how}: {error}")
            continue
        report.released.append(release)
        log.write(f"GC released {_describe(release)}: {how}\n".encode())


def _allocations(target: GcTarget, report: GcReport) -> list[Allocation]:
    if target.hostlocal_dir is None:
        return []
    allocations, problems = read_allocations(target.hostlocal_dir)
    report.problems += problems
    return allocations


def cmd_gc(environ: Mapping[str, str], stdin: bytes, stderr: BinaryIO) -> None:
    """The plugin's GC verb: raises CniError listing every failure, after trying them all."""
    try:
        target = GcTarget.from_stdin(stdin)
        given = valid_container_ids(stdin)
    except NetConfError as err:
        raise CniError(ERR_INTERNAL, f"failed to load flannel netconf file: {err}") from None
    if given is None:
        stderr.write(f"GC without {VALID_ATTACHMENTS}: nothing is released\n".encode())
        return
    valid, attachments = given
    report = collect_garbage(target, valid, environ, stderr)
    for problem in report.problems:
        stderr.write(f"GC: {problem}\n".encode())
    errors = list(report.errors)
    try:
        _forward(target, environ, attachments)
    except CniError as err:
        errors.append(f"delegate GC: {err.msg}")
    if errors:
        raise CniError(
            ERR_INTERNAL,
            f"GC of network {target.network}: {len(errors)} failed: " + "; ".join(errors),
        )


def _forward(target: GcTarget, environ: Mapping[str, str], attachments: list[Any]) -> None:
    """GC for the delegate too, when it speaks CNI 1.1.0 and subnet.env says what it is."""
    from pyflannel_runtime.cni.commands import load_subnet_env
    from pyflannel_runtime.cni.forward import forward_to_delegate

    try:
        subnet_env = load_subnet_env(target.conf.subnet_file)
    except ValueError:
        return  # no delegate config to build; the passes above did not need one
    forward_to_delegate("GC", target.conf, subnet_env, environ, {VALID_ATTACHMENTS: attachments})
