"""The agent's /metrics: every metric docs/metrics.md names, with help text, read from the
agent's own state when scraped, in a text `promtool check metrics` finds no problem with; served
on the health port only where the agent routes it; prometheus-client loaded at the first
scrape."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.health import HealthServer
from pyflannel_runtime.agent.metrics import CONTENT_TYPE, AgentMetrics
from pyflannel_runtime.agent.metrics_state import LATENCY_BUCKETS
from pyflannel_runtime.subnet.manager import LeaseWatchBatch, StoreStats
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.netconf import parse_config
from tests.integration.scrape import promtool_problems

# The names docs/metrics.md lists, as the exposition spells them (a counter with _total).
NAMES = {
    "pyflannel_build_info",
    "pyflannel_ready",
    "pyflannel_leases",
    "pyflannel_peers",
    "pyflannel_peers_programmed",
    "pyflannel_leases_rejected",
    "pyflannel_own_lease_expiry_timestamp_seconds",
    "pyflannel_lease_renewals_total",
    "pyflannel_lease_renewal_failures_total",
    "pyflannel_datastore_watch_restarts_total",
    "pyflannel_event_to_kernel_seconds",
    "pyflannel_drift_repairs_total",
    "pyflannel_udp_datagrams_dropped_total",
    "pyflannel_subnets_free",
    "pyflannel_subnet_pool_size",
}
ROOT = Path(__file__).resolve().parents[2]
CONFIG = parse_config(b'{"Network": "10.244.0.0/16", "SubnetLen": 24, "Backend": {"Type": "udp"}}')


def lease(n: int) -> Lease:
    return Lease(IPv4Network(f"10.244.{n}.0/24"), None, LeaseAttrs(IPv4Address(f"192.0.2.{n}")))


class UdpLikeNetwork:
    """What the collector asks of a udp network: its peers, repairs and drop counters."""

    def __init__(self) -> None:
        self.lease = lease(1)
        self.programmed = 2
        self.dropped = {"foreign_source": 7, "socket_drops": 3}

    def programmed_peers(self) -> int:
        return self.programmed

    def repairs(self) -> Mapping[str, int]:
        return {}

    def counters(self) -> Mapping[str, int]:
        return self.dropped


class Rules:
    rules_repaired = 4


def running_agent(expiry: float | None = 1.9e9) -> AgentMetrics:
    """The metrics of an agent that runs udp with peers 2 and 3 and a rejected lease."""
    metrics = AgentMetrics()
    state = metrics.state
    state.ready, state.backend, state.config = (lambda: True), "udp", CONFIG
    stats = StoreStats.with_reasons(("closed", "compacted", "error"))
    stats.renewals, stats.renewal_failures, stats.own_lease_expiry = 5, 2, expiry
    stats.watch_restarted("error")
    state.store = stats
    watcher = LeaseWatcher(lease(1), LeaseScope.of(CONFIG, check_lengths=True))
    outside = Lease(IPv4Network("10.9.0.0/24"), None, LeaseAttrs(IPv4Address("192.0.2.9")))
    watcher.apply(LeaseWatchBatch(snapshot=(lease(1), lease(2), lease(3), outside)))
    state.leases = watcher
    state.network = UdpLikeNetwork()  # type: ignore[assignment]
    state.traffic = Rules()  # type: ignore[assignment]
    metrics.event_to_kernel.observe(0.003)
    return metrics


def samples(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by name and labels, parsed back from the exposition."""
    text = metrics.answer().body.decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_every_metric_has_its_name_and_help_and_promtool_finds_no_problem() -> None:
    answer = running_agent().answer()
    assert (answer.status, answer.content_type) == (200, CONTENT_TYPE)
    text = answer.body.decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    named = {
        f"{name}_total" if family.type == "counter" else name for name, family in families.items()
    }
    assert named >= NAMES
    assert all(family.documentation for family in families.values())
    assert promtool_problems(text) == ""


def test_the_values_are_the_agents_state_when_scraped() -> None:
    metrics = running_agent()
    found = samples(metrics)
    assert found[("pyflannel_build_info", (("backend", "udp"), ("version", __version__)))] == 1
    assert found[("pyflannel_ready", ())] == 1
    assert found[("pyflannel_leases", ())] == 4  # its own, two peers and the rejected one
    assert found[("pyflannel_peers", ())] == 2
    assert found[("pyflannel_leases_rejected", ())] == 1
    assert found[("pyflannel_peers_programmed", ())] == 2
    assert found[("pyflannel_own_lease_expiry_timestamp_seconds", ())] == 1.9e9
    assert found[("pyflannel_lease_renewals_total", ())] == 5
    assert found[("pyflannel_lease_renewal_failures_total", ())] == 2
    restarts = {
        labels[0][1]: value
        for (name, labels), value in found.items()
        if name == "pyflannel_datastore_watch_restarts_total"
    }
    assert restarts == {"closed": 0, "compacted": 0, "error": 1}
    # 10.244.1.0 - 10.244.255.0: 255 subnets, of which this node and its two peers hold 3.
    assert found[("pyflannel_subnet_pool_size", (("family", "ipv4"),))] == 255
    assert found[("pyflannel_subnets_free", (("family", "ipv4"),))] == 252
    assert found[("pyflannel_drift_repairs_total", (("kind", "rule"),))] == 4
    assert found[("pyflannel_udp_datagrams_dropped_total", (("reason", "foreign_source"),))] == 7
    assert found[("pyflannel_udp_datagrams_dropped_total", (("reason", "socket_drops"),))] == 3
    assert found[("pyflannel_event_to_kernel_seconds_count", ())] == 1
    assert found[("pyflannel_event_to_kernel_seconds_bucket", (("le", "0.0025"),))] == 0
    assert found[("pyflannel_event_to_kernel_seconds_bucket", (("le", "0.005"),))] == 1

    # Read again at the next scrape: nothing was copied at the first.
    state = metrics.state
    assert state.store is not None and state.network is not None and state.leases is not None
    state.store.renewals += 1
    state.network.programmed = 1  # type: ignore[attr-defined]
    state.leases.apply(LeaseWatchBatch(events=(LeaseEvent(EventType.ADDED, lease(4)),)))
    again = samples(metrics)
    assert again[("pyflannel_lease_renewals_total", ())] == 6
    assert again[("pyflannel_peers_programmed", ())] == 1
    assert again[("pyflannel_peers", ())] == 3
    assert again[("pyflannel_subnets_free", (("family", "ipv4"),))] == 251


@pytest.mark.parametrize("expiry", [None, math.inf])
def test_a_lease_that_never_expires_has_no_expiry(expiry: float | None) -> None:
    names = {name for name, _ in samples(running_agent(expiry))}
    assert "pyflannel_own_lease_expiry_timestamp_seconds" not in names
    assert "pyflannel_lease_renewals_total" in names


def test_a_starting_agent_tells_what_it_knows_and_nothing_more() -> None:
    found = samples(AgentMetrics())
    assert found[("pyflannel_build_info", (("backend", ""), ("version", __version__)))] == 1
    assert found[("pyflannel_ready", ())] == 0
    names = {name for name, _ in found}
    assert not {"pyflannel_leases", "pyflannel_peers_programmed", "pyflannel_subnets_free"} & names
    assert "process_resident_memory_bytes" in names


def _get(url: str, method: str = "GET") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_the_health_port_serves_metrics_where_routed_and_404_where_not() -> None:
    async def scenario() -> list[tuple[int, str, bytes]]:
        served, plain = HealthServer("127.0.0.1", 0), HealthServer("127.0.0.1", 0)
        served.routes["/metrics"] = running_agent().answer
        for server in (served, plain):
            await server.start()
        try:
            return [
                await asyncio.to_thread(_get, f"http://127.0.0.1:{served.port}/metrics"),
                await asyncio.to_thread(_get, f"http://127.0.0.1:{served.port}/metrics", "HEAD"),
                await asyncio.to_thread(_get, f"http://127.0.0.1:{plain.port}/metrics"),
            ]
        finally:
            for server in (served, plain):
                await server.stop()

    get, head, off = asyncio.run(scenario())
    assert get[:2] == (200, CONTENT_TYPE) and b"\npyflannel_ready 1.0\n" in get[2]
    assert head == (200, CONTENT_TYPE, b"")
    assert off == (404, "text/plain; charset=utf-8", b"404 page not found\n")


@given(st.lists(st.sampled_from(LATENCY_BUCKETS) | st.floats(0, 10), max_size=40))
def test_the_latency_histogram_counts_as_prometheus_clients_own(observed: list[float]) -> None:
    ours = AgentMetrics()
    registry = CollectorRegistry(auto_describe=False)
    theirs = Histogram(
        "pyflannel_event_to_kernel_seconds", "", buckets=LATENCY_BUCKETS, registry=registry
    )
    for seconds in observed:
        ours.event_to_kernel.observe(seconds)
        theirs.observe(seconds)
    expected = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    found = samples(ours)
    assert {key: found[key] for key in expected} == pytest.approx(expected)


def test_an_agent_loads_prometheus_client_at_the_first_scrape_not_before() -> None:
    probe = (
        "import sys\n"
        "from pyflannel_runtime.agent.main import Agent\n"
        "from pyflannel_runtime.agent.metrics import AgentMetrics\n"
        "metrics = AgentMetrics()\n"
        "metrics.event_to_kernel.observe(0.002)\n"
        "before = 'prometheus_client' in sys.modules\n"
        "metrics.answer()\n"
        "print(before, 'prometheus_client' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["False", "True"]
