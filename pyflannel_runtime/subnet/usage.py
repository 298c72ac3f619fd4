"""How much of the network the leases take, for each address family: the subnets the agents'
allocator hands out (`allocation.free_blocks`: blocks of SubnetLen from SubnetMin to SubnetMax)
and how many of them a lease takes. Pure; `pyflannel status`, the ``leases_info`` module and the
agent's metrics count with it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config


def block_count(first: int, last: int, size: int) -> int:
    """How many blocks of `size` start at `first`, `first + size`, ... up to `last`."""
    return 0 if last < first else (last - first) // size + 1


def used_blocks(first: int, last: int, size: int, taken: Iterable[tuple[int, int]]) -> int:
    """How many of those blocks overlap a taken ``(start, end)`` range (inclusive ends): the
    ones `subnet.allocation.free_blocks` never offers."""
    count = block_count(first, last, size)
    spans = []
    for start, end in taken:
        low, high = max(0, (start - first) // size), min(count - 1, (end - first) // size)
        if low <= high:
            spans.append((low, high))
    used, reached = 0, -1
    for low, high in sorted(spans):
        if high > reached:
            used += high - max(low, reached + 1) + 1
            reached = high
    return used


@dataclass(frozen=True)
class SubnetUsage:
    """One address family of the network: its subnets between SubnetMin and SubnetMax, how
    many a lease takes, and how many leases lie outside them (the agents reject those)."""

    family: str  # "ipv4" or "ipv6"
    network: IPv4Network | IPv6Network
    subnet_len: int
    subnet_min: IPv4Address | IPv6Address
    subnet_max: IPv4Address | IPv6Address
    total: int
    used: int
    outside: int

    @property
    def free(self) -> int:
        return self.total - self.used


def _usage(
    family: str,
    network: IPv4Network | IPv6Network,
    subnet_len: int,
    low: IPv4Address | IPv6Address,
    high: IPv4Address | IPv6Address,
    subnets: Sequence[IPv4Network | IPv6Network],
) -> SubnetUsage:
    first, last, size = int(low), int(high), 1 << (network.max_prefixlen - subnet_len)
    # Without ipaddress's broadcast_address, which costs more than the rest at 5 000 leases.
    ranges = [
        (start, start + (1 << (s.max_prefixlen - s.prefixlen)) - 1)
        for s in subnets
        for start in (int(s.network_address),)
    ]
    total = block_count(first, last, size)
    # A range that ends before the first block or starts past the last one takes none of them.
    end = first + total * size - 1
    outside = sum(1 for start, stop in ranges if not total or stop < first or start > end)
    return SubnetUsage(
        family,
        network,
        subnet_len,
        low,
        high,
        total,
        used_blocks(first, last, size, ranges),
        outside,
    )


def subnet_usage(config: NetworkConfig, leases: Sequence[Lease]) -> tuple[SubnetUsage, ...]:
    """Each enabled family's subnets and how many the leases take, with flanneld's defaults
    for SubnetLen, SubnetMin and SubnetMax (flannel's CheckNetworkConfig). ConfigError when
    the network has no such range."""
    checked = check_network_config(config)
    found = []
    if checked.enable_ipv4:
        assert checked.network is not None
        assert checked.subnet_min is not None and checked.subnet_max is not None
        subnets = [s for s in (lease.subnet for lease in leases) if s is not None and s.prefixlen]
        found.append(
            _usage(
                "ipv4",
                checked.network,
                checked.subnet_len,
                checked.subnet_min,
                checked.subnet_max,
                subnets,
            )
        )
    if checked.enable_ipv6:
        assert checked.ipv6_network is not None
        assert checked.ipv6_subnet_min is not None and checked.ipv6_subnet_max is not None
        subnets6 = [lease.ipv6_subnet for lease in leases if lease.ipv6_subnet is not None]
        found.append(
            _usage(
                "ipv6",
                checked.ipv6_network,
                checked.ipv6_subnet_len,
                checked.ipv6_subnet_min,
                checked.ipv6_subnet_max,
                subnets6,
            )
        )
    return tuple(found)
