"""The etcd v3 subnet manager: flannel's LocalManager and etcd registry (flannel-io/flannel
pkg/subnet/etcd/local_manager.go, registry.go).

Deliberate differences from flannel:

* A lost creation race is retried (flannel exits with ``subnet already exists``).
* A watch event that does not parse is skipped with a warning; flannel turns it into an empty
  snapshot, which removes every peer. A failed re-list is retried rather than emitted empty.
* A reservation (a key without an etcd lease) reused by its owner stays a reservation; flannel
  re-puts it with a 24 h lease, so the reservation lapses while the node is down.
* Leases are listed and watched under ``<prefix>/subnets/`` (flannel omits the final slash).
* An IPv6-only lease has ``subnet=None`` and ``enable_ipv4=False`` (not 0.0.0.0/0 and True).
* With several endpoints, a request that finds its endpoint unreachable moves to the next one.
* etcd is spoken to through its JSON gateway (client.py), not gRPC; the keys, values
  and leases are the same.
* The watch starts from the listing the allocation made (flannel lists twice).
* An agent resumes its watch where it stopped instead of listing every lease (resume.py): it
  keeps the leases and their revision beside its subnet file, checked against etcd at the next
  start, and lists only when they cannot be used. A cold start (no usable state) waits a
  random time first, up to COLD_START_SPREAD seconds per lease in etcd (10 s at most), so that
  agents starting together do not all list at once.
* Taking its own lease again, an agent writes the key only when its value changes or its
  etcd lease has run out (flannel puts it with a new etcd lease at every start, an event that
  reaches every other agent).
* Listing leases asks for TTLs only where they are shown (`pyflannel status`), once per etcd
  lease; flannel asks once per key, so thousands of requests at start-up.
* Renewal starts no earlier than half-way through the TTL (only matters with pyflannel's
  shorter ``--subnet-lease-ttl``, where the default 60 min margin would exceed it).
* Renewal writes the key only while it still holds this node's lease (a txn on its value;
  flannel's plain put would take a subnet another node was given after ours ran out).
* A lease that ran out while etcd could not be reached (a partition longer than the TTL) is
  taken again as soon as etcd answers, the same subnet, without a restart: retried within a
  second once expired, so the peers program the node again within seconds. If another node
  holds the subnet by then, the agent shuts down with flannel's message and why (LeaseTaken)
  instead of renumbering the node's pods under them. A key deleted before its lease ran out
  (an operator's release) still shuts the agent down as in flannel.
* Every retry waits a random time up to a ceiling (full jitter, subnet/backoff.py): a failed
  request or watch up to 0.1 s doubling to 5 s, a failed renewal up to flannel's minute.
  Agents that lost etcd together do not all come back at the same instant
  (docs/operating-faults.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import posixpath
import random
import ssl
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from typing import TypeVar

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.fsutil import os_error_text
from pyflannel_runtime.subnet.allocation import choose_new_subnets, find_own_lease, lease_fits
from pyflannel_runtime.subnet.backoff import Backoff, jittered
from pyflannel_runtime.subnet.endpoint_url import split_http_url
from pyflannel_runtime.subnet.etcd.client import (
    OUT_OF_RANGE,
    Endpoint,
    EtcdClient,
    EtcdClientError,
    EtcdCompacted,
    EtcdStatusError,
    EtcdUnavailable,
    KeyValue,
    RangeReply,
    WatchEvent,
    WatchResponse,
    prefix_range_end,
    tls_context,
)
from pyflannel_runtime.subnet.etcd.resume import WatchRecord, WatchState, read_state
from pyflannel_runtime.subnet.manager import (
    LeaseListing,
    LeaseRevoked,
    LeaseTaken,
    LeaseWatchBatch,
    ListedLease,
    StoreStats,
    UnreadableLease,
)
from pyflannel_runtime.wire.lease import (
    EventType,
    Lease,
    LeaseAttrs,
    LeaseError,
    LeaseEvent,
    make_subnet_key,
    parse_subnet_key,
)
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config, parse_config
from pyflannel_runtime.wire.subnet_env import PreviousSubnets

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_ENDPOINTS = ("http://127.0.0.1:4001", "http://127.0.0.1:2379")
DEFAULT_PREFIX = "/coreos.com/network"
DEFAULT_CLIENT_PORT = 2379
SUBNET_TTL = 86400
# The TTL of a leased key whose expiry was not looked up: its expiration becomes infinite.
UNKNOWN_TTL = math.inf
RACE_RETRIES = 10
RENEW_RETRY_SECONDS = 60.0
# Once the lease has run out: each attempt to take it back is cut short after this long, and
# the next follows after the pause, so the first one after a partition heals answers at once.
RECLAIM_ATTEMPT_SECONDS = 2.0
RECLAIM_RETRY_SECONDS = 1.0
# etcd deletes a key when its lease runs out, checked every 500 ms by its leader: a deletion
# of the own key later than this before the expiry this node reckoned was someone's doing.
EXPIRY_SLACK_SECONDS = 1.0
# A cold start's listing waits a random time, up to this many seconds per lease in etcd and at
# most COLD_START_SPREAD_CAP: agents that start together (a power cut's return) spread their
# listings, each of which costs etcd the whole prefix.
COLD_START_SPREAD = 0.002
COLD_START_SPREAD_CAP = 10.0
_NO_IPV4 = IPv4Network("0.0.0.0/0")

# Why a watch is started again (the agent's metrics count each): etcd ended the stream, its
# history no longer held the next revision (the leases are listed again), or the request failed.
WATCH_RESTART_REASONS = ("closed", "compacted", "error")

# Errors that mean "etcd did not do it": retried or reported, never a crash.
ETCD_ERRORS: tuple[type[BaseException], ...] = (EtcdClientError, TimeoutError)


class EtcdError(PyflannelError):
    """A failure of the etcd subnet manager; ``str()`` is flannel's message where it has one."""


@dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
    prefix: str = DEFAULT_PREFIX
    certfile: str = ""
    keyfile: str = ""
    cafile: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    subnet_lease_ttl: int = SUBNET_TTL  # pyflannel's --subnet-lease-ttl; flannel: fixed 24 h
    renew_margin_minutes: int = 60  # --subnet-lease-renew-margin
    # Tests only: a renewal margin in seconds, overriding the minutes.
    renew_margin_seconds_override: float | None = None
    # What the last run wrote to subnet.env (read_previous_subnets), reused when still free.
    previous: PreviousSubnets = field(default_factory=PreviousSubnets)
    request_timeout: float = 10.0
    # Where the lease watch keeps its state between runs (resume.py); "": listed every start.
    watch_state_file: str = ""

    @property
    def renew_margin(self) -> float:
        if self.renew_margin_seconds_override is not None:
            return self.renew_margin_seconds_override
        return self.renew_margin_minutes * 60.0


# --- connection ---------------------------------------------------------------------------------


def parse_endpoint(endpoint: str, tls: ssl.SSLContext | None) -> Endpoint:
    """``http(s)://host[:port]`` (IPv6 in brackets, port 2379 when left out) → an Endpoint."""
    try:
        host, port = split_http_url(endpoint, DEFAULT_CLIENT_PORT)
    except ValueError as err:
        raise EtcdError(f"invalid etcd endpoint: {err}") from None
    return Endpoint(host, port, tls)


def client_tls(settings: EtcdSettings) -> ssl.SSLContext | None:
    """TLS with client certificates when both files are given; plain HTTP otherwise, with
    flannel's warning."""
    if not settings.certfile or not settings.keyfile:
        log.warning("no certificate provided: connecting to etcd with http. This is insecure")
        return None
    try:
        # ssl names no file when one cannot be read, so each is opened first.
        for path in filter(None, (settings.certfile, settings.keyfile, settings.cafile)):
            with open(path, "rb"):
                pass
        return tls_context(settings.certfile, settings.keyfile, settings.cafile)
    except OSError as err:
        raise EtcdError(f"failed to read etcd TLS files: {os_error_text(err, 'open')}") from None


class _Endpoints:
    """The client for the current endpoint; moves on to the next one when it is unreachable."""

    def __init__(self, settings: EtcdSettings) -> None:
        if not settings.endpoints:
            raise EtcdError("no etcd endpoints given")
        self._settings = settings
        tls = client_tls(settings)
        self._endpoints = [parse_endpoint(e, tls) for e in settings.endpoints]
        self._index = 0
        self._client: EtcdClient | None = None

    @property
    def endpoint_count(self) -> int:
        return len(self._endpoints)

    def client(self) -> EtcdClient:
        if self._client is None:
            username = self._settings.username
            self._client = EtcdClient(
                self._endpoints[self._index],
                username=username,
                password=self._settings.password if username else "",
                timeout=self._settings.request_timeout,
            )
        return self._client

    async def fail_over(self, failed: EtcdClient) -> None:
        if failed is not self._client:
            return  # another request already moved on
        self._index = (self._index + 1) % len(self._endpoints)
        self._client = None
        log.warning("etcd endpoint unreachable, switching to %s", self._endpoints[self._index])
        await failed.close()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


def describe_etcd_error(err: BaseException) -> str:
    return str(err) or type(err).__name__


def _join(*parts: str) -> str:
    """Go's path.Join, as flannel builds its keys."""
    joined = posixpath.normpath("/".join(p for p in parts if p))
    return "/" + joined.lstrip("/") if joined.startswith("/") else joined


# --- etcd values → leases -------------------------------------------------------------------


def _lease_from_kv(key: bytes, value: bytes, ttl: float | None, revision: int) -> Lease:
    """Raises LeaseError when the key is not a subnet key or the value not LeaseAttrs JSON."""
    subnet, ipv6_subnet = parse_subnet_key(key.decode(errors="replace"))
    attrs = LeaseAttrs.from_json(value)
    v4 = None if subnet == _NO_IPV4 else subnet
    return Lease(
        subnet=v4,
        ipv6_subnet=ipv6_subnet,
        attrs=attrs,
        enable_ipv4=v4 is not None,
        enable_ipv6=ipv6_subnet is not None,
        expiration=None if ttl is None else time.time() + ttl,
        asof=revision,
    )


def _removed_lease(key: bytes, revision: int) -> Lease:
    subnet, ipv6_subnet = parse_subnet_key(key.decode(errors="replace"))
    v4 = None if subnet == _NO_IPV4 else subnet
    return Lease(
        subnet=v4,
        ipv6_subnet=ipv6_subnet,
        attrs=LeaseAttrs(),
        enable_ipv4=v4 is not None,
        enable_ipv6=ipv6_subnet is not None,
        asof=revision,
    )


@dataclass(frozen=True)
class _Listing:
    """Every lease under the prefix at one revision of one cluster, and the keys read."""

    leases: list[Lease]
    unreadable: list[UnreadableLease]
    kvs: list[KeyValue]
    revision: int
    cluster_id: int
    # Kept from the last run: the revision of the newest lease etcd holds now. A snapshot
    # without the changes up to it would leave out a peer that came while the agent was down
    # (its kernel entries, still there, removed until the watch replays it).
    catch_up: int = 0


def _unusable(state: WatchState, reply: RangeReply) -> str | None:
    """Why leases kept from the last run are not etcd's at their revision, by the reply of a
    range at that revision for the count and the newest key; None: they are."""
    if state.cluster_id != reply.header.cluster_id:
        return (
            f"the leases kept from the last run are of etcd cluster {state.cluster_id:x}, "
            f"this is {reply.header.cluster_id:x}"
        )
    if reply.count != len(state.kvs):
        return (
            f"etcd had {reply.count} leases at revision {state.revision}, the last run kept "
            f"{len(state.kvs)}"
        )
    # A history that reached the revision again after a restore has other writes behind it.
    newest = max((kv.mod_revision for kv in state.kvs), default=0)
    kept = {kv.key: kv.mod_revision for kv in state.kvs}
    etcds = reply.kvs[0] if reply.kvs else None
    if etcds is not None and (etcds.mod_revision != newest or kept.get(etcds.key) != newest):
        return f"etcd's newest lease at revision {state.revision} is not the one the last run kept"
    return None


class _SubnetTaken(Exception):
    """Another node created the key between our listing and our transaction."""


def _holder(kv: KeyValue) -> str:
    """Who holds a subnet key, for messages: its public IP(s)."""
    try:
        attrs = LeaseAttrs.from_json(kv.value)
    except LeaseError:
        return "a lease that does not parse"
    shown = [str(ip) for ip in (attrs.public_ip, attrs.public_ipv6) if ip is not None]
    return "node " + ", ".join(shown)


def _held_by(kv: KeyValue, attrs: LeaseAttrs) -> bool:
    """Whether the key's lease names this node (flannel's reuse by public IP)."""
    try:
        held = LeaseAttrs.from_json(kv.value)
    except LeaseError:
        return False
    return find_own_lease([Lease(None, None, held)], attrs) is not None


# --- the manager ----------------------------------------------------------------------------


class EtcdSubnetManager:
    def __init__(self, settings: EtcdSettings, rng: random.Random | None = None) -> None:
        self._settings = settings
        self._conn = _Endpoints(settings)
        self._rng = rng or random.Random()
        self._config_key = _join(settings.prefix, "config").encode()
        self._subnets_dir = (_join(settings.prefix, "subnets") + "/").encode()
        self._closed = False
        self.stats = StoreStats.with_reasons(WATCH_RESTART_REASONS)
        # acquire_lease's listing, until watch_leases starts from it.
        self._allocation_view: _Listing | None = None
        # The own key, its state and the revision acquire_lease read it at, when it wrote
        # nothing: complete_lease's watch starts from it.
        self._own_view: tuple[bytes, LeaseWatchBatch, int] | None = None
        self._record = (
            WatchRecord(settings.watch_state_file, self._subnets_dir)
            if settings.watch_state_file
            else None
        )

    # -- requests --

    async def _call(self, op: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
        """Run ``op`` on the current client, moving to the next endpoint when this one is
        unreachable (each endpoint is tried once)."""
        tries_left = self._conn.endpoint_count
        while True:
            client = self._conn.client()
            try:
                return await op(client)
            except EtcdUnavailable:
                tries_left -= 1
                if tries_left <= 0:
                    raise
                await self._conn.fail_over(client)

    async def _retrying(self, fn: Callable[[], Awaitable[_T]]) -> _T:
        backoff = Backoff()
        while True:
            try:
                return await fn()
            except ETCD_ERRORS as err:
                delay = backoff.next_delay()
                log.warning(
                    "etcd request failed, retrying in %.1fs: %s", delay, describe_etcd_error(err)
                )
            await asyncio.sleep(delay)

    def _subnet_key(self, subnet: IPv4Network | None, ipv6_subnet: IPv6Network | None) -> bytes:
        return self._subnets_dir + make_subnet_key(subnet, ipv6_subnet).encode()

    async def _time_to_live(self, lease_id: int) -> int | None:
        """Seconds left on an etcd lease; None for a key without one (a reservation)."""
        if lease_id == 0:
            return None
        return await self._call(lambda c: c.time_to_live(lease_id))

    async def _lease_ttls(self, kvs: list[KeyValue]) -> dict[int, int | None]:
        """Seconds left on each etcd lease behind ``kvs``, one request per lease."""
        ids = sorted({kv.lease for kv in kvs if kv.lease})
        ttls = await asyncio.gather(*(self._time_to_live(i) for i in ids))
        return dict(zip(ids, ttls, strict=True))

    async def _list_leases(self, *, with_expiry: bool) -> _Listing:
        """All leases and the revision they were read at; the keys that do not parse are
        skipped with a warning. Without ``with_expiry``, leased keys get an unknown (infinite)
        expiry: neither the datapath nor the allocation needs it, and one TTL request per key
        is most of the cost of listing thousands."""
        prefix = self._subnets_dir
        reply = await self._call(lambda c: c.range_reply(prefix, prefix_range_end(prefix)))
        ttls = await self._lease_ttls(reply.kvs) if with_expiry else {}
        leases, unreadable = self._leases_of(reply.kvs, ttls)
        return _Listing(
            leases, unreadable, reply.kvs, reply.header.revision, reply.header.cluster_id
        )

    def _leases_of(
        self, kvs: list[KeyValue], ttls: dict[int, int | None]
    ) -> tuple[list[Lease], list[UnreadableLease]]:
        leases = []
        unreadable = []
        for kv in kvs:
            ttl = None if kv.lease == 0 else ttls.get(kv.lease, UNKNOWN_TTL)
            try:
                leases.append(_lease_from_kv(kv.key, kv.value, ttl, kv.mod_revision))
            except LeaseError as err:
                log.warning("Ignoring bad subnet node %s: %s", kv.key.decode(errors="replace"), err)
                name = kv.key.removeprefix(self._subnets_dir).decode(errors="replace")
                unreadable.append(UnreadableLease(name, str(err)))
        return leases, unreadable

    async def _stored_listing(self) -> _Listing | None:
        """The leases the last run's watch kept, as a listing at their revision, once they
        check out against etcd; None (etcd is listed instead) when there are none or they
        cannot be used."""
        if self._record is None:
            return None
        state = read_state(self._record.path, self._subnets_dir)
        if state is None:
            return None
        prefix = self._subnets_dir
        try:
            reply = await self._call(
                lambda c: c.range_reply(
                    prefix, prefix_range_end(prefix), revision=state.revision, newest_only=True
                )
            )
        except EtcdStatusError as err:
            if err.code != OUT_OF_RANGE:
                raise
            # Compacted, or ahead of etcd's revision (etcd restored from an older backup).
            log.info(
                "Listing the leases: revision %d kept from the last run: %s", state.revision, err
            )
            return None
        why = _unusable(state, reply)
        if why is not None:
            log.info("Listing the leases: %s", why)
            return None
        now = await self._call(
            lambda c: c.range_reply(prefix, prefix_range_end(prefix), newest_only=True)
        )
        leases, unreadable = self._leases_of(state.kvs, {})
        log.info(
            "Resuming the lease watch from revision %d (%d leases kept from the last run)",
            state.revision,
            len(state.kvs),
        )
        newest = now.kvs[0].mod_revision if now.kvs else 0
        return _Listing(
            leases, unreadable, state.kvs, state.revision, state.cluster_id, catch_up=newest
        )

    async def _caught_up(self, listing: _Listing) -> _Listing | None:
        """``listing`` with the watch's changes applied up to its ``catch_up`` revision at
        least (whole messages), at the revision of the last change applied; None when etcd
        compacted the history meanwhile."""
        prefix = self._subnets_dir
        kvs = {kv.key: kv for kv in listing.kvs}
        revision = listing.revision
        try:
            watch = await self._call(
                lambda c: c.watch(prefix, prefix_range_end(prefix), listing.revision + 1)
            )
            try:
                async for response in watch.responses():
                    for event in response.events:
                        if event.deleted:
                            kvs.pop(event.kv.key, None)
                        else:
                            kvs[event.kv.key] = event.kv
                    if response.events:
                        revision = response.events[-1].kv.mod_revision
                    if revision >= listing.catch_up:
                        break
            finally:
                watch.close()
        except EtcdCompacted:
            return None
        if revision < listing.catch_up:
            raise EtcdUnavailable("etcd ended the watch before replaying what the agent missed")
        kept = list(kvs.values())
        leases, unreadable = self._leases_of(kept, {})
        return _Listing(leases, unreadable, kept, revision, listing.cluster_id)

    async def _spread_cold_start(self) -> None:
        """Wait a random time, longer the more leases there are to list (COLD_START_SPREAD)."""
        prefix = self._subnets_dir
        reply = await self._call(
            lambda c: c.range_reply(prefix, prefix_range_end(prefix), count_only=True)
        )
        ceiling = min(COLD_START_SPREAD_CAP, COLD_START_SPREAD * reply.count)
        delay = ceiling * self._rng.random()
        if delay > 0:
            log.info("Listing %d leases in %.2fs (a cold start's spread)", reply.count, delay)
            await asyncio.sleep(delay)

    # -- SubnetManager --

    async def get_network_config(self) -> NetworkConfig:
        kv = await self._call(lambda c: c.get(self._config_key))
        if kv is None:
            raise EtcdError(
                "flannel config not found in etcd store. "
                "Did you create your config using etcdv3 API?"
            )
        return check_network_config(parse_config(kv.value))

    async def acquire_lease(self, attrs: LeaseAttrs) -> Lease:
        stored = await self._stored_listing()
        if stored is None and self._record is not None:
            await self._spread_cold_start()
        for _ in range(RACE_RETRIES):
            cfg = await self.get_network_config()
            if stored is not None:
                # The own lease from the kept leases (or subnet.env when it came after them),
                # read again from etcd: no listing at all.
                listing, stored = stored, None
                own = find_own_lease(listing.leases, attrs) or self._previous_lease(attrs)
                if own is not None and lease_fits(own, cfg):
                    lease = await self._take_again(own, attrs)
                    if lease is not None:
                        self._allocation_view = listing
                        return lease
            listing = await self._list_leases(with_expiry=False)
            self._allocation_view = listing
            try:
                return await self._try_acquire(cfg, listing.leases, attrs)
            except _SubnetTaken as err:
                log.info("Subnet %s was taken by another node meanwhile, retrying", err)
        raise EtcdError("max retries reached trying to acquire a subnet")

    async def _try_acquire(
        self, cfg: NetworkConfig, leases: list[Lease], attrs: LeaseAttrs
    ) -> Lease:
        own = find_own_lease(leases, attrs)
        if own is not None:
            if lease_fits(own, cfg):
                lease = await self._take_again(own, attrs)
                if lease is None:
                    raise _SubnetTaken(make_subnet_key(own.subnet, own.ipv6_subnet))
                return lease
            log.info(
                "Found lease (ip: %s ipv6: %s) for current IP (%s) but not compatible with "
                "current config, deleting",
                own.subnet,
                own.ipv6_subnet,
                attrs.public_ip,
            )
            own_key = self._subnet_key(own.subnet, own.ipv6_subnet)
            # The listing still shows the old own lease as a peer's: the watch lists afresh.
            self._allocation_view = None
            await self._call(lambda c: c.delete(own_key))
            leases = [lease for lease in leases if lease is not own]

        chosen = choose_new_subnets(cfg, leases, self._settings.previous, self._rng)
        expiration = await self._create_lease(chosen.subnet, chosen.ipv6_subnet, attrs)
        log.info(
            "Allocated lease (ip: %s ipv6: %s) to current node (ip: %s)",
            chosen.subnet,
            chosen.ipv6_subnet,
            attrs.public_ip,
        )
        return Lease(
            subnet=chosen.subnet,
            ipv6_subnet=chosen.ipv6_subnet,
            attrs=attrs,
            enable_ipv4=chosen.subnet is not None,
            enable_ipv6=chosen.ipv6_subnet is not None,
            expiration=expiration,
        )

    def _previous_lease(self, attrs: LeaseAttrs) -> Lease | None:
        """The lease subnet.env names, as a candidate to take again (its key is read first)."""
        previous = self._settings.previous
        if previous.subnet is None and previous.ipv6_subnet is None:
            return None
        return Lease(
            previous.subnet,
            previous.ipv6_subnet,
            attrs,
            enable_ipv4=previous.subnet is not None,
            enable_ipv6=previous.ipv6_subnet is not None,
        )

    async def _take_again(self, own: Lease, attrs: LeaseAttrs) -> Lease | None:
        """The node's own lease, found in a listing, taken again: as it stands when its key
        already holds ``attrs`` and time is left on its etcd lease (no write, so nothing
        reaches the other agents), else put with a new etcd lease as flannel's updateSubnet
        does. None when the key holds this node's lease no more."""
        key = self._subnet_key(own.subnet, own.ipv6_subnet)
        found, revision = await self._call(lambda c: c.range(key))
        kv = found[0] if found else None
        if kv is None or not _held_by(kv, attrs):
            return None
        log.info(
            "Found lease (ip: %s ipv6: %s) for current IP (%s), reusing",
            own.subnet,
            own.ipv6_subnet,
            attrs.public_ip,
        )
        ttl_known = None if kv.lease == 0 else UNKNOWN_TTL
        current = _lease_from_kv(kv.key, kv.value, ttl_known, kv.mod_revision)
        if kv.value == attrs.to_json().encode():
            lease: Lease | None = None
            if kv.lease == 0:
                lease = dataclasses.replace(current, attrs=attrs)
            else:
                checked = time.time()
                ttl = await self._time_to_live(kv.lease)
                if ttl is not None and ttl > 0:
                    lease = dataclasses.replace(current, attrs=attrs, expiration=checked + ttl)
            if lease is not None:
                # The own key's state as read, for complete_lease's watch to start from.
                self._own_view = (
                    key,
                    LeaseWatchBatch(events=(LeaseEvent(EventType.ADDED, lease),)),
                    revision,
                )
                return lease
        return await self._put_lease(dataclasses.replace(current, attrs=attrs))

    async def _grant(self) -> tuple[int, int]:
        """A new etcd lease for a subnet key: its ID and granted TTL."""
        return await self._call(lambda c: c.grant(self._settings.subnet_lease_ttl))

    async def _revoke_quietly(self, lease_id: int) -> None:
        try:
            await self._call(lambda c: c.revoke(lease_id))
        except ETCD_ERRORS as err:
            log.warning("Failed to revoke etcd lease %x: %s", lease_id, describe_etcd_error(err))

    async def _create_lease(
        self, subnet: IPv4Network | None, ipv6_subnet: IPv6Network | None, attrs: LeaseAttrs
    ) -> float:
        """Create the key only if it does not exist, attached to a new etcd lease."""
        key = self._subnet_key(subnet, ipv6_subnet)
        value = attrs.to_json().encode()
        granted = time.time()
        lease_id, ttl = await self._grant()
        try:
            created, _ = await self._call(lambda c: c.create(key, value, lease_id))
        except BaseException:
            await self._revoke_quietly(lease_id)
            raise
        if not created:
            await self._revoke_quietly(lease_id)
            raise _SubnetTaken(make_subnet_key(subnet, ipv6_subnet))
        return granted + ttl

    async def _put_lease(self, lease: Lease) -> Lease:
        """flannel's updateSubnet: a plain put, with a new etcd lease unless it is a
        reservation. The previous etcd lease is left to expire."""
        key = self._subnet_key(lease.subnet, lease.ipv6_subnet)
        value = lease.attrs.to_json().encode()
        if lease.expiration is None:
            await self._call(lambda c: c.put(key, value))
            return lease
        # etcd counts the TTL from the grant: the expiry reckoned here is never later than its.
        granted = time.time()
        lease_id, ttl = await self._grant()
        try:
            await self._call(lambda c: c.put(key, value, lease_id))
        except BaseException:
            await self._revoke_quietly(lease_id)
            raise
        return dataclasses.replace(lease, expiration=granted + ttl)

    async def renew_lease(self, lease: Lease) -> Lease:
        """flannel's updateSubnet, while the key is still this node's: a new etcd lease for the
        key if it holds our lease; the key created again if it has gone (its lease ran out);
        LeaseTaken when another node holds the subnet now."""
        key = self._subnet_key(lease.subnet, lease.ipv6_subnet)
        value = lease.attrs.to_json().encode()
        granted = time.time()
        lease_id, ttl = await self._grant()
        try:
            kept = await self._keep_key(lease, key, value, lease_id)
        except BaseException:
            await self._revoke_quietly(lease_id)
            raise
        if kept is None:  # the key is a reservation for this node now: nothing to renew
            await self._revoke_quietly(lease_id)
            return dataclasses.replace(lease, expiration=None)
        return dataclasses.replace(lease, expiration=granted + ttl)

    async def _keep_key(self, lease: Lease, key: bytes, value: bytes, lease_id: int) -> bool | None:
        """Attach the own key to ``lease_id``: True once done, None when it became a reservation
        for this node (kept as one). Raises LeaseTaken."""
        while True:
            replaced, held = await self._call(lambda c: c.replace(key, value, value, lease_id))
            if replaced:
                return True
            if held is None:
                created, held = await self._call(lambda c: c.create(key, value, lease_id))
                if created:
                    log.warning(
                        "Lease (ip: %s ipv6: %s) had expired; took the same subnet again",
                        lease.subnet,
                        lease.ipv6_subnet,
                    )
                    return True
                if held is None:
                    continue  # created and deleted again in between: look afresh
            if not _held_by(held, lease.attrs):
                raise LeaseTaken(_taken_message(lease, _holder(held)))
            # Ours, with other attributes (e.g. pinned by an operator): flannel's reuse by IP.
            if held.lease == 0:
                await self._call(lambda c: c.put(key, value))
                return None
            await self._call(lambda c: c.put(key, value, lease_id))
            return True

    async def watch_leases(self) -> AsyncIterator[LeaseWatchBatch]:
        view, self._allocation_view = self._allocation_view, None
        # The listing acquire_lease made (or the leases kept from the last run), at its
        # revision: the watch replays every change since, so this equals a fresh listing, one
        # listing of thousands sooner.
        listing = view if view is not None else await self._retrying(self._fresh_listing)
        if listing.catch_up > listing.revision:
            resumed = listing
            caught: _Listing | None = await self._retrying(lambda: self._caught_up(resumed))
            listing = caught if caught is not None else await self._retrying(self._fresh_listing)
        if self._record is not None:
            self._record.reset(listing.kvs, listing.revision, listing.cluster_id)
        yield LeaseWatchBatch(snapshot=tuple(listing.leases))
        prefix = self._subnets_dir
        async for batch in self._follow(
            prefix,
            prefix_range_end(prefix),
            listing.revision + 1,
            self._snapshot,
            record=self._record,
        ):
            yield batch

    async def list_leases(self) -> LeaseListing:
        """Every lease under the prefix with its expiry, and the keys that do not parse (for
        operators: `pyflannel status`)."""
        listing = await self._list_leases(with_expiry=True)
        return LeaseListing(
            tuple(ListedLease(lease) for lease in listing.leases), tuple(listing.unreadable)
        )

    async def _fresh_listing(self) -> _Listing:
        return await self._list_leases(with_expiry=False)

    async def _snapshot(self) -> tuple[LeaseWatchBatch, int]:
        listing = await self._list_leases(with_expiry=False)
        if self._record is not None:
            self._record.reset(listing.kvs, listing.revision, listing.cluster_id)
        return LeaseWatchBatch(snapshot=tuple(listing.leases)), listing.revision

    def _lease_event(self, event: WatchEvent) -> LeaseEvent:
        """Raises LeaseError for a key or value that does not parse."""
        kv = event.kv
        if event.deleted:
            return LeaseEvent(EventType.REMOVED, _removed_lease(kv.key, kv.mod_revision))
        ttl = None if kv.lease == 0 else UNKNOWN_TTL
        return LeaseEvent(EventType.ADDED, _lease_from_kv(kv.key, kv.value, ttl, kv.mod_revision))

    async def _follow(
        self,
        key: bytes,
        range_end: bytes | None,
        since: int,
        resync: Callable[[], Awaitable[tuple[LeaseWatchBatch, int]]],
        *,
        record: WatchRecord | None = None,
    ) -> AsyncIterator[LeaseWatchBatch]:
        """Watch from revision ``since`` for ever: reconnect with backoff where the last event
        left off, and after a compaction emit ``resync()`` and go on from its revision. Each
        message goes to ``record`` (which asks etcd for progress notifications)."""
        name = key.decode(errors="replace")
        backoff = Backoff()
        while not self._closed:
            try:
                watch = await self._call(
                    functools.partial(
                        EtcdClient.watch,
                        key=key,
                        range_end=range_end,
                        start_revision=since,
                        progress_notify=record is not None,
                    )
                )
                try:
                    async for response in watch.responses():
                        backoff.reset()
                        events = self._lease_events(response)
                        if record is not None:
                            record.apply(response)
                        if response.events:
                            since = response.events[-1].kv.mod_revision + 1
                        if events:
                            yield LeaseWatchBatch(events=events)
                finally:
                    watch.close()
                if self._closed:
                    return
                delay = backoff.next_delay()
                log.warning("etcd watch on %s ended, reconnecting in %.1fs", name, delay)
                self.stats.watch_restarted("closed")
            except EtcdCompacted as err:
                log.warning("etcd watch on %s: %s; re-listing", name, err)
                self.stats.watch_restarted("compacted")
                batch, revision = await self._retrying(resync)
                yield batch
                since = revision + 1
                backoff.reset()
                continue
            except ETCD_ERRORS as err:
                delay = backoff.next_delay()
                log.warning(
                    "etcd watch on %s failed, retrying in %.1fs: %s",
                    name,
                    delay,
                    describe_etcd_error(err),
                )
                self.stats.watch_restarted("error")
            await asyncio.sleep(delay)

    def _lease_events(self, response: WatchResponse) -> tuple[LeaseEvent, ...]:
        """A message's events as lease events; one that does not parse is skipped."""
        events = []
        for event in response.events:
            try:
                events.append(self._lease_event(event))
            except LeaseError as err:
                log.warning(
                    "Ignoring bad subnet event on %s: %s",
                    event.kv.key.decode(errors="replace"),
                    err,
                )
        return tuple(events)

    async def _own_lease_state(self, lease: Lease) -> tuple[LeaseWatchBatch, int]:
        key = self._subnet_key(lease.subnet, lease.ipv6_subnet)
        found, revision = await self._call(lambda c: c.range(key))
        if not found:
            return LeaseWatchBatch(events=(LeaseEvent(EventType.REMOVED, lease),)), revision
        kv = found[0]
        ttl = await self._time_to_live(kv.lease)
        try:
            current = _lease_from_kv(kv.key, kv.value, ttl, kv.mod_revision)
        except LeaseError as err:
            log.warning("Ignoring bad value of own lease %s: %s", key.decode(), err)
            return LeaseWatchBatch(), revision
        return LeaseWatchBatch(events=(LeaseEvent(EventType.ADDED, current),)), revision

    async def _watch_own_lease(self, lease: Lease) -> AsyncGenerator[LeaseWatchBatch, None]:
        """The own key's current state (as acquire_lease read it, when it wrote nothing), then
        its changes (the key alone, no prefix)."""
        key = self._subnet_key(lease.subnet, lease.ipv6_subnet)
        view, self._own_view = self._own_view, None
        if view is not None and view[0] == key:
            _, batch, revision = view
        else:
            batch, revision = await self._retrying(lambda: self._own_lease_state(lease))
        yield batch
        resync = functools.partial(self._own_lease_state, lease)
        async for batch in self._follow(key, None, revision + 1, resync):
            yield batch

    def _renew_at(self, expiration: float | None) -> float | None:
        # A margin as long as a (shortened) TTL would renew without pause: keep half of it.
        margin = min(self._settings.renew_margin, self._settings.subnet_lease_ttl / 2)
        return None if expiration is None else expiration - margin

    async def _renew(self, lease: Lease) -> Lease:
        """Renew; once the lease has run out each attempt is cut short (a partition leaves
        requests hanging), so that the first after it heals takes the subnet back at once."""
        if _expired(lease):
            return await asyncio.wait_for(self.renew_lease(lease), RECLAIM_ATTEMPT_SECONDS)
        return await self.renew_lease(lease)

    async def complete_lease(self, lease: Lease) -> None:
        """Renew the lease ahead of its expiry until cancelled; raise LeaseRevoked when the
        own key is deleted, or LeaseTaken when it ran out and another node took the subnet."""
        own_events = self._watch_own_lease(lease)
        stats = self.stats
        stats.own_lease_expiry = lease.expiration
        renew_at = self._renew_at(lease.expiration)
        failing_since: float | None = None
        pending = asyncio.ensure_future(anext(own_events))
        try:
            while True:
                timeout = None if renew_at is None else max(0.0, renew_at - time.time())
                done, _ = await asyncio.wait({pending}, timeout=timeout)
                if not done:
                    try:
                        lease = await self._renew(lease)
                    except LeaseTaken as err:
                        _log_taken(str(err))
                        raise
                    except ETCD_ERRORS as err:
                        stats.renewal_failures += 1
                        # Jittered: leases granted together (a restart storm) are renewed
                        # together, and would be retried together.
                        retry = jittered(_renew_retry(lease))
                        now = time.time()
                        if failing_since is None or now - failing_since >= RENEW_RETRY_SECONDS:
                            failing_since = now
                            log.error(
                                "Error renewing lease (trying again in %.1fs): %s",
                                retry,
                                describe_etcd_error(err),
                            )
                        renew_at = now + retry
                    else:
                        stats.renewals += 1
                        stats.own_lease_expiry = lease.expiration
                        failing_since = None
                        renew_at = self._renew_at(lease.expiration)
                        log.info("Lease renewed, new expiration: %s", _when(lease.expiration))
                    continue
                try:
                    batch = pending.result()
                except StopAsyncIteration:
                    log.info("Stopped monitoring lease")
                    return
                for event in batch.events:
                    if event.type is EventType.REMOVED:
                        if not _expired(lease, EXPIRY_SLACK_SECONDS):
                            log.error("Lease has been revoked. Shutting down daemon.")
                            raise LeaseRevoked(event.lease.key())
                        log.warning("Lease expired (etcd was not reached to renew it): renewing")
                        renew_at = time.time()
                        continue
                    if find_own_lease([event.lease], lease.attrs) is None:
                        holder = f"node {event.lease.attrs.public_ip}"
                        _log_taken(_taken_message(lease, holder))
                        raise LeaseTaken(_taken_message(lease, holder))
                    expiration = event.lease.expiration
                    if expiration is not None and math.isinf(expiration):
                        continue  # a renewal's put: its expiry is the one we reckoned
                    stats.own_lease_expiry = expiration
                    renew_at = self._renew_at(expiration)
                    if renew_at is not None:
                        log.info("Waiting for %.0fs to renew lease", renew_at - time.time())
                pending = asyncio.ensure_future(anext(own_events))
        finally:
            pending.cancel()
            await asyncio.wait({pending})  # let the watch wind down; its outcome is moot
            await own_events.aclose()

    async def release_lease(
        self, subnet: IPv4Network | None, ipv6_subnet: IPv6Network | None, *, check: bool = False
    ) -> bool:
        """Give a node's subnet back: revoke the etcd lease its key holds, which deletes the key
        (each flannel lease key has an etcd lease of its own); peers see the deletion in their
        watch. A reservation (a key without an etcd lease) stays. True when there was a lease;
        with ``check`` nothing is revoked."""
        key = self._subnet_key(subnet, ipv6_subnet)
        kv = await self._call(lambda c: c.get(key))
        if kv is None or kv.lease == 0:
            return False
        if not check:
            lease = kv.lease
            await self._call(lambda c: c.revoke(lease))
        return True

    async def get_stored_public_ip(self) -> tuple[str, str]:
        return "", ""

    async def get_stored_mac_addresses(self) -> tuple[str, str]:
        return "", ""

    async def close(self) -> None:
        self._closed = True
        if self._record is not None:
            self._record.save(force=True)
        await self._conn.close()


def _taken_message(lease: Lease, holder: str) -> str:
    subnets = ", ".join(str(s) for s in (lease.subnet, lease.ipv6_subnet) if s is not None)
    return (
        f"the lease on {subnets} expired at {_when(lease.expiration)} while etcd could not be "
        f"reached to renew it, and {holder} holds {subnets} now; this node's pods are addressed "
        f"from {subnets}, and taking another subnet would leave them unreachable"
    )


def _log_taken(message: str) -> None:
    log.error("%s", message)
    log.error("Lease has been revoked. Shutting down daemon.")


def _expired(lease: Lease, slack: float = 0.0) -> bool:
    return lease.expiration is not None and time.time() >= lease.expiration - slack


def _renew_retry(lease: Lease) -> float:
    """The longest wait before a failed renewal is tried again: flannel's minute; less for a
    lease that runs out sooner (or has), so that it is retried before it does."""
    if lease.expiration is None:
        return RENEW_RETRY_SECONDS
    left = lease.expiration - time.time()
    return min(RENEW_RETRY_SECONDS, max(RECLAIM_RETRY_SECONDS, left / 2))


def _when(expiration: float | None) -> str:
    if expiration is None:
        return "never (reservation)"
    return time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(expiration))
