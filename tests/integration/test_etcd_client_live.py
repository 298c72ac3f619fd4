"""The JSON-gateway etcd client against a real etcd 3.4, and against aetcd (gRPC) as a peer.

Tests on the shared server stay below their own prefix; compaction and restarts get a private
server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import aetcd
import pytest

from pyflannel_lab.etcd_server import EtcdServer, free_port
from pyflannel_runtime.subnet.etcd.client import (
    Endpoint,
    EtcdClient,
    EtcdCompacted,
    EtcdUnavailable,
    KeyValue,
    WatchEvent,
    prefix_range_end,
)

pytestmark = pytest.mark.etcd

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def connected(server: EtcdServer, **options: Any) -> AsyncIterator[EtcdClient]:
    client = EtcdClient(Endpoint(server.host, server.client_port), **options)
    try:
        yield client
    finally:
        await client.close()


def raw_client(server: EtcdServer) -> aetcd.Client:
    return aetcd.Client(host=server.host, port=server.client_port)


def test_binary_keys_and_values_round_trip(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    base = etcd_prefix.encode() + b"/bin/"
    stored = {base + b"\x00": b"\x00\xff\x00", base + b"a\xff": b"", base + b"\xff\xff": b"\xff"}
    outside = [base[:-1], base[:-1] + b"0"]  # just before and at prefix_range_end(base)

    async def body() -> None:
        async with connected(etcd_server) as client:
            for key in outside:
                await client.put(key, b"outside")
            for key, value in stored.items():
                await client.put(key, value)
            kvs, revision = await client.range(base, prefix_range_end(base))
            assert [(kv.key, kv.value, kv.lease) for kv in kvs] == [
                (key, stored[key], 0) for key in sorted(stored)
            ]
            last = await client.get(base + b"\xff\xff")
            assert last is not None and revision == last.mod_revision
            assert await client.get(base + b"\x01") is None

            await client.delete(base + b"\x00")
            assert await client.get(base + b"\x00") is None
            kvs, after = await client.range(base, prefix_range_end(base))
            assert [kv.key for kv in kvs] == [base + b"a\xff", base + b"\xff\xff"]
            assert after == revision + 1

    run(body())


def test_create_only_when_absent(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    key = f"{etcd_prefix}/subnets/10.244.1.0-24".encode()

    async def body() -> None:
        async with connected(etcd_server) as client:
            assert await client.create(key, b"first", 0) == (True, None)
            created, held = await client.create(key, b"second", 0)
            assert created is False and held is not None and held.value == b"first"
            kv = await client.get(key)
            assert kv is not None and (kv.value, kv.lease) == (b"first", 0)

    run(body())


def test_lease_grant_time_to_live_and_revoke(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    key = f"{etcd_prefix}/leased".encode()

    async def body() -> None:
        async with connected(etcd_server) as client:
            lease, ttl = await client.grant(30)
            assert lease > 0 and ttl == 30
            assert await client.time_to_live(lease) in (29, 30)
            await client.put(key, b"v", lease)
            kv = await client.get(key)
            assert kv is not None and kv.lease == lease
            await client.revoke(lease)
            assert await client.time_to_live(lease) == -1
            assert await client.get(key) is None  # revoking deleted the attached key

    run(body())


def test_a_live_lease_in_its_last_second_has_ttl_zero(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    key = f"{etcd_prefix}/short".encode()

    async def body() -> None:
        async with connected(etcd_server) as client:
            lease, _ = await client.grant(1)
            await client.put(key, b"v", lease)
            ttl = await client.time_to_live(lease)
            assert await client.get(key) is not None  # the lease has not expired
            assert ttl == 0

    run(body())


def test_watch_from_a_revision_sees_puts_then_deletes(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    base = f"{etcd_prefix}/w/".encode()

    async def body() -> None:
        async with connected(etcd_server) as client:
            lease, _ = await client.grant(60)
            await client.put(base + b"a", b"\x00one")
            first = await client.get(base + b"a")
            assert first is not None
            await client.put(base + b"b\xff", b"two", lease)
            await client.delete(base + b"a")
            watch = await client.watch(base, prefix_range_end(base), first.mod_revision)
            try:
                events = watch.events()
                history = [await anext(events) for _ in range(3)]
                await client.put(base + b"c", b"live")
                live = await asyncio.wait_for(anext(events), 10)
            finally:
                watch.close()
            await client.revoke(lease)
        r = first.mod_revision
        assert history == [
            WatchEvent(False, KeyValue(base + b"a", b"\x00one", 0, r)),
            WatchEvent(False, KeyValue(base + b"b\xff", b"two", lease, r + 1)),
            WatchEvent(True, KeyValue(base + b"a", b"", 0, r + 2)),
        ]
        assert live == WatchEvent(False, KeyValue(base + b"c", b"live", 0, r + 3))

    run(body())


def test_watch_from_a_compacted_revision_raises(etcd_factory: Any) -> None:
    server: EtcdServer = etcd_factory()

    async def body() -> None:
        async with connected(server) as client:
            for value in (b"1", b"2", b"3"):
                await client.put(b"/compacted", value)
            kv = await client.get(b"/compacted")
            assert kv is not None
            server.etcdctl("compact", str(kv.mod_revision))
            with pytest.raises(EtcdCompacted) as err:
                watch = await client.watch(b"/compacted", None, 1)
                try:
                    await asyncio.wait_for(anext(watch.events()), 10)
                finally:
                    watch.close()
            assert err.value.compact_revision == kv.mod_revision

    run(body())


def test_aetcd_reads_what_this_client_writes_and_vice_versa(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    ours = f"{etcd_prefix}/ours/".encode() + b"\x00\xff"
    theirs = f"{etcd_prefix}/theirs/".encode() + b"\xff\x00"
    value = bytes(range(256))

    async def body() -> None:
        async with connected(etcd_server) as client, raw_client(etcd_server) as grpc:
            lease, _ = await client.grant(60)
            await client.put(ours, value, lease)
            read = await grpc.get(ours)
            assert read is not None
            assert (read.key, read.value, read.lease) == (ours, value, lease)

            put = await grpc.put(theirs, value[::-1])
            kv = await client.get(theirs)
            assert kv == KeyValue(theirs, value[::-1], 0, put.header.revision)

            listed = await grpc.get_prefix(etcd_prefix.encode())
            prefix = etcd_prefix.encode()
            kvs, revision = await client.range(prefix, prefix_range_end(prefix))
            assert [(kv.key, kv.value, kv.lease, kv.mod_revision) for kv in kvs] == [
                (kv.key, kv.value, kv.lease, kv.mod_revision) for kv in listed
            ]
            assert revision == listed.header.revision
            await grpc.revoke_lease(lease)

    run(body())


def test_a_pooled_connection_survives_an_etcd_restart(etcd_factory: Any) -> None:
    server: EtcdServer = etcd_factory()

    async def body() -> None:
        async with connected(server) as client:
            await client.put(b"/k", b"before")
            assert len(client._idle) == 1  # the next request goes out on this connection
            await asyncio.to_thread(server.restart)
            kv = await client.get(b"/k")
            assert kv is not None and kv.value == b"before"
            assert len(client._idle) == 1  # the stale one was dropped, the fresh one kept

    run(body())


def test_a_closed_port_is_unavailable() -> None:
    async def body() -> None:
        client = EtcdClient(Endpoint("127.0.0.1", free_port("127.0.0.1")), timeout=5)
        try:
            with pytest.raises(EtcdUnavailable, match=r"^127\.0\.0\.1:\d+: "):
                await client.get(b"/k")
        finally:
            await client.close()

    run(body())


def test_two_hundred_concurrent_requests_share_at_most_eight_connections(
    etcd_server: EtcdServer,
) -> None:
    async def body() -> None:
        async with connected(etcd_server) as client:
            lease, _ = await client.grant(60)
            ttls = await asyncio.gather(*(client.time_to_live(lease) for _ in range(200)))
            assert len(ttls) == 200 and set(ttls) <= {59, 60}
            assert 1 <= len(client._idle) <= 8
            await client.revoke(lease)

    run(body())
