"""The etcd subnet manager against a real etcd 3.4 (docs/compatibility.md, "etcd keys and lease
JSON" and "Watching leases").

Every test works below its own prefix on the shared server, or on a private server when it
changes server-wide state (TLS, auth, compaction, restarts).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any, TypeVar

import aetcd
import pytest

from pyflannel_lab.etcd_server import EtcdServer, free_port
from pyflannel_runtime.ops.reset import release_lease
from pyflannel_runtime.subnet import backoff
from pyflannel_runtime.subnet.etcd.etcd import (
    ETCD_ERRORS,
    EtcdError,
    EtcdSettings,
    EtcdSubnetManager,
)
from pyflannel_runtime.subnet.manager import (
    LeaseListing,
    LeaseRevoked,
    LeaseTaken,
    LeaseWatchBatch,
)
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs
from pyflannel_runtime.wire.subnet_env import SubnetEnv, read_previous_subnets
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data
from tests.integration.etcd_tls import make_tls_material

pytestmark = pytest.mark.etcd

T = TypeVar("T")
CONFIG = '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def attrs(ip: str, mac: str = "aa:bb:cc:00:00:01") -> LeaseAttrs:
    return LeaseAttrs(
        public_ip=IPv4Address(ip), backend_type="vxlan", backend_data=vxlan_backend_data(1, mac)
    )


def settings(server: EtcdServer, prefix: str, **extra: Any) -> EtcdSettings:
    return EtcdSettings(endpoints=(server.endpoint,), prefix=prefix, **extra)


def raw_client(server: EtcdServer) -> aetcd.Client:
    return aetcd.Client(host=server.host, port=server.client_port)


async def acquire(server: EtcdServer, prefix: str, ip: str, **extra: Any) -> Lease:
    manager = EtcdSubnetManager(settings(server, prefix, **extra))
    try:
        return await manager.acquire_lease(attrs(ip))
    finally:
        await manager.close()


async def next_batch(watch: AsyncIterator[LeaseWatchBatch]) -> LeaseWatchBatch:
    return await asyncio.wait_for(anext(watch), 20)


async def still_running(task: asyncio.Task[None]) -> None:
    """The task has not ended by itself; cancel it."""
    assert not task.done(), task
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def subnet_key(prefix: str, subnet: str) -> bytes:
    net = IPv4Network(subnet)
    return f"{prefix}/subnets/{net.network_address}-{net.prefixlen}".encode()


@pytest.fixture
def configured(etcd_server: EtcdServer, etcd_prefix: str) -> tuple[EtcdServer, str]:
    etcd_server.etcdctl("put", f"{etcd_prefix}/config", CONFIG)
    return etcd_server, etcd_prefix


# --- config ---------------------------------------------------------------------------------


def test_missing_config_has_flannels_message(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    async def body() -> None:
        manager = EtcdSubnetManager(settings(etcd_server, etcd_prefix))
        try:
            with pytest.raises(EtcdError) as err:
                await manager.get_network_config()
        finally:
            await manager.close()
        assert str(err.value) == (
            "flannel config not found in etcd store. Did you create your config using etcdv3 API?"
        )

    run(body())


def test_config_is_read_and_checked(configured: tuple[EtcdServer, str]) -> None:
    server, prefix = configured

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        try:
            cfg = await manager.get_network_config()
        finally:
            await manager.close()
        assert cfg.network == IPv4Network("10.244.0.0/16")
        assert (cfg.subnet_len, str(cfg.subnet_min), str(cfg.subnet_max)) == (
            24,
            "10.244.1.0",
            "10.244.255.0",
        )
        assert cfg.backend_type == "vxlan"

    run(body())


def test_unreachable_first_endpoint_fails_over(configured: tuple[EtcdServer, str]) -> None:
    server, prefix = configured
    dead = f"http://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there

    async def body() -> None:
        manager = EtcdSubnetManager(EtcdSettings(endpoints=(dead, server.endpoint), prefix=prefix))
        try:
            cfg = await manager.get_network_config()
        finally:
            await manager.close()
        assert cfg.network == IPv4Network("10.244.0.0/16")

    run(body())


# --- acquisition ------------------------------------------------------------------------------


def test_twenty_nodes_at_once_get_twenty_distinct_subnets(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    # 31 subnets for 20 nodes picking at random at the same moment: creation races are all
    # but certain, and each must be retried.
    etcd_server.etcdctl(
        "put", f"{etcd_prefix}/config", '{"Network": "10.244.0.0/21", "SubnetLen": 26}'
    )
    ips = [f"192.0.2.{n}" for n in range(1, 21)]

    async def body() -> None:
        leases = await asyncio.gather(*(acquire(etcd_server, etcd_prefix, ip) for ip in ips))
        assert len({lease.subnet for lease in leases}) == 20
        for ip, lease in zip(ips, leases, strict=True):
            assert lease.attrs.public_ip == IPv4Address(ip)
            assert lease.subnet is not None and lease.subnet.prefixlen == 26
        async with raw_client(etcd_server) as client:
            stored = await client.get_prefix(f"{etcd_prefix}/subnets/".encode())
            assert len(stored) == 20
            by_key = {kv.key: LeaseAttrs.from_json(kv.value) for kv in stored}
        for lease in leases:
            assert by_key[f"{etcd_prefix}/subnets/{lease.key()}".encode()] == lease.attrs

    run(body())


class StealingRandom(random.Random):
    """Lets another node create the chosen subnet's key just before this node's transaction."""

    def __init__(self, server: EtcdServer, prefix: str) -> None:
        super().__init__(7)
        self.server, self.prefix = server, prefix
        self.stolen: list[Any] = []

    def choice(self, seq: Sequence[Any]) -> Any:
        picked = seq[0]
        if not self.stolen:
            self.stolen.append(picked)
            key = subnet_key(self.prefix, str(picked)).decode()
            self.server.etcdctl("put", key, attrs("198.51.100.99").to_json())
        return picked


def test_a_lost_creation_race_is_retried(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    caplog.set_level(logging.INFO, logger="pyflannel_runtime")
    rng = StealingRandom(server, prefix)

    async def body() -> Lease:
        manager = EtcdSubnetManager(settings(server, prefix), rng=rng)
        try:
            return await manager.acquire_lease(attrs("192.0.2.1"))
        finally:
            await manager.close()

    lease = run(body())
    assert rng.stolen == [IPv4Network("10.244.1.0/24")]
    assert lease.subnet == IPv4Network("10.244.2.0/24")
    assert "was taken by another node meanwhile, retrying" in caplog.text
    stolen = server.etcdctl("get", "--print-value-only", f"{prefix}/subnets/10.244.1.0-24")
    assert "198.51.100.99" in stolen


def test_restart_reuses_the_lease_of_the_same_public_ip(
    configured: tuple[EtcdServer, str],
) -> None:
    server, prefix = configured

    async def body() -> None:
        first = await acquire(server, prefix, "192.0.2.1")
        other = await acquire(server, prefix, "192.0.2.2")
        manager = EtcdSubnetManager(settings(server, prefix))
        try:
            again = await manager.acquire_lease(attrs("192.0.2.1", mac="aa:bb:cc:00:00:99"))
        finally:
            await manager.close()
        assert again.subnet == first.subnet != other.subnet
        assert again.expiration is not None and again.expiration > time.time() + 86000
        async with raw_client(server) as client:
            kv = await client.get(f"{prefix}/subnets/{first.key()}".encode())
            assert kv.value.decode() == (
                '{"PublicIP":"192.0.2.1","PublicIPv6":null,"BackendType":"vxlan",'
                '"BackendData":{"VNI":1,"VtepMAC":"aa:bb:cc:00:00:99"}}'
            )
            assert kv.lease != 0
            info = await client.get_lease_info(kv.lease, keys=False)
            assert info.grantedTTL == 86400

    run(body())


def test_restart_reuses_the_subnet_from_subnet_env_when_the_key_is_gone(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    caplog.set_level(logging.INFO, logger="pyflannel_runtime")

    async def body() -> None:
        first = await acquire(server, prefix, "192.0.2.1")
        env = SubnetEnv(IPv4Network("10.244.0.0/16"), first.subnet, None, None, 1450, True)
        async with raw_client(server) as client:
            await client.delete(f"{prefix}/subnets/{first.key()}".encode())
        previous = read_previous_subnets(env.render())
        # A new public IP, so only subnet.env can lead back to the old subnet.
        again = await acquire(server, prefix, "192.0.2.77", previous=previous)
        assert again.subnet == first.subnet

    run(body())
    assert "Found previously leased subnet (" in caplog.text


def test_an_incompatible_own_lease_is_deleted(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    caplog.set_level(logging.INFO, logger="pyflannel_runtime")
    old_key = f"{prefix}/subnets/10.99.3.0-24"
    server.etcdctl("put", old_key, attrs("192.0.2.1").to_json())

    lease = run(acquire(server, prefix, "192.0.2.1"))

    assert lease.subnet is not None and lease.subnet.subnet_of(IPv4Network("10.244.0.0/16"))
    assert server.etcdctl("get", old_key) == ""
    assert "not compatible with current config, deleting" in caplog.text


def test_reservations_are_honoured(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    # SubnetMin 10.244.0.4, SubnetMax 10.244.0.12: three /30 subnets.
    etcd_server.etcdctl(
        "put", f"{etcd_prefix}/config", '{"Network": "10.244.0.0/28", "SubnetLen": 30}'
    )
    for ip, subnet in (("192.0.2.1", "10.244.0.4/30"), ("192.0.2.2", "10.244.0.8/30")):
        etcd_server.etcdctl("put", subnet_key(etcd_prefix, subnet).decode(), attrs(ip).to_json())

    async def body() -> None:
        stranger = await acquire(etcd_server, etcd_prefix, "192.0.2.3")
        assert stranger.subnet == IPv4Network("10.244.0.12/30")
        owner = await acquire(etcd_server, etcd_prefix, "192.0.2.1")
        assert owner.subnet == IPv4Network("10.244.0.4/30")
        assert owner.expiration is None
        async with raw_client(etcd_server) as client:
            kv = await client.get(subnet_key(etcd_prefix, "10.244.0.4/30"))
            assert kv.lease == 0  # still a reservation
        with pytest.raises(Exception, match=r"^out of subnets$"):
            await acquire(etcd_server, etcd_prefix, "192.0.2.4")

    run(body())


def test_unparseable_leases_are_skipped_with_a_warning(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    server.etcdctl("put", f"{prefix}/subnets/not-a-subnet", attrs("192.0.2.9").to_json())
    server.etcdctl("put", f"{prefix}/subnets/10.244.1.0-24", "not json")

    lease = run(acquire(server, prefix, "192.0.2.1"))

    # The unparseable key still occupies its subnet: if the random pick lands on it, the
    # creation fails and is retried (listing, and warning, once more).
    assert lease.subnet not in (None, IPv4Network("10.244.1.0/24"))
    warned = {
        r.getMessage().split()[4].rstrip(":")
        for r in caplog.records
        if r.getMessage().startswith("Ignoring bad subnet node")
    }
    assert warned == {f"{prefix}/subnets/not-a-subnet", f"{prefix}/subnets/10.244.1.0-24"}

    async def listing() -> LeaseListing:
        manager = EtcdSubnetManager(settings(server, prefix))
        try:
            return await manager.list_leases()
        finally:
            await manager.close()

    # Operators see them: `pyflannel status` lists what the listing could not read.
    unreadable = {u.name: u.reason for u in run(listing()).unreadable}
    assert set(unreadable) == {"not-a-subnet", "10.244.1.0-24"}
    assert unreadable["not-a-subnet"] == f"invalid subnet key: {prefix}/subnets/not-a-subnet"


# --- renewal and revocation --------------------------------------------------------------------


def test_renewal_keeps_a_short_lease_alive(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    caplog.set_level(logging.INFO, logger="pyflannel_runtime")
    short = {"subnet_lease_ttl": 3, "renew_margin_seconds_override": 2.0}

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix, **short))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            key = f"{prefix}/subnets/{lease.key()}".encode()
            async with raw_client(server) as client:
                first_lease_id = (await client.get(key)).lease
                completing = asyncio.create_task(manager.complete_lease(lease))
                # The first etcd lease lapses after 3 s; the key must outlive it.
                while (await client.get_lease_info(first_lease_id, keys=False)).TTL != -1:
                    await asyncio.sleep(0.2)
                kv = await client.get(key)
                assert kv is not None and kv.lease != first_lease_id
                await still_running(completing)
        finally:
            await manager.close()

    run(body())
    assert "Lease renewed, new expiration: " in caplog.text


def test_renewals_go_on_after_the_first(configured: tuple[EtcdServer, str]) -> None:
    """The renewal's own put comes back through the own-key watch with no TTL looked up: it
    must not stop the renewals (the key would lapse one TTL after the first)."""
    server, prefix = configured
    short = {"subnet_lease_ttl": 2, "renew_margin_seconds_override": 1.0}

    async def body() -> set[int]:
        manager = EtcdSubnetManager(settings(server, prefix, **short))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            key = f"{prefix}/subnets/{lease.key()}".encode()
            completing = asyncio.create_task(manager.complete_lease(lease))
            seen = set()
            async with raw_client(server) as client:
                for _ in range(35):  # 7 s: three TTLs and more
                    kv = await client.get(key)
                    assert kv is not None, "the key lapsed"
                    seen.add(kv.lease)
                    await asyncio.sleep(0.2)
            await still_running(completing)
            return seen
        finally:
            await manager.close()

    assert len(run(body())) >= 4  # the first etcd lease and at least three renewals


def test_renewals_their_failures_and_watch_restarts_are_counted(etcd_factory: Any) -> None:
    """What the agent's metrics read: renewals, failed ones while etcd is down, the own key's
    watch restarts, and the expiry of the last renewal."""
    server: EtcdServer = etcd_factory()
    prefix = "/coreos.com/network"
    server.etcdctl("put", f"{prefix}/config", CONFIG)
    short = {"subnet_lease_ttl": 4, "renew_margin_seconds_override": 2.0}

    async def until(predicate: Callable[[], bool]) -> None:
        while not predicate():
            await asyncio.sleep(0.05)

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix, **short))
        stats = manager.stats
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            completing = asyncio.create_task(manager.complete_lease(lease))
            assert stats.watch_restarts == {"closed": 0, "compacted": 0, "error": 0}
            await until(lambda: stats.renewals >= 1)
            assert stats.renewal_failures == 0
            assert stats.own_lease_expiry is not None and stats.own_lease_expiry > time.time()
            await asyncio.to_thread(server.kill)
            await until(lambda: stats.renewal_failures >= 1 and stats.watch_restarts["error"] >= 1)
            renewed = stats.renewals
            await asyncio.to_thread(server.spawn)
            await until(lambda: stats.renewals > renewed)
            await still_running(completing)
        finally:
            await manager.close()

    run(body())


def test_a_key_that_ran_out_is_taken_back_with_the_same_subnet(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    caplog.set_level(logging.INFO, logger="pyflannel_runtime")
    # Renewing 1 s after the expiry: the key runs out first, as when etcd cannot be reached.
    late = {"subnet_lease_ttl": 2, "renew_margin_seconds_override": -1.0}

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix, **late))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            key = f"{prefix}/subnets/{lease.key()}".encode()
            completing = asyncio.create_task(manager.complete_lease(lease))
            async with raw_client(server) as client:
                while await client.get(key) is not None:
                    await asyncio.sleep(0.05)
                while (kv := await client.get(key)) is None:
                    assert not completing.done(), completing
                    await asyncio.sleep(0.05)
                assert LeaseAttrs.from_json(kv.value) == attrs("192.0.2.1")
                assert kv.lease != 0
            # The key is visible to other clients before the manager has read etcd's answer
            # to its create and logged it.
            while "had expired; took the same subnet again" not in caplog.text:
                assert not completing.done(), completing
                await asyncio.sleep(0.05)
            await still_running(completing)
        finally:
            await manager.close()

    run(body())


def test_renewal_never_overwrites_a_lease_another_node_took(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    """flannel renews with a plain put: after a partition it would take back a subnet that
    another node was given meanwhile."""
    server, prefix = configured

    async def body() -> bytes:
        manager = EtcdSubnetManager(settings(server, prefix))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            key = f"{prefix}/subnets/{lease.key()}".encode()
            other = attrs("192.0.2.2", "aa:bb:cc:00:00:02").to_json().encode()
            async with raw_client(server) as client:
                await client.delete(key)  # ran out ...
                await client.put(key, other)  # ... and another node took it
                with pytest.raises(LeaseTaken, match=r"and node 192\.0\.2\.2 holds 10\.244"):
                    await manager.renew_lease(lease)
                return (await client.get(key)).value  # type: ignore[no-any-return]
        finally:
            await manager.close()

    assert LeaseAttrs.from_json(run(body())).public_ip == IPv4Address("192.0.2.2")


@pytest.mark.parametrize("how", ["delete the key", "revoke its etcd lease"])
def test_losing_the_own_key_raises_lease_revoked(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture, how: str
) -> None:
    server, prefix = configured

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            completing = asyncio.create_task(manager.complete_lease(lease))
            await asyncio.sleep(0.5)  # let it settle into watching; either way it must notice
            assert not completing.done()
            key = f"{prefix}/subnets/{lease.key()}".encode()
            async with raw_client(server) as client:
                if how == "delete the key":
                    await client.delete(key)
                else:
                    await client.revoke_lease((await client.get(key)).lease)
            with pytest.raises(LeaseRevoked):
                await asyncio.wait_for(completing, 20)
        finally:
            await manager.close()

    run(body())
    assert "Lease has been revoked. Shutting down daemon." in caplog.text


# --- watching --------------------------------------------------------------------------------


def test_the_watch_starts_from_the_allocations_listing_and_misses_nothing(
    configured: tuple[EtcdServer, str],
) -> None:
    server, prefix = configured
    server.etcdctl("put", f"{prefix}/subnets/10.244.7.0-24", attrs("192.0.2.7").to_json())
    later = IPv4Network("10.244.8.0/24")

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        watch = manager.watch_leases()
        try:
            own = await manager.acquire_lease(attrs("192.0.2.1"))
            server.etcdctl("put", f"{prefix}/subnets/10.244.8.0-24", attrs("192.0.2.8").to_json())
            first = await next_batch(watch)
            # The listing made before the own lease was created...
            assert first.snapshot is not None
            assert [lease.subnet for lease in first.snapshot] == [IPv4Network("10.244.7.0/24")]
            # ...and every change since, in order.
            seen: list[IPv4Network | None] = []
            while later not in seen:
                seen += [event.lease.subnet for event in (await next_batch(watch)).events]
            assert seen == [own.subnet, later]
        finally:
            await watch.aclose()
            await manager.close()

    run(body())


def test_watch_reports_peers_added_updated_and_removed(configured: tuple[EtcdServer, str]) -> None:
    server, prefix = configured
    reserved = subnet_key(prefix, "10.244.7.0/24")
    server.etcdctl("put", reserved.decode(), attrs("192.0.2.7").to_json())

    async def body() -> None:
        a = await acquire(server, prefix, "192.0.2.1")
        manager = EtcdSubnetManager(settings(server, prefix))
        watch = manager.watch_leases()
        try:
            first = await next_batch(watch)
            assert first.snapshot is not None and first.events == ()
            by_subnet = {lease.subnet: lease for lease in first.snapshot}
            assert set(by_subnet) == {a.subnet, IPv4Network("10.244.7.0/24")}
            assert by_subnet[a.subnet].attrs == attrs("192.0.2.1")
            assert by_subnet[a.subnet].expiration is not None
            assert by_subnet[IPv4Network("10.244.7.0/24")].expiration is None

            async with raw_client(server) as client:
                b_key = subnet_key(prefix, "10.244.9.0/24")
                etcd_lease = await client.lease(600)
                await client.put(b_key, attrs("192.0.2.9").to_json().encode(), lease=etcd_lease)
                (added,) = (await next_batch(watch)).events
                assert added.type is EventType.ADDED
                assert added.lease.subnet == IPv4Network("10.244.9.0/24")
                assert added.lease.attrs == attrs("192.0.2.9")
                # The watch does not look up TTLs (the datapath never needs them) ...
                assert added.lease.expiration == math.inf
                # ... while the listing operators see does.
                listing = await manager.list_leases()
                listed = {row.lease.subnet: row.lease for row in listing.leases}
                expiry = listed[IPv4Network("10.244.9.0/24")].expiration
                assert expiry is not None
                assert time.time() + 590 < expiry <= time.time() + 601
                assert listed[IPv4Network("10.244.7.0/24")].expiration is None

                new_attrs = attrs("192.0.2.9", mac="aa:bb:cc:00:00:10")
                await client.put(b_key, new_attrs.to_json().encode(), lease=etcd_lease)
                (updated,) = (await next_batch(watch)).events
                assert (updated.type, updated.lease.attrs) == (EventType.ADDED, new_attrs)

                await client.delete(subnet_key(prefix, str(a.subnet)))
                (removed,) = (await next_batch(watch)).events
                assert removed.type is EventType.REMOVED
                assert (removed.lease.subnet, removed.lease.ipv6_subnet) == (a.subnet, None)

                await client.revoke_lease(etcd_lease.id)  # expiry looks the same
                (expired,) = (await next_batch(watch)).events
                assert expired.type is EventType.REMOVED
                assert expired.lease.subnet == IPv4Network("10.244.9.0/24")
        finally:
            await watch.aclose()
            await manager.close()

    run(body())


def test_watch_skips_malformed_keys_and_values(
    configured: tuple[EtcdServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, prefix = configured
    server.etcdctl("put", f"{prefix}/subnets/10.244.3.0-24", attrs("192.0.2.3").to_json())

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        watch = manager.watch_leases()
        try:
            first = await next_batch(watch)
            assert first.snapshot is not None and len(first.snapshot) == 1
            async with raw_client(server) as client:
                await client.put(f"{prefix}/subnets/junk".encode(), b'{"PublicIP":"192.0.2.5"}')
                await client.put(subnet_key(prefix, "10.244.5.0/24"), b"{not json")
                await client.put(subnet_key(prefix, "10.244.6.0/24"), b'"a string"')
                await client.put(
                    subnet_key(prefix, "10.244.8.0/24"), attrs("192.0.2.8").to_json().encode()
                )
            # No snapshot (which would drop 10.244.3.0/24) and no event for the bad ones.
            following = await next_batch(watch)
            assert following.snapshot is None
            (added,) = following.events
            assert added.lease.subnet == IPv4Network("10.244.8.0/24")
        finally:
            await watch.aclose()
            await manager.close()

    run(body())
    assert caplog.text.count("Ignoring bad subnet event") == 3


def test_watch_relists_after_compaction(etcd_factory: Any) -> None:
    server: EtcdServer = etcd_factory()
    prefix = "/coreos.com/network"
    server.etcdctl("put", f"{prefix}/config", CONFIG)
    server.etcdctl("put", f"{prefix}/subnets/10.244.1.0-24", attrs("192.0.2.1").to_json())

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        watch = manager.watch_leases()
        try:
            first = await next_batch(watch)
            assert first.snapshot is not None and len(first.snapshot) == 1
            # The watch starts on the next read: make its start revision history first.
            async with raw_client(server) as client:
                await client.delete(subnet_key(prefix, "10.244.1.0/24"))
                put = await client.put(
                    subnet_key(prefix, "10.244.2.0/24"), attrs("192.0.2.2").to_json().encode()
                )
                await client.compact(put.header.revision, physical=True)
                relisted = await next_batch(watch)
                assert relisted.snapshot is not None
                assert [lease.subnet for lease in relisted.snapshot] == [
                    IPv4Network("10.244.2.0/24")
                ]
                await client.put(
                    subnet_key(prefix, "10.244.3.0/24"), attrs("192.0.2.3").to_json().encode()
                )
                (added,) = (await next_batch(watch)).events
                assert added.lease.subnet == IPv4Network("10.244.3.0/24")
            assert manager.stats.watch_restarts["compacted"] == 1
        finally:
            await watch.aclose()
            await manager.close()

    run(body())


def test_watch_resumes_where_it_left_off_after_etcd_restarts(
    etcd_factory: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """...reconnecting after jittered waits (up to 0.1 s, doubling with each failure in a
    row), each logged as it is slept."""
    server: EtcdServer = etcd_factory()
    prefix = "/coreos.com/network"
    draws: list[float] = []
    slept: list[float] = []
    real_sleep = asyncio.sleep

    def draw() -> float:
        draws.append(random.random())
        return draws[-1]

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(delay)

    monkeypatch.setattr(backoff, "jitter_source", draw)

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix))
        watch = manager.watch_leases()
        try:
            assert (await next_batch(watch)).snapshot == ()
            server.etcdctl("put", f"{prefix}/subnets/10.244.1.0-24", attrs("192.0.2.1").to_json())
            (one,) = (await next_batch(watch)).events
            assert one.lease.subnet == IPv4Network("10.244.1.0/24")
            pending = asyncio.ensure_future(next_batch(watch))
            with monkeypatch.context() as patch:
                patch.setattr(asyncio, "sleep", sleep)
                await asyncio.to_thread(server.restart)
                server.etcdctl(
                    "put", f"{prefix}/subnets/10.244.2.0-24", attrs("192.0.2.2").to_json()
                )
                (two,) = (await pending).events
            assert two.lease.subnet == IPv4Network("10.244.2.0/24")
        finally:
            await watch.aclose()
            await manager.close()

    with caplog.at_level(logging.WARNING, logger="pyflannel_runtime.subnet.etcd"):
        run(body())
    assert slept, "the watch broke and was opened again"
    assert slept == [min(5.0, 0.1 * 2**n) * d for n, d in enumerate(draws)]
    logged = [
        m.group(1)
        for r in caplog.records
        if (m := re.search(r"(?:reconnecting|retrying) in (\d+\.\d)s", r.getMessage()))
    ]
    assert logged == [f"{delay:.1f}" for delay in slept]


# --- TLS and auth ---------------------------------------------------------------------------


def test_tls_with_client_certificates(
    etcd_factory: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = make_tls_material(tmp_path / "pki")
    server: EtcdServer = etcd_factory(tls=tls)
    prefix = "/coreos.com/network"
    server.etcdctl("put", f"{prefix}/config", CONFIG)
    secure = settings(
        server, prefix, certfile=tls.client_cert, keyfile=tls.client_key, cafile=tls.ca_file
    )
    plain = EtcdSettings(
        endpoints=(f"http://127.0.0.1:{server.client_port}",), prefix=prefix, request_timeout=3
    )

    async def body() -> None:
        manager = EtcdSubnetManager(secure)
        assert "no certificate provided" not in caplog.text
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            assert lease.subnet is not None
        finally:
            await manager.close()
        insecure = EtcdSubnetManager(plain)
        try:
            with pytest.raises(ETCD_ERRORS):
                await insecure.get_network_config()
        finally:
            await insecure.close()

    run(body())
    assert "no certificate provided: connecting to etcd with http. This is insecure" in caplog.text


def test_username_and_password(etcd_factory: Any) -> None:
    # Tokens live 1 s here, so the manager must fetch a new one after idling.
    server: EtcdServer = etcd_factory(extra_args=["--auth-token-ttl=1"])
    server.etcdctl("user", "add", "root:rootpw")
    server.etcdctl("user", "grant-role", "root", "root")
    server.etcdctl("auth", "enable")
    prefix = "/coreos.com/network"
    server.etcdctl("put", f"{prefix}/config", CONFIG, user="root:rootpw")

    async def body() -> None:
        manager = EtcdSubnetManager(settings(server, prefix, username="root", password="rootpw"))
        try:
            lease = await manager.acquire_lease(attrs("192.0.2.1"))
            assert lease.subnet is not None
            await asyncio.sleep(2.5)
            assert (await manager.get_network_config()).network == IPv4Network("10.244.0.0/16")
        finally:
            await manager.close()
        for wrong in ({"username": "root", "password": "nope"}, {}):
            denied = EtcdSubnetManager(settings(server, prefix, **wrong))
            try:
                with pytest.raises(ETCD_ERRORS):
                    await denied.get_network_config()
            finally:
                await denied.close()

    run(body())


# --- reset.yml's lease release ---------------------------------------------------------------


def test_a_reset_releases_the_lease_subnet_env_names_and_keeps_a_reservation(
    configured: tuple[EtcdServer, str], tmp_path: Path
) -> None:
    server, prefix = configured
    lease = run(acquire(server, prefix, "192.0.2.21"))
    assert lease.subnet is not None
    key = subnet_key(prefix, str(lease.subnet)).decode()
    subnet_env = tmp_path / "subnet.env"
    subnet_env.write_text(
        SubnetEnv(IPv4Network("10.244.0.0/16"), lease.subnet, None, None, 1450, True).render()
    )
    store = settings(server, prefix)

    assert release_lease(store, str(subnet_env), check=True) == str(lease.subnet)
    assert server.etcdctl("get", "--print-value-only", key).strip() == lease.attrs.to_json()
    assert release_lease(store, str(subnet_env), check=False) == str(lease.subnet)
    assert server.etcdctl("get", key) == ""
    assert release_lease(store, str(subnet_env), check=False) is None

    # A pinned subnet (a key without an etcd lease) is the inventory's, not the node's to give.
    server.etcdctl("put", key, attrs("192.0.2.21").to_json())
    assert release_lease(store, str(subnet_env), check=False) is None
    assert server.etcdctl("get", "--print-value-only", key).strip() == attrs("192.0.2.21").to_json()
    assert release_lease(store, str(tmp_path / "gone.env"), check=False) is None
