"""The etcd JSON-gateway client's wire handling, fed with bytes captured from etcd 3.4."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import socket
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.subnet.etcd import client as client_module
from pyflannel_runtime.subnet.etcd.client import (
    Endpoint,
    EtcdClient,
    EtcdClientError,
    EtcdCompacted,
    EtcdStatusError,
    EtcdUnauthenticated,
    EtcdUnavailable,
    Header,
    KeyValue,
    RangeReply,
    Watch,
    WatchEvent,
    WatchResponse,
    _Connection,
    prefix_range_end,
)

T = TypeVar("T")
S = TypeVar("S", bytes, list[WatchEvent])

HEADER = (
    '{"cluster_id":"14841639068965178418","member_id":"10276657743932975437",'
    '"revision":"%d","raft_term":"2"}'
)
UNARY_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 114\r\n\r\n"
    b'{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437",'
    b'"revision":"2","raft_term":"2"}}'
)
COMPACTED_JSON = (
    b'{"error":"etcdserver: mvcc: required revision has been compacted",'
    b'"message":"etcdserver: mvcc: required revision has been compacted","code":11}'
)
COMPACTED_ERROR = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
    b"Trailer: Grpc-Trailer-Content-Type\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"8f\r\n" + COMPACTED_JSON + b"\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n"
)
CREATED = b'{"result":{"header":%s,"created":true}}' % (HEADER % 2).encode()
DELETED_B = (
    b'{"result":{"header":%s,"events":[{"type":"DELETE","kv":{"key":"L2EvYg==",'
    b'"mod_revision":"3"}}]}}' % (HEADER % 3).encode()
)
PUT_A = (
    b'{"result":{"header":%s,"events":[{"kv":{"key":"L2Ev/w==","create_revision":"4",'
    b'"mod_revision":"4","version":"1","value":"AP8K","lease":"7587869197706540036"}}]}}'
    % (HEADER % 4).encode()
)
COMPACTION = (
    b'{"result":{"header":%s,"canceled":true,"compact_revision":"2"}}' % (HEADER % 5).encode()
)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, 10))


def chunked(*chunks: bytes, trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks if chunk)
    return body + b"0\r\n" + trailer + b"\r\n"


def split(data: S, cuts: list[int]) -> list[S]:
    """``data`` cut at the given points (taken modulo its length)."""
    points = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


@contextlib.asynccontextmanager
async def fed(*pieces: bytes, eof: bool = True) -> AsyncIterator[_Connection]:
    """A _Connection reading ``pieces`` (fed as they are); its writer is a socketpair end."""
    ours, theirs = socket.socketpair()
    with theirs:
        _, writer = await asyncio.open_connection(sock=ours)
        reader = asyncio.StreamReader()
        for piece in pieces:
            reader.feed_data(piece)
        if eof:
            reader.feed_eof()
        connection = _Connection(reader, writer)
        try:
            yield connection
        finally:
            connection.close()


# --- prefix_range_end -----------------------------------------------------------------------

# Bytes near the edges, so that prefixes end in 0xff runs and keys straddle the range end.
edge_bytes = st.binary(max_size=6) | st.lists(st.sampled_from([0, 1, 0x7F, 0xFE, 0xFF])).map(bytes)


def in_range(key: bytes, start: bytes, end: bytes) -> bool:
    return start <= key and (end == b"\0" or key < end)  # "\0": every key from start on


@given(prefix=edge_bytes, tail=edge_bytes, other=edge_bytes)
def test_prefix_range_end_selects_exactly_the_prefixed_keys(
    prefix: bytes, tail: bytes, other: bytes
) -> None:
    end = prefix_range_end(prefix)
    for key in (prefix + tail, other, prefix[:-1] + other, prefix[:-1]):
        assert key.startswith(prefix) == in_range(key, prefix, end), (prefix, key, end)


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"/a/", b"/a0"),
        (b"a\xff", b"b"),
        (b"a\xfe\xff\xff", b"a\xff"),
        (b"\x00", b"\x01"),
        (b"\xff\xff", b"\0"),
        (b"", b"\0"),
    ],
)
def test_prefix_range_end_examples(prefix: bytes, end: bytes) -> None:
    assert prefix_range_end(prefix) == end


# --- HTTP heads and bodies --------------------------------------------------------------------


def test_content_length_response() -> None:
    async def body() -> tuple[int, dict[str, str], bytes, bool, bytes]:
        async with fed(UNARY_OK + b"HTTP/1.1 204") as conn:
            status, headers = await conn.read_head()
            data = await conn.read_body(headers)
            return status, headers, data, conn.reusable, await conn.reader.read()

    status, headers, data, reusable, rest = run(body())
    assert (status, reusable, rest) == (200, True, b"HTTP/1.1 204")
    assert headers == {"content-type": "application/json", "content-length": "114"}
    assert json.loads(data)["header"]["revision"] == "2"


def test_chunked_error_response_with_trailer_leaves_the_next_response_intact() -> None:
    async def body() -> tuple[int, bytes, int, bytes]:
        async with fed(COMPACTED_ERROR + UNARY_OK) as conn:
            status, headers = await conn.read_head()
            data = await conn.read_body(headers)
            next_status, next_headers = await conn.read_head()
            return status, data, next_status, await conn.read_body(next_headers)

    status, data, next_status, next_data = run(body())
    assert (status, data, next_status) == (400, COMPACTED_JSON, 200)
    assert next_data == UNARY_OK.split(b"\r\n\r\n", 1)[1]


def test_connection_close_is_not_reusable() -> None:
    async def body() -> bool:
        async with fed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") as c:
            await c.read_head()
            return c.reusable

    assert run(body()) is False


@given(
    payload=st.binary(max_size=300),
    chunk_cuts=st.lists(st.integers(0, 300), max_size=6),
    feed_cuts=st.lists(st.integers(0, 600), max_size=8),
    extension=st.sampled_from([b"", b";name=value"]),
)
def test_chunked_body_survives_any_chunking_and_any_arrival(
    payload: bytes, chunk_cuts: list[int], feed_cuts: list[int], extension: bytes
) -> None:
    chunks = split(payload, chunk_cuts)
    encoded = b"".join(b"%x%s\r\n%s\r\n" % (len(c), extension, c) for c in chunks if c)
    wire = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + encoded
        + b"0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n"
        + UNARY_OK
    )

    async def body() -> tuple[bytes, int]:
        async with fed(*split(wire, feed_cuts)) as conn:
            _, headers = await conn.read_head()
            data = await conn.read_body(headers)
            status, _ = await conn.read_head()
            return data, status

    assert run(body()) == (payload, 200)


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"", ConnectionResetError),
        (b"SSH-2.0-OpenSSH\r\n\r\n", ConnectionError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ConnectionError),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", asyncio.IncompleteReadError),
    ],
)
def test_broken_responses_raise_transport_errors(wire: bytes, error: type[Exception]) -> None:
    async def body() -> None:
        async with fed(wire) as conn:
            _, headers = await conn.read_head()
            await conn.read_body(headers)

    with pytest.raises(error):
        run(body())


# --- watch streams ----------------------------------------------------------------------------


def put_event(key: bytes, value: bytes, lease: int, revision: int) -> WatchEvent:
    return WatchEvent(False, KeyValue(key, value, lease, revision))


def delete_event(key: bytes, revision: int) -> WatchEvent:
    return WatchEvent(True, KeyValue(key, b"", 0, revision))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def etcd_json(event: WatchEvent) -> dict[str, Any]:
    """An event as the gateway writes it: zero values left out, int64 as strings."""
    kv: dict[str, Any] = {"key": b64(event.kv.key), "mod_revision": str(event.kv.mod_revision)}
    if event.deleted:
        return {"type": "DELETE", "kv": kv}
    kv |= {"create_revision": str(event.kv.mod_revision), "version": "1"}
    if event.kv.value:
        kv["value"] = b64(event.kv.value)
    if event.kv.lease:
        kv["lease"] = str(event.kv.lease)
    return {"kv": kv}


def stream_line(events: list[WatchEvent]) -> bytes:
    header = json.loads(HEADER % events[-1].kv.mod_revision)
    return json.dumps(
        {"result": {"header": header, "events": list(map(etcd_json, events))}}
    ).encode()


async def watch_events(*pieces: bytes) -> list[WatchEvent]:
    async with fed(*pieces) as conn:
        watch = Watch(conn)
        await watch.first_message()
        return [event async for event in watch.events()]


def test_put_and_delete_events_are_decoded() -> None:
    wire = chunked(CREATED + b"\n", DELETED_B + b"\n", PUT_A + b"\n")
    assert run(watch_events(wire)) == [
        delete_event(b"/a/b", 3),
        put_event(b"/a/\xff", b"\x00\xff\n", 7587869197706540036, 4),
    ]


def test_events_wait_for_data_that_arrives_later() -> None:
    async def body() -> tuple[WatchEvent, WatchEvent]:
        async with fed(chunked(CREATED + b"\n")[:-5], eof=False) as conn:
            watch = Watch(conn)
            await watch.first_message()
            events = watch.events()
            pending = asyncio.ensure_future(anext(events))
            await asyncio.sleep(0.01)
            assert not pending.done()
            conn.reader.feed_data(b"%x\r\n%s" % (len(PUT_A) + 1, PUT_A[:50]))
            await asyncio.sleep(0.01)
            assert not pending.done()
            conn.reader.feed_data(PUT_A[50:] + b"\n\r\n")
            first = await pending
            conn.reader.feed_data(chunked(DELETED_B[:9], DELETED_B[9:] + b"\n"))
            return first, await anext(events)

    assert run(body()) == (
        put_event(b"/a/\xff", b"\x00\xff\n", 7587869197706540036, 4),
        delete_event(b"/a/b", 3),
    )


keys = st.binary(min_size=1, max_size=12)
watch_events_st = st.lists(
    st.builds(put_event, keys, st.binary(max_size=20), st.integers(0, 2**63 - 1), st.just(0))
    | st.builds(delete_event, keys, st.just(0)),
    min_size=1,
    max_size=8,
)


@given(
    events=watch_events_st,
    groups=st.lists(st.integers(0, 8)),
    chunk_cuts=st.lists(st.integers()),
    feed_cuts=st.lists(st.integers()),
)
def test_watch_stream_survives_any_chunking_after_creation(
    events: list[WatchEvent], groups: list[int], chunk_cuts: list[int], feed_cuts: list[int]
) -> None:
    """etcd flushes the creation acknowledgement as a chunk of its own; what follows may be
    split anywhere (several events per message, messages across chunks)."""
    events = [
        WatchEvent(e.deleted, KeyValue(e.kv.key, e.kv.value, e.kv.lease, 10 + i))
        for i, e in enumerate(events)
    ]
    messages = [m for m in split(events, groups) if m]
    tail = b"".join(stream_line(m) + b"\n" for m in messages)
    wire = chunked(CREATED + b"\n", *split(tail, chunk_cuts))
    assert run(watch_events(*split(wire, feed_cuts))) == events


def test_events_in_the_same_chunk_as_the_creation_are_kept() -> None:
    wire = chunked(CREATED + b"\n" + PUT_A + b"\n")
    assert run(watch_events(wire)) == [put_event(b"/a/\xff", b"\x00\xff\n", 7587869197706540036, 4)]


def test_compaction_after_creation_raises_etcd_compacted() -> None:
    with pytest.raises(EtcdCompacted) as err:
        run(watch_events(chunked(CREATED + b"\n", COMPACTION + b"\n")))
    assert err.value.compact_revision == 2


def test_compaction_instead_of_creation_raises_from_first_message() -> None:
    async def body() -> None:
        async with fed(chunked(COMPACTION + b"\n")) as conn:
            await Watch(conn).first_message()

    with pytest.raises(EtcdCompacted) as err:
        run(body())
    assert err.value.compact_revision == 2


def stream_error(code: int, message: str) -> bytes:
    error = {"grpc_code": code, "http_code": 401, "message": message, "http_status": "X"}
    return json.dumps({"error": error}).encode() + b"\n"


@pytest.mark.parametrize(
    ("code", "error"),
    [(16, EtcdUnauthenticated), (14, EtcdUnavailable), (9, EtcdStatusError)],
)
def test_streamed_errors_map_to_exceptions(code: int, error: type[EtcdClientError]) -> None:
    message = "etcdserver: invalid auth token"
    with pytest.raises(error) as err:
        run(watch_events(chunked(CREATED + b"\n", stream_error(code, message))))
    assert str(err.value) == message
    assert getattr(err.value, "code", code) == code
    assert type(err.value) is error


def test_cancel_without_compaction_is_a_status_error() -> None:
    cancel = b'{"result":{"canceled":true,"cancel_reason":"permission denied"}}\n'
    with pytest.raises(EtcdStatusError, match="permission denied"):
        run(watch_events(chunked(CREATED + b"\n", cancel)))


def test_clean_end_of_stream_ends_the_events() -> None:
    assert run(watch_events(chunked(CREATED + b"\n"))) == []


@pytest.mark.parametrize(
    "wire",
    [
        chunked(),  # ended before the creation
        chunked(CREATED + b"\n")[:-5],  # connection lost after it
        chunked(CREATED + b"\n")[:-5] + b"40\r\n{",  # lost inside a chunk
    ],
)
def test_broken_or_short_streams_raise_unavailable(wire: bytes) -> None:
    with pytest.raises(EtcdUnavailable):
        run(watch_events(wire))


# --- unary requests against an in-process HTTP server -----------------------------------------


class ReplayServer:
    """Answers each request with the next of the given responses (captured from etcd 3.4), on
    keep-alive connections: for the client's HTTP handling, byte for byte."""

    def __init__(self, *responses: bytes) -> None:
        self.responses = list(responses)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.connections = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.closing(writer):
            while request_line := await reader.readline():
                headers = {}
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers["content-length"]))
                self.requests.append((request_line.split()[1].decode(), headers, json.loads(body)))
                writer.write(self.responses.pop(0))
                await writer.drain()

    @contextlib.asynccontextmanager
    async def client(self, **options: Any) -> AsyncIterator[EtcdClient]:
        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        client = EtcdClient(Endpoint("127.0.0.1", server.sockets[0].getsockname()[1]), **options)
        try:
            yield client
        finally:
            await client.close()
            server.close()


def unary(status: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


def grpc_error(status: str, code: int, message: str) -> bytes:
    body = json.dumps({"error": message, "message": message, "code": code}).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
    head += "Trailer: Grpc-Trailer-Content-Type\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head.encode() + chunked(body, trailer=b"Grpc-Trailer-Content-Type: application/grpc\r\n")


def test_requests_are_encoded_as_the_gateway_expects() -> None:
    fake = ReplayServer(UNARY_OK, UNARY_OK, UNARY_OK)

    async def body() -> str:
        async with fake.client() as client:
            await client.put(b"/k\x00\xff", b"\xff\x00", lease=7587869197706540036)
            await client.put(b"/k", b"")
            await client.delete(b"/k")
            return str(client.endpoint)

    endpoint = run(body())
    (path, headers, put), (_, _, plain), (delete_path, _, delete) = fake.requests
    assert (path, headers["host"], headers["content-type"]) == (
        "/v3/kv/put",
        endpoint,
        "application/json",
    )
    assert put == {"key": "L2sA/w==", "value": "/wA=", "lease": "7587869197706540036"}
    assert plain == {"key": "L2s=", "value": ""}
    assert (delete_path, delete) == ("/v3/kv/deleterange", {"key": "L2s="})
    assert fake.connections == 1  # kept alive


def test_range_reply_is_decoded() -> None:
    kvs = [
        {"key": "L2EA", "create_revision": "5", "mod_revision": "9", "version": "2"},
        {"key": "L2H/", "value": "AP8=", "mod_revision": "7", "lease": "42"},
    ]
    reply = json.dumps({"header": json.loads(HEADER % 11), "kvs": kvs, "count": "2"})
    fake = ReplayServer(unary("200 OK", reply.encode()))

    async def body() -> tuple[list[KeyValue], int]:
        async with fake.client() as client:
            return await client.range(b"/a", prefix_range_end(b"/a"))

    assert run(body()) == (
        [KeyValue(b"/a\x00", b"", 0, 9), KeyValue(b"/a\xff", b"\x00\xff", 42, 7)],
        11,
    )
    assert fake.requests[0][2] == {"key": "L2E=", "range_end": "L2I="}


@pytest.mark.parametrize(
    ("code", "error"),
    [(11, EtcdStatusError), (16, EtcdUnauthenticated), (14, EtcdUnavailable), (5, EtcdStatusError)],
)
def test_unary_errors_map_to_exceptions(code: int, error: type[EtcdClientError]) -> None:
    fake = ReplayServer(grpc_error("400 Bad Request", code, f"etcdserver: code {code}"), UNARY_OK)

    async def body() -> dict[str, Any]:
        async with fake.client() as client:
            with pytest.raises(error) as err:
                await client.call("/v3/kv/range", {"key": "L2E="})
            assert type(err.value) is error
            assert str(err.value) == f"etcdserver: code {code}"
            assert getattr(err.value, "code", code) == code
            return await client.call("/v3/kv/range", {"key": "L2E="})  # same connection

    assert run(body())["header"]["revision"] == "2"
    assert fake.connections == 1


def test_verbatim_compacted_error_reply() -> None:
    fake = ReplayServer(COMPACTED_ERROR)

    async def body() -> None:
        async with fake.client() as client:
            await client.range(b"/a")

    with pytest.raises(EtcdStatusError) as err:
        run(body())
    assert (err.value.code, str(err.value)) == (
        11,
        "etcdserver: mvcc: required revision has been compacted",
    )


def test_a_reply_that_is_not_json_is_a_client_error() -> None:
    fake = ReplayServer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nNot Found\n")

    async def body() -> None:
        async with fake.client() as client:
            await client.call("/v3/nope", {})

    with pytest.raises(EtcdClientError, match="not JSON"):
        run(body())


def test_create_and_lease_replies_with_omitted_zero_values() -> None:
    header = HEADER % 3
    fake = ReplayServer(
        unary("200 OK", b'{"header":%s,"succeeded":true}' % header.encode()),
        # a failed txn: no "succeeded"; the range of its failure branch, captured from etcd 3.4
        unary(
            "200 OK",
            b'{"header":%s,"responses":[{"response_range":{"header":{"revision":"3"},'
            b'"kvs":[{"key":"L2s=","create_revision":"2","mod_revision":"2","version":"1",'
            b'"value":"dw==","lease":"9"}],"count":"1"}}]}' % header.encode(),
        ),
        unary("200 OK", b'{"header":%s,"ID":"7587869197706540036","TTL":"60"}' % header.encode()),
        unary("200 OK", b'{"header":%s,"ID":"1","TTL":"-1"}' % header.encode()),
    )

    async def body() -> tuple[Any, ...]:
        async with fake.client() as client:
            return (
                await client.create(b"/k", b"v", 5),
                await client.create(b"/k", b"v", 5),
                await client.grant(60),
                await client.time_to_live(1),
            )

    assert run(body()) == (
        (True, None),
        (False, KeyValue(b"/k", b"w", 9, 2)),
        (7587869197706540036, 60),
        -1,
    )
    txn = fake.requests[0][2]
    assert txn["compare"] == [
        {"key": "L2s=", "target": "VERSION", "result": "EQUAL", "version": "0"}
    ]
    assert txn["success"] == [{"request_put": {"key": "L2s=", "value": "dg==", "lease": "5"}}]
    assert txn["failure"] == [{"request_range": {"key": "L2s="}}]
    assert fake.requests[2][2] == {"TTL": "60"}


def test_replace_compares_the_value_and_tells_an_absent_key() -> None:
    header = HEADER % 4
    fake = ReplayServer(
        unary("200 OK", b'{"header":%s,"succeeded":true}' % header.encode()),
        unary(
            "200 OK",
            b'{"header":%s,"responses":[{"response_range":{"header":{"revision":"4"}}}]}'
            % header.encode(),
        ),
    )

    async def body() -> tuple[Any, ...]:
        async with fake.client() as client:
            return (
                await client.replace(b"/k", b"old", b"new", 7),
                await client.replace(b"/k", b"old", b"new", 0),
            )

    assert run(body()) == ((True, None), (False, None))
    first, second = fake.requests[0][2], fake.requests[1][2]
    assert first["compare"] == [
        {"key": "L2s=", "target": "VALUE", "result": "EQUAL", "value": "b2xk"}
    ]
    assert first["success"] == [{"request_put": {"key": "L2s=", "value": "bmV3", "lease": "7"}}]
    assert second["success"] == [{"request_put": {"key": "L2s=", "value": "bmV3"}}]


def test_time_to_live_of_a_lease_in_its_last_second_is_zero() -> None:
    # Captured from etcd 3.4: TimeToLive right after granting a 1 s lease.
    reply = b'{"header":%s,"ID":"4003596722893854473","grantedTTL":"1"}' % (HEADER % 2).encode()
    fake = ReplayServer(unary("200 OK", reply))

    async def body() -> int:
        async with fake.client() as client:
            return await client.time_to_live(4003596722893854473)

    assert run(body()) == 0


def test_an_expired_token_is_replaced_once() -> None:
    fake = ReplayServer(
        unary("200 OK", b'{"header":{},"token":"one.1"}'),
        grpc_error("401 Unauthorized", 16, "etcdserver: invalid auth token"),
        unary("200 OK", b'{"header":{},"token":"two.2"}'),
        UNARY_OK,
    )

    async def body() -> None:
        async with fake.client(username="root", password="pw") as client:
            await client.put(b"/k", b"v")

    run(body())
    assert [(path, headers.get("authorization")) for path, headers, _ in fake.requests] == [
        ("/v3/auth/authenticate", None),
        ("/v3/kv/put", "one.1"),
        ("/v3/auth/authenticate", None),
        ("/v3/kv/put", "two.2"),
    ]
    assert fake.requests[0][2] == {"name": "root", "password": "pw"}


def test_a_range_at_a_revision_for_the_count_and_the_newest_key() -> None:
    kvs = [{"key": "L2Ev", "create_revision": "3", "mod_revision": "9", "version": "2"}]
    reply = json.dumps({"header": json.loads(HEADER % 11), "kvs": kvs, "count": "5"})
    fake = ReplayServer(unary("200 OK", reply.encode()))

    async def body() -> RangeReply:
        async with fake.client() as client:
            return await client.range_reply(b"/a", b"/b", revision=7, newest_only=True)

    got = run(body())
    assert (got.count, got.kvs, got.header) == (
        5,
        [KeyValue(b"/a/", b"", 0, 9)],
        Header(revision=11, cluster_id=14841639068965178418),
    )
    assert fake.requests[0][2] == {
        "key": "L2E=",
        "range_end": "L2I=",
        "revision": "7",
        "limit": "1",
        "sort_order": "DESCEND",
        "sort_target": "MOD",
        "keys_only": True,
    }


def test_a_progress_notification_is_an_empty_response_with_its_revision() -> None:
    progress = b'{"result":{"header":%s}}' % (HEADER % 40).encode()

    async def body() -> list[WatchResponse]:
        async with fed(chunked(CREATED + b"\n", PUT_A + b"\n" + progress + b"\n")) as conn:
            watch = Watch(conn)
            assert (await watch.first_message()).revision == 2
            return [response async for response in watch.responses()]

    assert run(body()) == [
        WatchResponse((put_event(b"/a/\xff", b"\x00\xff\n", 7587869197706540036, 4),), 4),
        WatchResponse((), 40),
    ]


@pytest.mark.parametrize(
    "reply",
    [
        b'{"x":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"header":{"revision":"2"},"kvs":[{"key":"not base64!"}]}',
        b'{"header":{"revision":[]}}',
    ],
)
def test_a_reply_too_deep_or_of_the_wrong_shape_is_a_client_error(reply: bytes) -> None:
    fake = ReplayServer(unary("200 OK", reply))

    async def body() -> None:
        async with fake.client() as client:
            await client.range(b"/a")

    with pytest.raises(EtcdClientError, match="etcd sent a"):
        run(body())


def test_a_reply_past_the_limit_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_REPLY_BYTES", 100)
    fake = ReplayServer(unary("200 OK", b'{"header":{"revision":"2"},"pad":"%s"}' % (b"x" * 200)))

    async def body() -> None:
        async with fake.client() as client:
            await client.range(b"/a")

    with pytest.raises(EtcdClientError, match="larger than 100 bytes"):
        run(body())
