"""An etcd v3 client over etcd's JSON gateway: the HTTP/1.1 face of the gRPC API that every
etcd since 3.3 serves on its client port under ``/v3/`` (etcd3gw speaks the same).

Why not gRPC: aetcd with grpcio cost the agent ~13 MiB of resident memory (grpc's C core maps
10 MiB of code and runs threads of its own), a fifth of the 60 MiB budget at 5 000 peers.
This client needs only asyncio, ssl and json, which the agent loads anyway. The stored keys
and values are the same bytes whichever API writes them, so Go flanneld nodes share the data.

The gateway's encoding: bytes fields are base64, int64 fields decimal strings, and fields at
their zero value are left out (a ``PUT`` event has no ``type``, a failed txn no
``succeeded``). Errors come back as ``{"error": ..., "code": <gRPC status code>}``.

Replies are decoded by msgspec into structs of the fields read, base64 and decimal strings
converted in C: a listing of 5 000 leases in about a ninth of the time of ``json.loads`` and
a conversion per key. Every reply and watch message is read up to MAX_REPLY_BYTES first, and
msgspec refuses nesting past Python's recursion limit: a reply past either is an
EtcdClientError.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import msgspec

from pyflannel_runtime import PyflannelError

_T = TypeVar("_T")

# gRPC status codes the client acts on.
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16
# Requests in flight per endpoint (`pyflannel status` looks up thousands of TTLs at once).
_CONNECTIONS = 8
# Notice a dead server under an idle watch stream: probe after 30 s, give up after 3 misses.
_KEEPALIVE = ((socket.TCP_KEEPIDLE, 30), (socket.TCP_KEEPINTVL, 10), (socket.TCP_KEEPCNT, 3))
_LINE_END = (b"\r\n", b"\n", b"")
# The largest reply or watch message read: a listing holds ~340 bytes per lease, so this is
# ~400 000 leases, beyond any flannel network; a bound against a runaway answer, not a policy.
MAX_REPLY_BYTES = 128 << 20
# gRPC's OUT_OF_RANGE: a range at a revision etcd compacted, or has not reached.
OUT_OF_RANGE = 11


class EtcdClientError(PyflannelError):
    """etcd refused a request, or could not be asked."""


class EtcdUnavailable(EtcdClientError):
    """The endpoint did not answer (refused, reset, timed out, TLS failed, or UNAVAILABLE)."""


class EtcdStatusError(EtcdClientError):
    """etcd answered with a gRPC error status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnauthenticated(EtcdStatusError):
    """The token is missing, wrong or expired (etcd forgets idle simple tokens)."""


class EtcdCompacted(EtcdClientError):
    """A watch asked for history that etcd has compacted away."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(
            f"required revision has been compacted (compact revision {compact_revision})"
        )
        self.compact_revision = compact_revision


class KeyValue(msgspec.Struct, frozen=True, gc=False):
    key: bytes = b""
    value: bytes = b""
    lease: int = 0  # 0: the key has no etcd lease
    mod_revision: int = 0


class Header(msgspec.Struct, frozen=True):
    """A reply's header: the revision it was read at, and the cluster that answered."""

    revision: int = 0
    cluster_id: int = 0


class RangeReply(msgspec.Struct):
    header: Header = msgspec.field(default_factory=Header)
    kvs: list[KeyValue] = []
    count: int = 0


@dataclass(frozen=True, slots=True)
class WatchEvent:
    deleted: bool
    kv: KeyValue


@dataclass(frozen=True, slots=True)
class WatchResponse:
    """One message of a watch: its events (all of a revision come in one message), and the
    revision of its header, which an empty message (a progress notification) vouches for: every
    event up to it has been sent."""

    events: tuple[WatchEvent, ...]
    revision: int


class _Event(msgspec.Struct):
    type: str = "PUT"
    kv: KeyValue = msgspec.field(default_factory=KeyValue)


class _WatchResult(msgspec.Struct):
    header: Header = msgspec.field(default_factory=Header)
    events: list[_Event] = []
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""


class _StreamError(msgspec.Struct):
    grpc_code: int = 0
    message: str = ""


class _WatchMessage(msgspec.Struct):
    result: _WatchResult = msgspec.field(default_factory=_WatchResult)
    error: _StreamError | None = None


class _TxnResponse(msgspec.Struct):
    response_range: RangeReply = msgspec.field(default_factory=RangeReply)


class _TxnReply(msgspec.Struct):
    succeeded: bool = False
    responses: list[_TxnResponse] = []


# strict=False: the gateway writes int64 fields as decimal strings.
_REPLY = msgspec.json.Decoder(dict[str, Any], strict=False)
_RANGE = msgspec.json.Decoder(RangeReply, strict=False)
_TXN = msgspec.json.Decoder(_TxnReply, strict=False)
_WATCH = msgspec.json.Decoder(_WatchMessage, strict=False)
_DecodedT = TypeVar("_DecodedT")


@dataclass(frozen=True)
class Endpoint:
    host: str  # a name or an address, IPv6 without brackets
    port: int
    tls: ssl.SSLContext | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def tls_context(certfile: str, keyfile: str, cafile: str) -> ssl.SSLContext:
    """Client-certificate TLS, verifying the server against ``cafile`` (or the system's CAs).
    Raises OSError (ssl.SSLError is one) when a file cannot be read or parsed."""
    context = ssl.create_default_context(cafile=cafile or None)
    context.load_cert_chain(certfile, keyfile)
    context.set_alpn_protocols(["http/1.1"])
    return context


def prefix_range_end(prefix: bytes) -> bytes:
    """The range end that selects every key starting with ``prefix`` (etcd's GetPrefixRangeEnd)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\0"  # every key
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# Failures to talk to the endpoint at all (as opposed to etcd's own answers).
_TRANSPORT_ERRORS = (TimeoutError, OSError, asyncio.IncompleteReadError)


def _raise_for(reply: dict[str, Any]) -> NoReturn:
    """A unary request's error reply: ``{"error": ..., "code": <gRPC code>}``."""
    raise _status_error(int(reply.get("code", 0)), str(reply.get("error", reply)))


def _status_error(code: int, message: str) -> EtcdClientError:
    if code == _UNAUTHENTICATED:
        return EtcdUnauthenticated(code, message)
    if code == _UNAVAILABLE:
        return EtcdUnavailable(message)
    return EtcdStatusError(code, message)


# --- HTTP/1.1, just what the gateway needs ---------------------------------------------------


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = False

    def close(self) -> None:
        # abort(): never wait on a peer that may be gone (close_notify, unflushed data).
        self.writer.transport.abort()

    async def send(self, request: bytes) -> None:
        self.writer.write(request)
        await self.writer.drain()

    async def read_head(self) -> tuple[int, dict[str, str]]:
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionResetError("etcd closed the connection")
        try:
            status = int(status_line.split(None, 2)[1])
        except (IndexError, ValueError):
            raise ConnectionError(f"not an HTTP response: {status_line[:80]!r}") from None
        headers = {}
        while (line := await self.reader.readline()) not in _LINE_END:
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self.reusable = headers.get("connection", "").lower() != "close"
        return status, headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """A chunked body's chunks as they arrive; the trailers are read and dropped."""
        while True:
            size_line = await self.reader.readline()
            try:
                size = int(size_line.split(b";", 1)[0], 16)
            except ValueError:
                raise ConnectionError(f"bad chunk size line: {size_line[:80]!r}") from None
            if size == 0:
                while await self.reader.readline() not in _LINE_END:
                    pass
                return
            chunk = await self.reader.readexactly(size + 2)
            yield chunk[:-2]

    async def read_body(self, headers: dict[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            async for chunk in self.chunks():
                body += chunk
                if len(body) > MAX_REPLY_BYTES:
                    raise _too_large()
            return bytes(body)
        length = int(headers.get("content-length", "0"))
        if length > MAX_REPLY_BYTES:
            raise _too_large()
        return await self.reader.readexactly(length)


def _too_large() -> EtcdClientError:
    return EtcdClientError(f"etcd sent a reply larger than {MAX_REPLY_BYTES} bytes")


def _decode(data: bytes, decoder: msgspec.json.Decoder[_DecodedT]) -> _DecodedT:
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        raise EtcdClientError(f"etcd sent a reply that is not JSON: {data[:120]!r}") from None
    except msgspec.ValidationError as err:
        raise EtcdClientError(f"etcd sent an unexpected reply ({err}): {data[:120]!r}") from None


class Watch:
    """One open watch stream (its own connection). Iterate ``responses()`` (or ``events()``);
    ``close()`` ends it."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection
        # One reader for the creation message and the events: a chunk may carry both.
        self._results = self._messages()

    async def first_message(self) -> Header:
        """The creation acknowledgement's header, or the error that refused the watch."""
        try:
            return (await anext(self._results)).header
        except StopAsyncIteration:
            raise EtcdUnavailable("etcd ended the watch stream before creating it") from None

    async def responses(self) -> AsyncIterator[WatchResponse]:
        """Messages until the stream ends; raises EtcdCompacted when the start revision is gone."""
        async for result in self._results:
            events = tuple(WatchEvent(e.type == "DELETE", e.kv) for e in result.events)
            yield WatchResponse(events, result.header.revision)

    async def events(self) -> AsyncIterator[WatchEvent]:
        """The events of ``responses()``, one by one."""
        async for response in self.responses():
            for event in response.events:
                yield event

    async def _messages(self) -> AsyncIterator[_WatchResult]:
        pending = b""
        try:
            async for chunk in self._connection.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._result(_decode(line, _WATCH))
                if len(pending) > MAX_REPLY_BYTES:
                    raise _too_large()
        except _TRANSPORT_ERRORS as err:
            raise EtcdUnavailable(f"watch stream broke: {err or type(err).__name__}") from None

    @staticmethod
    def _result(message: _WatchMessage) -> _WatchResult:
        if message.error is not None:
            raise _status_error(message.error.grpc_code, message.error.message)
        result = message.result
        if result.canceled:
            if result.compact_revision:
                raise EtcdCompacted(result.compact_revision)
            raise EtcdStatusError(0, f"watch canceled: {result.cancel_reason}")
        return result

    def close(self) -> None:
        self._connection.close()


class EtcdClient:
    """One endpoint. Unary requests share a few keep-alive connections; each watch has its
    own. With a username, a token is fetched first and fetched again when etcd rejects it."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        username: str = "",
        password: str = "",
        timeout: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self._username = username
        self._password = password
        self._timeout = timeout
        self._token: str | None = None
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(_CONNECTIONS)
        self._closed = False

    # -- KV --

    async def range(self, key: bytes, range_end: bytes | None = None) -> tuple[list[KeyValue], int]:
        """The keys in [key, range_end) (just ``key`` without an end) and the revision read."""
        reply = await self.range_reply(key, range_end)
        return reply.kvs, reply.header.revision

    async def range_reply(
        self,
        key: bytes,
        range_end: bytes | None = None,
        *,
        revision: int = 0,
        count_only: bool = False,
        newest_only: bool = False,
    ) -> RangeReply:
        """The keys in [key, range_end) as of ``revision`` (0: the latest): all of them, only
        their count, or (``newest_only``) their count and the key last modified, without its
        value. A revision etcd has compacted or not reached is an EtcdStatusError of code
        OUT_OF_RANGE."""
        request: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            request["range_end"] = _b64(range_end)
        if revision:
            request["revision"] = str(revision)
        if count_only:
            request["count_only"] = True
        if newest_only:
            request |= {"limit": "1", "sort_order": "DESCEND", "sort_target": "MOD"}
            request["keys_only"] = True
        return _decode(await self._authorized_post("/v3/kv/range", request), _RANGE)

    async def get(self, key: bytes) -> KeyValue | None:
        kvs, _ = await self.range(key)
        return kvs[0] if kvs else None

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        request = {"key": _b64(key), "value": _b64(value)}
        if lease:
            request["lease"] = str(lease)
        await self.call("/v3/kv/put", request)

    async def delete(self, key: bytes) -> None:
        await self.call("/v3/kv/deleterange", {"key": _b64(key)})

    async def create(self, key: bytes, value: bytes, lease: int) -> tuple[bool, KeyValue | None]:
        """Put ``key`` only if it does not exist (a txn on version == 0): (True, None), or
        (False, what the key holds)."""
        compare = {"key": _b64(key), "target": "VERSION", "result": "EQUAL", "version": "0"}
        return await self._put_if(compare, key, value, lease)

    async def replace(
        self, key: bytes, expected: bytes, value: bytes, lease: int
    ) -> tuple[bool, KeyValue | None]:
        """Put ``key`` only if it holds ``expected`` (a txn on its value): (True, None), or
        (False, what the key holds; None when it does not exist)."""
        compare = {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(expected)}
        return await self._put_if(compare, key, value, lease)

    async def _put_if(
        self, compare: dict[str, str], key: bytes, value: bytes, lease: int
    ) -> tuple[bool, KeyValue | None]:
        put = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        request = {
            "compare": [compare],
            "success": [{"request_put": put}],
            "failure": [{"request_range": {"key": _b64(key)}}],
        }
        reply = _decode(await self._authorized_post("/v3/kv/txn", request), _TXN)
        if reply.succeeded:
            return True, None
        kvs = reply.responses[0].response_range.kvs if reply.responses else []
        return False, kvs[0] if kvs else None

    # -- leases --

    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new etcd lease: its ID and the TTL etcd granted."""
        reply = await self.call("/v3/lease/grant", {"TTL": str(ttl)})
        return int(reply["ID"]), int(reply["TTL"])

    async def revoke(self, lease: int) -> None:
        await self.call("/v3/lease/revoke", {"ID": str(lease)})

    async def time_to_live(self, lease: int) -> int:
        """Seconds left on an etcd lease; -1 when it has expired or never existed."""
        reply = await self.call("/v3/lease/timetolive", {"ID": str(lease)})
        # Omitted at zero: a lease in its last second (an expired one says -1).
        return int(reply.get("TTL", 0))

    # -- watch --

    async def watch(
        self,
        key: bytes,
        range_end: bytes | None,
        start_revision: int,
        *,
        progress_notify: bool = False,
    ) -> Watch:
        """Open a watch from ``start_revision`` and wait until etcd created it. With
        ``progress_notify`` etcd sends an empty message now and then while nothing changes (every
        10 minutes by default), whose revision every event up to has been sent."""
        request: dict[str, Any] = {"key": _b64(key), "start_revision": str(start_revision)}
        if range_end is not None:
            request["range_end"] = _b64(range_end)
        if progress_notify:
            request["progress_notify"] = True
        body = json.dumps({"create_request": request}).encode()
        return await self._authorized(lambda: self._open_watch(body))

    async def _open_watch(self, body: bytes) -> Watch:
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(self._timeout):
                connection = await self._connect(keepalive=True)
                await connection.send(self._request("/v3/watch", body))
                status, headers = await connection.read_head()
                if status != 200:
                    _raise_for(_decode(await connection.read_body(headers), _REPLY))
                watch = Watch(connection)
                await watch.first_message()
                return watch
        except BaseException as err:
            if connection is not None:
                connection.close()
            if isinstance(err, _TRANSPORT_ERRORS):
                raise self._unreachable(err) from None
            raise

    # -- plumbing --

    async def call(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """POST one request and return etcd's reply."""
        return _decode(await self._authorized_post(path, request), _REPLY)

    async def _authorized_post(self, path: str, request: dict[str, Any]) -> bytes:
        """POST one request; the body of etcd's successful reply."""
        body = json.dumps(request).encode()
        return await self._authorized(lambda: self._post(path, body))

    async def _authorized(self, send: Callable[[], Awaitable[_T]]) -> _T:
        """``send()`` with a token when there is a username; a rejected token (etcd drops
        idle ones) is replaced once."""
        await self._ensure_token()
        try:
            return await send()
        except EtcdUnauthenticated:
            if not self._username:
                raise
            self._token = None
            await self._ensure_token()
            return await send()

    async def _ensure_token(self) -> None:
        if self._username and self._token is None:
            credentials = {"name": self._username, "password": self._password}
            data = await self._post("/v3/auth/authenticate", json.dumps(credentials).encode())
            self._token = str(_decode(data, _REPLY)["token"])

    async def _post(self, path: str, body: bytes) -> bytes:
        async with self._slots:
            try:
                async with asyncio.timeout(self._timeout):
                    status, data = await self._exchange(self._request(path, body))
            except _TRANSPORT_ERRORS as err:
                raise self._unreachable(err) from None
        if status != 200:
            _raise_for(_decode(data, _REPLY))
        return data

    def _unreachable(self, err: BaseException) -> EtcdUnavailable:
        if isinstance(err, TimeoutError):
            return EtcdUnavailable(f"{self.endpoint}: no answer in {self._timeout:g}s")
        return EtcdUnavailable(f"{self.endpoint}: {err or type(err).__name__}")

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send on an idle connection (or a new one) and read the whole response. A reused
        connection that the server closed while idle gets one retry on a fresh one."""
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect(keepalive=False)
            try:
                await connection.send(request)
                status, headers = await connection.read_head()
                data = await connection.read_body(headers)
            except ConnectionResetError:
                connection.close()
                if reused:
                    continue
                raise
            except BaseException:
                connection.close()
                raise
            if connection.reusable and not self._closed:
                self._idle.append(connection)
            else:
                connection.close()
            return status, data

    def _request(self, path: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.endpoint}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        )
        if self._token is not None:
            head += f"Authorization: {self._token}\r\n"
        return head.encode() + b"\r\n" + body

    async def _connect(self, *, keepalive: bool) -> _Connection:
        tls = self.endpoint.tls
        reader, writer = await asyncio.open_connection(
            self.endpoint.host,
            self.endpoint.port,
            ssl=tls,
            server_hostname=self.endpoint.host if tls is not None else None,
        )
        sock = writer.get_extra_info("socket")
        if keepalive and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in _KEEPALIVE:
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
        return _Connection(reader, writer)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            with contextlib.suppress(Exception):
                connection.close()
