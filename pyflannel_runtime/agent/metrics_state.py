"""What the agent keeps for /metrics as it runs, without prometheus-client: the state the
collector reads at each scrape, and the event-to-kernel histogram's counts."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyflannel_runtime.backend.base import Network
    from pyflannel_runtime.firewall.manager import TrafficManager
    from pyflannel_runtime.subnet.manager import StoreStats
    from pyflannel_runtime.subnet.watcher import LeaseWatcher
    from pyflannel_runtime.wire.netconf import NetworkConfig

# Seconds: the goal is a p99 under 50 ms at 5 000 peers; an event usually takes 1-10 ms.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class AgentState:
    """What the collector reads; the agent fills it in as it starts (None: not yet)."""

    ready: Callable[[], bool] = lambda: False
    backend: str = ""
    config: NetworkConfig | None = None
    store: StoreStats | None = None
    traffic: TrafficManager | None = None
    network: Network | None = None
    leases: LeaseWatcher | None = None


@dataclass
class LatencyHistogram:
    """Observations counted into buckets by their upper bounds, as a Prometheus histogram counts
    them (a value equal to a bound is in that bound's bucket); the last count is above them all."""

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
