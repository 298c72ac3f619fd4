"""The agent's metrics as prometheus-client renders them: one collector that reads the agent's
state when scraped (`agent.metrics_state`), the event-to-kernel histogram from the counts the agent
keeps, and prometheus-client's process collector (CPU, memory, descriptors). Loaded at the first
scrape."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from pyflannel_runtime import __version__
from pyflannel_runtime.agent.metrics_state import AgentState, LatencyHistogram
from pyflannel_runtime.backend.base import CountsDrops, Network
from pyflannel_runtime.firewall.manager import TrafficManager
from pyflannel_runtime.subnet.manager import StoreStats
from pyflannel_runtime.subnet.usage import SubnetUsage, subnet_usage
from pyflannel_runtime.subnet.watcher import LeaseWatcher
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig


def renderer(state: AgentState, event_to_kernel: LatencyHistogram) -> Callable[[], bytes]:
    """What renders the exposition of the agent's metrics at each call."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(state, event_to_kernel))
    ProcessCollector(registry=registry)
    return lambda: generate_latest(registry)


class AgentCollector(Collector):
    def __init__(self, state: AgentState, event_to_kernel: LatencyHistogram) -> None:
        self._state = state
        self._event_to_kernel = event_to_kernel
        # The subnet pool's usage and the lease batches it was counted after: counting 5 000
        # leases takes milliseconds, and between lease changes the count stands.
        self._pool: tuple[int, tuple[SubnetUsage, ...]] | None = None

    def collect(self) -> Iterator[Metric]:
        state = self._state
        info = GaugeMetricFamily(
            "pyflannel_build_info",
            "The agent's version and the backend it runs (empty until the network config is "
            "read); always 1",
            labels=["version", "backend"],
        )
        info.add_metric([__version__, state.backend], 1)
        yield info
        yield _latency(
            "pyflannel_event_to_kernel_seconds",
            "Seconds from a lease event's arrival from the lease store to the kernel's "
            "acknowledgement of the datapath's writes for it",
            self._event_to_kernel,
        )
        yield GaugeMetricFamily(
            "pyflannel_ready",
            "1 once the agent is ready (subnet.env written, as /readyz answers 200), else 0",
            value=1 if state.ready() else 0,
        )
        if state.store is not None:
            yield from _store_metrics(state.store)
        if state.leases is not None:
            yield from _lease_metrics(state.leases)
            if state.config is not None:
                yield from _pool_metrics(self._usage(state.config, state.leases))
        if state.network is not None:
            yield GaugeMetricFamily(
                "pyflannel_peers_programmed",
                "Peers whose datapath entries the kernel holds (udp: peers the forwarder "
                "routes to), as far as the agent knows",
                value=state.network.programmed_peers(),
            )
            yield _drift_repairs(state.network, state.traffic)
            if isinstance(state.network, CountsDrops):
                yield _labelled(
                    CounterMetricFamily(
                        "pyflannel_udp_datagrams_dropped",
                        "Packets and datagrams the udp forwarder dropped, by reason (the "
                        "counters /statusz shows; socket_drops: at its sockets, by the kernel)",
                        labels=["reason"],
                    ),
                    state.network.counters(),
                )

    def _usage(self, config: NetworkConfig, leases: LeaseWatcher) -> tuple[SubnetUsage, ...]:
        if self._pool is None or self._pool[0] != leases.batches:
            try:
                usage = subnet_usage(config, (leases.own_lease, *leases.leases))
            except ConfigError:
                usage = ()
            self._pool = (leases.batches, usage)
        return self._pool[1]


def _labelled(family: CounterMetricFamily, counts: Mapping[str, int]) -> CounterMetricFamily:
    for label, count in sorted(counts.items()):
        family.add_metric([label], count)
    return family


def _store_metrics(stats: StoreStats) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "pyflannel_lease_renewals",
        "Renewals of this node's lease in etcd (the Kubernetes datastore renews none)",
        value=stats.renewals,
    )
    yield CounterMetricFamily(
        "pyflannel_lease_renewal_failures",
        "Attempts to renew this node's lease that failed (retried after a minute, sooner as "
        "the lease runs out)",
        value=stats.renewal_failures,
    )
    yield _labelled(
        CounterMetricFamily(
            "pyflannel_datastore_watch_restarts",
            "Times a watch on the lease store was started again, by reason (etcd: closed, "
            "compacted, error; Kubernetes: closed, expired, error)",
            labels=["reason"],
        ),
        stats.watch_restarts,
    )
    expiry = stats.own_lease_expiry
    if expiry is not None and math.isfinite(expiry):
        yield GaugeMetricFamily(
            "pyflannel_own_lease_expiry_timestamp_seconds",
            "When this node's lease expires unless renewed, in Unix seconds (absent where it "
            "never expires: a reservation, the Kubernetes datastore)",
            value=expiry,
        )


def _lease_metrics(leases: LeaseWatcher) -> Iterator[Metric]:
    peers, rejected = leases.peer_count, leases.rejected_count
    yield GaugeMetricFamily(
        "pyflannel_leases",
        "Leases in the store as this agent sees them: its own, its peers' and the rejected",
        value=1 + peers + rejected,
    )
    yield GaugeMetricFamily(
        "pyflannel_peers",
        "Peers whose leases this node is to program (the leases less its own and the rejected)",
        value=peers,
    )
    yield GaugeMetricFamily(
        "pyflannel_leases_rejected",
        "Leases this node must not program (outside the network, of another length, "
        "overlapping its own subnet, holding no subnet): never programmed",
        value=rejected,
    )


def _pool_metrics(usage: tuple[SubnetUsage, ...]) -> Iterator[Metric]:
    if not usage:
        return
    free = GaugeMetricFamily(
        "pyflannel_subnets_free",
        "Subnets of SubnetLen between SubnetMin and SubnetMax that none of the leases this agent "
        "sees takes, by address family",
        labels=["family"],
    )
    size = GaugeMetricFamily(
        "pyflannel_subnet_pool_size",
        "Subnets of SubnetLen between SubnetMin and SubnetMax, by address family",
        labels=["family"],
    )
    for family in usage:
        free.add_metric([family.family], family.free)
        size.add_metric([family.family], family.total)
    yield free
    yield size


def _drift_repairs(network: Network, traffic: TrafficManager | None) -> CounterMetricFamily:
    counts = dict(network.repairs())
    if traffic is not None:
        counts["rule"] = traffic.rules_repaired
    return _labelled(
        CounterMetricFamily(
            "pyflannel_drift_repairs",
            "Datapath entries the agent put back after someone else deleted or changed them, by "
            "kind (route, neighbour, fdb, device: the VXLAN device; rule: a firewall rule set)",
            labels=["kind"],
        ),
        counts,
    )


def _latency(name: str, documentation: str, histogram: LatencyHistogram) -> HistogramMetricFamily:
    cumulative, buckets = 0, []
    for bound, count in zip((*histogram.bounds, math.inf), histogram.counts, strict=True):
        cumulative += count
        buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=histogram.sum)
