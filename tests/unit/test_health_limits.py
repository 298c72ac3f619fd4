"""The health server bounds every client (pyflannel_runtime/agent/health.py): its head's size
and lines, one deadline for the whole exchange, connections per address and in all; malformed
input gets 400 or a close; and nothing any client sends is logged above debug level.

Each test runs the server in-process on loopback with small limits where a limit is the point,
and clients from distinct loopback addresses (127.0.0.0/8 is all local) where the address is.
Waits are bounded liveness checks, never timings."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyflannel_runtime.agent.health import HealthServer, Limits
from pyflannel_runtime.agent.http_head import Answer, HeadLimits

LIVENESS = 10.0  # seconds; reached only when the server never does what is waited for
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"
RUNNING = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"X-Content-Type-Options: nosniff\r\nContent-Length: 19\r\nConnection: close\r\n\r\n"
    b"flanneld is running"
)


@pytest.fixture(autouse=True)
def nothing_above_debug(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    loud = [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno > logging.DEBUG and not r.getMessage().startswith("Start healthz server")
    ]
    assert loud == []


@asynccontextmanager
async def serving(limits: Limits | None = None) -> AsyncIterator[HealthServer]:
    server = HealthServer("127.0.0.1", 0, limits)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Client:
    """One connection from a chosen loopback address."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, server: HealthServer, source: str = "127.0.0.1") -> Client:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, local_addr=(source, 0)
        )
        return cls(reader, writer)

    async def send(self, data: bytes, *, half_close: bool = False) -> None:
        self.writer.write(data)
        if half_close:
            self.writer.write_eof()
        await self.writer.drain()

    async def answer(self) -> tuple[bytes, bool]:
        """All the server sends until it closes, and whether it reset the connection."""
        got = b""
        try:
            async with asyncio.timeout(LIVENESS):
                while chunk := await self.reader.read(65536):
                    got += chunk
        except ConnectionResetError:
            return got, True
        finally:
            self.writer.close()
        return got, False


async def refused(server: HealthServer, source: str = "127.0.0.1") -> tuple[bytes, bool]:
    """What a new connection gets when it sends nothing: the server's bytes, and whether it
    was reset (maybe before the client saw it connected, the server being that quick)."""
    try:
        client = await Client.open(server, source)
    except ConnectionResetError:
        return b"", True
    return await client.answer()


async def exchange(
    server: HealthServer, data: bytes, *, half_close: bool = False, source: str = "127.0.0.1"
) -> bytes:
    client = await Client.open(server, source)
    await client.send(data, half_close=half_close)
    return (await client.answer())[0]


async def until(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(LIVENESS):
        while not predicate():
            await asyncio.sleep(0.01)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# --- the head ------------------------------------------------------------------------------------


def test_an_overlong_request_line_gets_431() -> None:
    async def scenario() -> bytes:
        async with serving() as server:
            return await exchange(server, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert answer.endswith(b"\r\n\r\n431 Request Header Fields Too Large")


def test_header_lines_past_the_cap_get_431_and_up_to_it_are_served() -> None:
    def head(lines: int) -> bytes:
        return b"GET /healthz HTTP/1.1\r\n" + b"X-A: b\r\n" * lines + b"\r\n"

    async def scenario() -> tuple[bytes, bytes]:
        async with serving(Limits(head=HeadLimits(max_lines=8))) as server:
            return await exchange(server, head(8)), await exchange(server, head(9))

    at_cap, past = asyncio.run(scenario())
    assert at_cap == RUNNING
    assert status_of(past) == 431


def test_header_bytes_past_the_cap_get_431_and_up_to_it_are_served() -> None:
    line = b"GET /healthz HTTP/1.1\r\n"

    def head(size: int) -> bytes:
        filler = b"X-Fill: " + b"f" * (size - len(line) - len(b"X-Fill: \r\n\r\n")) + b"\r\n"
        return line + filler + b"\r\n"

    async def scenario() -> tuple[bytes, bytes]:
        async with serving(Limits(head=HeadLimits(max_bytes=1024))) as server:
            return await exchange(server, head(1024)), await exchange(server, head(1025))

    assert len(head(1024)) == 1024
    at_cap, past = asyncio.run(scenario())
    assert at_cap == RUNNING
    assert status_of(past) == 431


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello, no line end
        b"\x00\xff\xfe\r\n\r\n",
        b"GET /healthz\r\n\r\n",  # no version (HTTP/0.9)
        b"GET  /healthz HTTP/1.1\r\n\r\n",
        b"GE(T /healthz HTTP/1.1\r\n\r\n",  # a method is a token
        b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\x00\n\r\n",
    ],
)
def test_a_malformed_request_line_gets_400(garbage: bytes) -> None:
    async def scenario() -> bytes:
        async with serving() as server:
            return await exchange(server, garbage)

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(b"\r\n\r\n400 Bad Request")


def test_a_client_that_half_closes_inside_its_head_gets_400_and_one_that_sent_nothing_a_close() -> (
    None
):
    async def scenario() -> tuple[bytes, bytes, int]:
        async with serving() as server:
            partial = await exchange(server, b"GET /healthz HTTP/1.1\r\nHo", half_close=True)
            silent = await exchange(server, b"", half_close=True)
            await until(lambda: server.clients == 0)
            return partial, silent, server.clients

    partial, silent, left = asyncio.run(scenario())
    assert status_of(partial) == 400
    assert silent == b""
    assert left == 0


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=3000), st.binary(max_size=200).map(lambda b: HEALTHZ[:-2] + b)))
def test_any_bytes_get_an_answer_or_a_close(data: bytes) -> None:
    async def scenario() -> bytes:
        async with serving(Limits(head=HeadLimits(max_bytes=1024, max_lines=8))) as server:
            return await exchange(server, data, half_close=True)

    answer = asyncio.run(scenario())
    assert answer == b"" or status_of(answer) in (200, 400, 404, 431)


# --- methods and routes --------------------------------------------------------------------------


def test_head_gets_the_get_answer_without_its_body() -> None:
    async def scenario() -> bytes:
        async with serving() as server:
            return await exchange(server, b"HEAD /healthz HTTP/1.1\r\n\r\n")

    assert asyncio.run(scenario()) == RUNNING.removesuffix(b"flanneld is running")


def test_any_method_is_answered_as_flanneld_answers_it() -> None:
    async def scenario() -> list[bytes]:
        async with serving() as server:
            return [
                await exchange(server, method + b" /healthz HTTP/1.1\r\n\r\n")
                for method in (b"POST", b"DELETE", b"BREW")
            ]

    assert asyncio.run(scenario()) == [RUNNING] * 3


def test_a_route_is_one_entry_of_the_table() -> None:
    metrics = Answer(200, "text/plain; version=0.0.4; charset=utf-8", b"up 1\n")

    async def scenario() -> tuple[bytes, bytes]:
        async with serving() as server:
            server.routes["/metrics"] = lambda: metrics
            get = await exchange(server, b"GET /metrics HTTP/1.1\r\n\r\n")
            return get, await exchange(server, b"HEAD /metrics HTTP/1.1\r\n\r\n")

    get, head = asyncio.run(scenario())
    assert get == metrics.encode()
    assert head == metrics.encode(with_body=False)
    assert b"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n" in head


def test_a_failing_handler_answers_500_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> dict[str, object]:
        raise RuntimeError("datapath state unavailable")

    async def scenario() -> bytes:
        async with serving() as server:
            server.datapath = broken
            return await exchange(server, b"GET /statusz HTTP/1.1\r\n\r\n")

    assert status_of(asyncio.run(scenario())) == 500
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == ["healthz handler for /statusz failed"]
    assert failed[0].exc_info is not None
    caplog.clear()  # the handler's own bug, not a client's input: the one record expected


# --- connections ---------------------------------------------------------------------------------


def test_past_the_per_address_cap_a_new_connection_is_reset_at_once() -> None:
    async def scenario() -> tuple[tuple[bytes, bool], bytes, list[bytes], bytes]:
        async with serving(Limits(per_address=2)) as server:
            held = [await Client.open(server) for _ in range(2)]
            for client in held:
                await client.send(b"GET /healthz HTTP/1.1\r\n")
            await until(lambda: server.clients == 2)
            over = await refused(server)
            elsewhere = await exchange(server, HEALTHZ, source="127.0.0.2")
            for client in held:
                await client.send(b"\r\n")
            served = [(await client.answer())[0] for client in held]
            # Its connections closed, the address is served again.
            await until(lambda: server.clients == 0)
            again = await exchange(server, HEALTHZ)
            return over, elsewhere, served, again

    over, elsewhere, served, again = asyncio.run(scenario())
    assert over == (b"", True)
    assert elsewhere == RUNNING
    assert served == [RUNNING, RUNNING]
    assert again == RUNNING


def test_past_the_global_cap_the_longest_waiting_is_reset_and_a_fresh_client_served() -> None:
    async def scenario() -> tuple[tuple[bytes, bool], bytes, list[bytes]]:
        async with serving(Limits(connections=3)) as server:
            waiting: list[Client] = []
            for n in range(3):
                client = await Client.open(server, f"127.0.0.{n + 1}")
                await client.send(b"GET /healthz HTTP/1.1\r\n")
                waiting.append(client)
                await until(lambda: server.clients == len(waiting))
            fresh = await Client.open(server, "127.0.0.9")
            await fresh.send(HEALTHZ)
            served = (await fresh.answer())[0]
            oldest = await waiting[0].answer()
            for client in waiting[1:]:
                await client.send(b"\r\n")
            return oldest, served, [(await client.answer())[0] for client in waiting[1:]]

    oldest, served, others = asyncio.run(scenario())
    assert oldest == (b"", True)
    assert served == RUNNING
    assert others == [RUNNING, RUNNING]


def test_the_deadline_cuts_off_a_client_that_trickles_its_head() -> None:
    async def scenario() -> tuple[int, tuple[bytes, bool], int]:
        async with serving(Limits(exchange_seconds=0.3)) as server:
            client = await Client.open(server)
            lines = 0
            async with asyncio.timeout(LIVENESS):
                try:
                    while True:  # a line every 50 ms, each well inside any per-line timeout
                        await client.send(
                            b"GET /healthz HTTP/1.1\r\n" if not lines else b"X: y\r\n"
                        )
                        lines += 1
                        await asyncio.sleep(0.05)
                except ConnectionError:
                    pass
            ended = await client.answer()
            await until(lambda: server.clients == 0)
            return lines, ended, server.clients

    lines, ended, left = asyncio.run(scenario())
    assert lines >= 1
    assert ended == (b"", True)
    assert left == 0


def test_the_deadline_cuts_off_a_client_that_never_reads_its_answer() -> None:
    # More than the server's socket can buffer at its largest, the client's kept small.
    with open("/proc/sys/net/ipv4/tcp_wmem") as wmem:
        big = Answer(200, "text/plain", b"x" * (2 * int(wmem.read().split()[2]) + 2**20))

    async def scenario() -> tuple[int, int, bool]:
        async with serving(Limits(exchange_seconds=0.3)) as server:
            server.routes["/big"] = lambda: big
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
            client = Client(*await asyncio.open_connection(sock=sock))
            transport = client.writer.transport
            assert isinstance(transport, asyncio.Transport)
            transport.pause_reading()
            await client.send(b"GET /big HTTP/1.1\r\n\r\n")
            await until(lambda: server.clients == 0)
            left = server.clients
            transport.resume_reading()
            got, reset = await client.answer()
            return left, len(got), reset

    left, received, reset = asyncio.run(scenario())
    assert left == 0
    assert reset and received < len(big.encode())


def test_a_stopped_server_closes_what_it_held() -> None:
    async def scenario() -> tuple[int, tuple[bytes, bool]]:
        server = HealthServer("127.0.0.1", 0)
        await server.start()
        client = await Client.open(server)
        await client.send(b"GET /healthz HTTP/1.1\r\n")
        await until(lambda: server.clients == 1)
        await server.stop()
        return server.clients, await client.answer()

    assert asyncio.run(scenario()) == (0, (b"", True))


def test_after_its_answer_a_client_that_keeps_sending_is_let_go_past_another_head() -> None:
    async def scenario() -> tuple[bytes, int]:
        limits = Limits(exchange_seconds=600, head=HeadLimits(max_bytes=1024))
        async with serving(limits) as server:
            client = await Client.open(server)
            await client.send(HEALTHZ + b"b" * 4096)  # a body nobody asked for
            got = b""
            while chunk := await client.reader.read(65536):  # up to the server's FIN
                got += chunk
            await until(lambda: server.clients == 0)  # long before the deadline
            left = server.clients
            client.writer.close()
            return got, left

    assert asyncio.run(scenario()) == (RUNNING, 0)


def test_after_its_answer_a_client_that_never_closes_is_let_go_at_the_deadline() -> None:
    async def scenario() -> tuple[bytes, int]:
        async with serving(Limits(exchange_seconds=0.3)) as server:
            client = await Client.open(server)
            await client.send(HEALTHZ)
            got = b""
            while chunk := await client.reader.read(65536):
                got += chunk
            await until(lambda: server.clients == 0)
            left = server.clients
            client.writer.close()
            return got, left

    assert asyncio.run(scenario()) == (RUNNING, 0)


# Serves with caps above a descriptor limit of 64, until stdin closes.
_STARVED = """
import asyncio, logging, resource, sys
from pyflannel_runtime.agent.health import HealthServer, Limits
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(message)s")
async def main():
    server = HealthServer("127.0.0.1", 0, Limits(per_address=1000, connections=1000))
    await server.start()
    print(server.port, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
asyncio.run(main())
"""


def fetch(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=LIVENESS) as client:
        client.sendall(HEALTHZ)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
        return answer


def test_out_of_descriptors_the_server_pauses_accepting_and_comes_back() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", _STARVED],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        held = []
        for _ in range(80):  # more than the server has descriptors for
            client = socket.create_connection(("127.0.0.1", port), timeout=LIVENESS)
            client.sendall(b"GET /healthz HTTP/1.1\r\n")
            held.append(client)
        for client in held:
            client.close()
        answer = fetch(port)
    finally:
        _, logged = server.communicate("", timeout=LIVENESS)
    assert answer == RUNNING
    loud = [line for line in logged.splitlines() if not line.startswith("DEBUG ")]
    assert loud[0].startswith("INFO pyflannel.health Start healthz server on 127.0.0.1:")
    paused = "WARNING pyflannel.health healthz server: accept: too many open files; accepting again in 1s"
    assert loud[1:] and set(loud[1:]) == {paused}, loud
