"""pyflanneld's Prometheus metrics: what /metrics on the health port answers, in Prometheus's
text format (docs/metrics.md names each metric and what it means).

Almost everything is read when Prometheus scrapes, by one collector, from state the agent keeps
anyway: the lease watcher's view of the leases, the datapath's programmed peers and repair
counts, the lease store's renewals and watch restarts (`subnet.manager.StoreStats`), the
firewall's re-created rule sets, and for udp the page of counters the forwarding workers (other
processes) write, which /statusz reads too. The code that counts adds an integer; it takes no
lock and calls nothing. The one metric observed as it happens is the latency from a lease event
to the kernel's acknowledgement, a histogram observation per event (about a microsecond, against
a millisecond for the event's netlink round trip).

The agent keeps that state without prometheus-client (`agent.metrics_state`); the library and
the registry built on it (`agent.metrics_registry`) are loaded at the first scrape, so an agent's
start does not pay for them: in a restart storm every agent of a cluster starts at once.

A scrape runs on the event loop, like every health-port answer: at 5 000 peers it takes about
2 ms of the agent's CPU (bench/bench_agent_scale.py), as the free subnets are counted once per
lease change and the peers programmed from what the datapath keeps.
"""

from __future__ import annotations

from collections.abc import Callable

from pyflannel_runtime.agent.http_head import Answer
from pyflannel_runtime.agent.metrics_state import LATENCY_BUCKETS, AgentState, LatencyHistogram

# Prometheus's text exposition format, the one every Prometheus scrapes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class AgentMetrics:
    """What the agent keeps for /metrics, and the answer built from it at each scrape."""

    def __init__(self) -> None:
        self.state = AgentState()
        self.event_to_kernel = LatencyHistogram(LATENCY_BUCKETS)
        self._render: Callable[[], bytes] | None = None

    def answer(self) -> Answer:
        """What /metrics answers."""
        if self._render is None:
            from pyflannel_runtime.agent.metrics_registry import renderer

            self._render = renderer(self.state, self.event_to_kernel)
        return Answer(200, CONTENT_TYPE, self._render())
