"""Verify a host against the lease store: the runtime API behind ``pyflannel status`` and the
Ansible routes module.

``verify(store, host)`` lists the leases (through the same lease store managers the agent
uses), finds the host's own lease, and compares what the host's agent would program for each
peer (the backends' own per-peer entries, see `backend.registry`) with what the kernel holds,
dumped with the agent's ownership rules. It also checks the flannel devices' MTU and the
host's subnet.env. Nothing is written anywhere; `ops.repair` turns the report into writes.

`compare` is the pure part; everything that reads (the store, the kernel, subnet.env) happens
inside the host's network namespace when one is named, the lease store connection included.
"""

from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Union

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.host import HostDatapath
from pyflannel_runtime.backend.peers import PeerSkipped
from pyflannel_runtime.fsutil import read_small_file
from pyflannel_runtime.netlink.entries import (
    DatapathState,
    Entry,
    Fdb,
    IPAddress,
    IPNetwork,
    Neigh,
    Route,
)
from pyflannel_runtime.subnet.manager import LeaseListing, ListedLease, UnreadableLease
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig
from pyflannel_runtime.wire.subnet_env import (
    SubnetEnvError,
    parse_cni_subnet_env,
    read_previous_subnets,
)

if TYPE_CHECKING:
    from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings
    from pyflannel_runtime.subnet.kube.kube import KubeSettings

# subnet.env is a handful of short lines; anything much larger is not one.
_SUBNET_ENV_LIMIT = 64 * 1024


class VerifyError(PyflannelError):
    """The leases, the kernel or subnet.env could not be read; ``str()`` says what and why."""


class LeaseStoreError(VerifyError):
    """The lease store could not be read."""


class OwnLeaseUnknown(VerifyError):
    """The subnet file that was to name the host's own lease could not be read."""


# --- what to verify ---------------------------------------------------------------------------


# The lease store: etcd or the Kubernetes API, as the agent's flags describe them
# (`agent.stores.etcd_settings` / `kube_settings`); request_timeout bounds the whole listing.
LeaseStore = Union["EtcdSettings", "KubeSettings"]


@dataclass(frozen=True)
class Host:
    """The host to check: a network namespace, or this host (``netns=None``). Its own lease is
    the one holding `public_ip`, else the one subnet.env names; subnet.env is checked when
    `subnet_file` is given."""

    netns: str | None = None
    public_ip: IPv4Address | IPv6Address | None = None
    subnet_file: str | None = None
    # The routes of the agent's userspace forwarder (udp), peer subnet -> public IP, as the
    # agent publishes them (`ops.agent`); None: not known, so such peers are not checked.
    forwarder: Mapping[IPNetwork, IPAddress] | None = None


# --- the report -------------------------------------------------------------------------------


class Datapath(enum.Enum):
    OWN = "own"
    PROGRAMMED = "programmed"
    MISSING = "missing"
    SKIPPED = "skipped"
    REJECTED = "rejected"  # outside the network: the agent never programs it
    UNCHECKED = "unchecked"


@dataclass(frozen=True)
class LeaseStatus:
    row: ListedLease
    datapath: Datapath
    expected: tuple[Entry, ...] = ()  # the entries the agent programs for this peer
    missing: tuple[Entry, ...] = ()
    note: str = ""  # why a peer is skipped, rejected, or missing from a userspace forwarder


@dataclass(frozen=True)
class DeviceMtu:
    device: str
    actual: int
    expected: int

    @property
    def ok(self) -> bool:
        return self.actual == self.expected


@dataclass(frozen=True)
class VerifyReport:
    store: str  # "etcd" or "kube"
    leases: tuple[LeaseStatus, ...]
    unreadable: tuple[UnreadableLease, ...] = ()  # in the store, but not a lease
    # The kernel entries the datapath owns (None: not read) and those no lease explains.
    actual: DatapathState | None = None
    stale: tuple[Entry, ...] = ()
    mtus: tuple[DeviceMtu, ...] = ()  # the flannel devices' MTU against FLANNEL_MTU's
    subnet_env: tuple[str, ...] = ()  # how subnet.env differs from the lease and the MTU
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    checked: tuple[str, ...] = ()  # what the host's inspection found right, beyond entries
    names: Mapping[int, str] = field(default_factory=dict)  # ifindex -> device name

    def count(self, state: Datapath) -> int:
        return sum(1 for status in self.leases if status.datapath is state)

    @property
    def rejected(self) -> int:
        return self.count(Datapath.REJECTED) + len(self.unreadable)

    @property
    def missing(self) -> tuple[Entry, ...]:
        return tuple(entry for status in self.leases for entry in status.missing)

    @property
    def ok(self) -> bool:
        return not (
            self.count(Datapath.MISSING)
            or self.stale
            or self.problems
            or self.rejected
            or self.subnet_env
            or not all(m.ok for m in self.mtus)
        )

    def describe(self, entry: Entry) -> str:
        return describe(entry, self.names)


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


# --- the comparison (pure) --------------------------------------------------------------------


def find_host_lease(
    rows: Sequence[ListedLease],
    public_ip: IPv4Address | IPv6Address | None,
    subnets: Sequence[IPNetwork],
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
    rows: Sequence[ListedLease],
    own: Lease | None,
    host: HostDatapath | None,
    actual: DatapathState | None,
    store: str,
    problems: Sequence[str] = (),
    notes: Sequence[str] = (),
    scope: LeaseScope | None = None,
    unreadable: Sequence[UnreadableLease] = (),
) -> VerifyReport:
    """Each lease's state on this host, and the owned entries no lease explains. Without a
    host (or its dump) the datapath is not checked. Leases outside `scope` are rejected, as
    the agent rejects them."""
    scope = scope or LeaseScope()
    watcher = LeaseWatcher(own, scope) if own is not None else None
    present = actual.entries() if actual is not None else frozenset()
    explained: set[Entry] = set()
    statuses = []
    for row in rows:
        if watcher is not None and watcher.is_own(row.lease):
            statuses.append(LeaseStatus(row, Datapath.OWN))
            continue
        why = scope.rejection(row.lease, own)
        if why is not None:
            statuses.append(LeaseStatus(row, Datapath.REJECTED, note=why))
            continue
        if host is None or actual is None:
            statuses.append(LeaseStatus(row, Datapath.UNCHECKED))
            continue
        spec = registry.get(host.backend_type)
        if spec.forwarder_route is not None:
            statuses.append(forwarder_status(row, spec.forwarder_route(row.lease), host.forwarder))
            continue
        try:
            expected = spec.expected_entries(row.lease, host)
        except PeerSkipped as why_skipped:
            statuses.append(LeaseStatus(row, Datapath.SKIPPED, note=str(why_skipped)))
            continue
        explained.update(expected)
        missing = tuple(e for e in expected if e not in present)
        state = Datapath.MISSING if missing else Datapath.PROGRAMMED
        statuses.append(LeaseStatus(row, state, expected, missing))
    stale = sorted(present - explained, key=_entry_order) if host is not None else []
    if host is not None and any(s.datapath is Datapath.UNCHECKED for s in statuses):
        notes = (*notes, f"{host.backend_type} peers not checked: the agent does not publish "
                 "its forwarder's routes (pyflanneld does on /statusz)")  # fmt: skip
    return VerifyReport(
        store=store,
        leases=tuple(statuses),
        unreadable=tuple(unreadable),
        actual=actual if host is not None else None,
        stale=tuple(stale),
        problems=tuple(problems) + (host.problems if host is not None else ()),
        notes=tuple(notes),
        checked=host.checked if host is not None else (),
        names=dict(host.names) if host is not None else {},
    )


def forwarder_status(
    row: ListedLease,
    route: tuple[IPNetwork, IPAddress] | None,
    forwarder: Mapping[IPNetwork, IPAddress] | None,
) -> LeaseStatus:
    """A peer of a userspace forwarder: programmed when the forwarder routes its subnet to its
    public IP."""
    if route is None:
        return LeaseStatus(row, Datapath.SKIPPED, note="the forwarder carries nothing for it")
    if forwarder is None:
        return LeaseStatus(row, Datapath.UNCHECKED)
    subnet, public_ip = route
    found = forwarder.get(subnet)
    if found == public_ip:
        return LeaseStatus(row, Datapath.PROGRAMMED)
    if found is None:
        why = f"the forwarder has no route for {subnet} (to {public_ip})"
    else:
        why = f"the forwarder sends {subnet} to {found}, not {public_ip}"
    return LeaseStatus(row, Datapath.MISSING, note=why)


def _entry_order(entry: Entry) -> tuple[int, str]:
    return ({Neigh: 0, Fdb: 1, Route: 2}[type(entry)], repr(entry))


def subnet_env_differences(
    text: str, path: str, config: NetworkConfig, own: Lease, mtu: int | None
) -> list[str]:
    """How subnet.env (as the CNI plugin reads it) differs from what the agent writes for
    this lease: the networks, the lease's subnets, and FLANNEL_MTU when `mtu` is known."""
    try:
        env = parse_cni_subnet_env(text, path)
    except SubnetEnvError as err:
        return [str(err)]
    found: list[str] = []
    for key, have, want in (
        ("FLANNEL_NETWORK", env.networks, [config.network] if config.enable_ipv4 else []),
        ("FLANNEL_SUBNET", [env.subnet] if env.subnet else [], [own.subnet] if own.subnet else []),
        (
            "FLANNEL_IPV6_NETWORK",
            env.ipv6_networks,
            [config.ipv6_network] if config.enable_ipv6 else [],
        ),
        (
            "FLANNEL_IPV6_SUBNET",
            [env.ipv6_subnet] if env.ipv6_subnet else [],
            [own.ipv6_subnet] if own.ipv6_subnet and config.enable_ipv6 else [],
        ),
    ):
        wanted = [str(net) for net in want if net is not None]
        if list(have) != wanted:
            found.append(f"{path}: {key} is {_listed(have)}, the lease says {_listed(wanted)}")
    if mtu is not None and env.mtu != mtu:
        found.append(f"{path}: FLANNEL_MTU is {env.mtu}, expected {mtu}")
    return found


def _listed(values: Sequence[str]) -> str:
    return ",".join(values) or "unset"


# --- reading ----------------------------------------------------------------------------------


def store_kind(store: LeaseStore) -> str:
    """ "etcd" or "kube"."""
    from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings

    return "etcd" if isinstance(store, EtcdSettings) else "kube"


async def list_leases(store: LeaseStore) -> tuple[NetworkConfig, LeaseListing]:
    """The network config and every lease, through the agent's own lease store managers."""
    from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings

    if isinstance(store, EtcdSettings):
        return await _etcd_leases(store)
    return await _kube_leases(store)


async def _etcd_leases(settings: EtcdSettings) -> tuple[NetworkConfig, LeaseListing]:
    from pyflannel_runtime.subnet.etcd.etcd import (
        ETCD_ERRORS,
        EtcdError,
        EtcdSubnetManager,
        describe_etcd_error,
    )

    where = f"etcd {','.join(settings.endpoints)} (prefix {settings.prefix})"
    timeout = settings.request_timeout
    failures: tuple[type[BaseException], ...] = (*ETCD_ERRORS, EtcdError, ConfigError)
    try:
        sm = EtcdSubnetManager(settings)
    except EtcdError as err:
        raise LeaseStoreError(f"cannot read leases from {where}: {err}") from None
    try:
        async with asyncio.timeout(timeout):
            config = await sm.get_network_config()
            listing = await sm.list_leases()
    except TimeoutError:
        raise LeaseStoreError(
            f"cannot read leases from {where}: no answer in {timeout:g}s"
        ) from None
    except failures as err:
        raise LeaseStoreError(
            f"cannot read leases from {where}: {describe_etcd_error(err)}"
        ) from None
    finally:
        await sm.close()
    ordered = sorted(listing.leases, key=lease_order)
    return config, LeaseListing(tuple(ordered), listing.unreadable)


async def _kube_leases(settings: KubeSettings) -> tuple[NetworkConfig, LeaseListing]:
    from pyflannel_runtime.subnet.kube.annotations import AnnotationPrefixError
    from pyflannel_runtime.subnet.kube.kube import (
        API_ERRORS,
        KubeSubnetError,
        KubeSubnetManager,
        api_error_text,
    )

    try:
        sm = await KubeSubnetManager.create(settings, own_node=False)
    except (KubeSubnetError, AnnotationPrefixError) as err:
        raise LeaseStoreError(str(err)) from None
    try:
        return await sm.get_network_config(), await sm.list_leases()
    except (*API_ERRORS, ValueError) as err:
        raise LeaseStoreError(f"cannot list nodes: {api_error_text(err)}") from None
    finally:
        await sm.close()


def lease_order(row: ListedLease) -> tuple[int, int]:
    """IPv4 leases by subnet, then IPv6-only ones (by their IPv6 subnet), then those with no
    subnet at all (which the scope rejects)."""
    subnet = row.lease.subnet or row.lease.ipv6_subnet
    if subnet is None:
        return 7, 0
    return subnet.version, int(subnet.network_address)


def read_subnet_env_text(path: str) -> str:
    """subnet.env's text, bounded; OSError when it cannot be read."""
    return read_small_file(path, _SUBNET_ENV_LIMIT).decode("utf-8", errors="replace")


def _own_subnets(path: str) -> list[IPNetwork]:
    try:
        previous = read_previous_subnets(read_subnet_env_text(path))
    except OSError as err:
        raise OwnLeaseUnknown(
            f"cannot tell which lease is this host's: {path}: {err.strerror or err}"
        ) from None
    return [s for s in (previous.subnet, previous.ipv6_subnet) if s is not None]


@dataclass(frozen=True)
class _Kernel:
    """What was read from the host's kernel."""

    expected_mtu: int | None  # FLANNEL_MTU for the external interface; None: not found
    host: HostDatapath | None = None  # None: the backend has no per-peer entries to check
    actual: DatapathState | None = None
    mtus: tuple[DeviceMtu, ...] = ()


def _read_kernel(
    backend: registry.BackendRuntime,
    config: NetworkConfig,
    own: Lease,
    leases: Sequence[Lease],
    forwarder: Mapping[IPNetwork, IPAddress] | None,
) -> _Kernel:
    """The backend's view of this host, its owned entries and its devices' MTU (in this
    thread's network namespace)."""
    from pyflannel_runtime.netlink.dump import Ownership, open_dump_socket, read_owned_state
    from pyflannel_runtime.netlink.netns import iproute

    try:
        with iproute(None) as ipr:
            mtus = {link["index"]: link.get_attr("IFLA_MTU") for link in ipr.get_links()}
            public = own.attrs.public_ip if config.enable_ipv4 else own.attrs.public_ipv6
            holders = ipr.get_addr(address=str(public)) if public is not None else []
            host = backend.inspect_host(ipr, config, own, leases) if backend.inspect_host else None
    except OSError as err:
        raise VerifyError(f"cannot read the kernel's devices: {err}") from None
    expected = None
    if holders and holders[0]["index"] in mtus:
        expected = backend.spec.options.of(config).device_mtu(mtus[holders[0]["index"]])
    if host is None:
        return _Kernel(expected)
    host = replace(host, forwarder=forwarder)
    ownership = Ownership(host.ownership_devices, host.networks)
    try:
        sock = open_dump_socket(None)
        try:
            actual = read_owned_state(sock, ownership)
        finally:
            sock.close()
    except OSError as err:
        raise VerifyError(f"cannot dump the kernel's routes and neighbours: {err}") from None
    devices = tuple(
        DeviceMtu(host.names[index], mtus[index], expected)
        for index in sorted(host.ownership_devices | host.mtu_devices)
        if expected is not None and index in mtus
    )
    return _Kernel(expected, host, actual, devices)


# --- verify -----------------------------------------------------------------------------------


def verify(store: LeaseStore, host: Host, *, leases_only: bool = False) -> VerifyReport:
    """The leases, and how the host's kernel and subnet.env compare with them (not with
    `leases_only`). Everything is read from inside the host's network namespace, the lease
    store included. Raises VerifyError when something could not be read."""
    from pyflannel_runtime.netlink.netns import run_in_netns

    require_netns(host.netns)
    checked = None if leases_only else host
    return run_in_netns(host.netns, lambda: _verify(store, checked))


def require_netns(netns: str | None) -> None:
    """VerifyError unless the named network namespace exists (None: this one, which does)."""
    from pyflannel_runtime.netlink.netns import NETNS_RUN_DIR

    if netns is not None and not os.path.exists(os.path.join(NETNS_RUN_DIR, netns)):
        raise VerifyError(f"network namespace {netns} does not exist")


def _verify(store: LeaseStore, host: Host | None) -> VerifyReport:
    # pyroute2's handles run an event loop of their own: the kernel is read outside this one.
    config, listing = asyncio.run(list_leases(store))
    kind = store_kind(store)
    scope = LeaseScope.of(config, check_lengths=kind == "etcd")

    def report(
        own: Lease | None = None,
        kernel: _Kernel = _Kernel(None),
        problems: Sequence[str] = (),
        notes: Sequence[str] = (),
        subnet_env: Sequence[str] = (),
    ) -> VerifyReport:
        rows, unreadable = listing.leases, listing.unreadable
        found = compare(
            rows, own, kernel.host, kernel.actual, kind, problems, notes, scope, unreadable
        )
        return replace(found, mtus=kernel.mtus, subnet_env=tuple(subnet_env))

    if host is None:
        return report()
    subnets = _own_subnets(host.subnet_file) if host.public_ip is None and host.subnet_file else []
    own = find_host_lease(listing.leases, host.public_ip, subnets)
    if own is None:
        named = host.public_ip or ", ".join(map(str, subnets)) or "nothing"
        problem = f"no lease belongs to this host ({named}); the datapath was not checked"
        return report(problems=[problem])
    try:
        backend = registry.get(config.backend_type)
        backend.spec.options.of(config)
    except ConfigError as err:
        return report(own, problems=[f"the network config is not usable: {err}"])
    notes: list[str] = []
    if backend.inspect_host is None:
        notes.append(f"the {config.backend_type} backend's datapath is not checked")
    kernel = _read_kernel(
        backend, config, own, [row.lease for row in listing.leases], host.forwarder
    )
    if host.subnet_file is None:
        notes.append("subnet.env is not checked (no subnet file given)")
        return report(own, kernel, notes=notes)
    try:
        text = read_subnet_env_text(host.subnet_file)
    except OSError as err:
        env = [f"{host.subnet_file}: {err.strerror or err}"]
    else:
        env = subnet_env_differences(text, host.subnet_file, config, own, kernel.expected_mtu)
    return report(own, kernel, notes=notes, subnet_env=env)
