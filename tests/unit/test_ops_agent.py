"""Asking the agent how it is: pyflanneld's health server (real, on loopback), a dead port, a
stranger on the port, and what /statusz may carry."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from ipaddress import ip_address, ip_network
from typing import TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.health import HealthServer
from pyflannel_runtime.ops.agent import (
    AgentEndpoint,
    AgentHealth,
    AgentState,
    agent_endpoint,
    parse_statusz,
    probe_agent,
)

T = TypeVar("T")


def with_server(check: Callable[[HealthServer], T], setup: Callable[[HealthServer], None]) -> T:
    """Run `check` (in a thread: it blocks) against a started HealthServer."""

    async def scenario() -> T:
        server = HealthServer("127.0.0.1", 0)
        setup(server)
        await server.start()
        try:
            return await asyncio.to_thread(check, server)
        finally:
            await server.stop()

    return asyncio.run(scenario())


def probe(server: HealthServer) -> AgentHealth:
    return probe_agent(AgentEndpoint("127.0.0.1", server.port), timeout=5)


def test_a_starting_agent_is_not_ready_and_tells_its_version() -> None:
    health = with_server(probe, lambda server: None)
    assert health.state is AgentState.NOT_READY and not health.ok
    assert health.reason == "subnet.env not written yet"
    assert (health.facts.name, health.facts.version) == ("pyflanneld", __version__)
    assert health.facts.uptime is not None and health.facts.uptime >= 0
    assert health.describe().startswith(
        f"Agent not ready: subnet.env not written yet (pyflanneld {__version__}, up "
    )


def test_a_ready_udp_agent_publishes_its_forwarders_routes() -> None:
    def setup(server: HealthServer) -> None:
        server.ready = True
        server.backend = "udp"
        routes = {"10.244.2.0/24": "192.0.2.12:8285", "bogus": "x", "10.244.3.0/24": "nope"}
        server.datapath = lambda: {"udp": {"device": "flannel0", "routes": routes}}

    health = with_server(probe, setup)
    assert health.state is AgentState.READY and health.ok and health.reason == ""
    assert health.facts.backend == "udp"
    forwarder = health.facts.forwarder
    assert forwarder is not None and forwarder.device == "flannel0"
    assert forwarder.routes == {ip_network("10.244.2.0/24"): ip_address("192.0.2.12")}
    assert health.as_dict()["state"] == "ready"


def test_nothing_listening_is_an_agent_that_is_down() -> None:
    port = with_server(lambda server: server.port, lambda server: None)  # now closed
    health = probe_agent(AgentEndpoint("127.0.0.1", port), timeout=5)
    assert health.state is AgentState.DOWN and not health.ok
    assert health.describe() == (
        f"Agent down: nothing answers on 127.0.0.1:{port}: connection refused"
    )


@contextmanager
def http_server(answers: dict[str, tuple[int, bytes]]) -> Iterator[int]:
    """A plain HTTP server on loopback answering GETs by path (404 otherwise); yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers.get(self.path, (404, b"404 page not found\n"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_stranger_on_the_port_is_not_taken_for_the_agent() -> None:
    with http_server({"/healthz": (200, b"OK")}) as port:
        health = probe_agent(AgentEndpoint("127.0.0.1", port), timeout=5)
    assert health.state is AgentState.DOWN
    assert health.reason == f"127.0.0.1:{port}/healthz answered 200 'OK', not flannel's agent"


def test_go_flanneld_is_known_by_its_answers_but_publishes_no_version() -> None:
    answers = {"/healthz": (200, b"flanneld is running"), "/readyz": (200, b"flanneld is ready")}
    with http_server(answers) as port:
        health = probe_agent(AgentEndpoint("127.0.0.1", port), timeout=5)
    assert health.state is AgentState.READY and health.facts.version is None
    assert health.describe() == (
        f"Agent ready (flanneld (version not published), http://127.0.0.1:{port})"
    )


@pytest.mark.parametrize(
    ("ip", "port", "expected"),
    [("0.0.0.0", 8081, AgentEndpoint("127.0.0.1", 8081)),
     ("::", 8081, AgentEndpoint("::1", 8081)),
     ("192.0.2.11", 9000, AgentEndpoint("192.0.2.11", 9000)),
     ("0.0.0.0", 0, None)],
)  # fmt: skip
def test_the_endpoint_is_the_agents_own_and_every_address_means_loopback(
    ip: str, port: int, expected: AgentEndpoint | None
) -> None:
    assert agent_endpoint(ip, port) == expected


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_port_out_of_range_is_refused(port: int) -> None:
    with pytest.raises(ValueError, match=f"port {port} is not in 0-65535"):
        agent_endpoint("0.0.0.0", port)


def test_healthz_off_is_reported_as_not_checked_and_is_no_failure() -> None:
    health = probe_agent(None, timeout=1)
    assert health.state is AgentState.UNCHECKED and health.ok
    assert health.describe() == (
        "Agent health not checked (healthz off, and no subnet file to find the agent by)"
    )
    assert AgentEndpoint("::1", 8081).url == "http://[::1]:8081"


@pytest.mark.parametrize(
    "body",
    [b"", b"[]", b"{", b"[" * 100_000 + b"]" * 100_000, b'{"pid": true, "version": 7}',
     b'{"udp": {"device": 1, "routes": {}}}', b'{"udp": {"device": "f", "routes": []}}'],
)  # fmt: skip
def test_statusz_facts_of_the_wrong_shape_are_left_out(body: bytes) -> None:
    facts = parse_statusz(body)
    assert (facts.pid, facts.version, facts.forwarder) == (None, None, None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.sampled_from(["name", "pid", "uptime_seconds", "udp", "version"]),
                       json_values) | json_values)  # fmt: skip
def test_statusz_of_any_shape_gives_typed_facts_or_none(document: object) -> None:
    facts = parse_statusz(json.dumps(document).encode())
    assert facts.pid is None or type(facts.pid) is int
    assert facts.version is None or isinstance(facts.version, str)
    if facts.forwarder is not None:
        assert all(net.version == 4 for net in facts.forwarder.routes)


@given(st.binary(max_size=256))
def test_statusz_of_any_bytes_never_raises(body: bytes) -> None:
    parse_statusz(body)
