"""Choosing a subnet for this node from the etcd lease list, without any I/O (flannel-io/flannel
pkg/subnet/etcd/local_manager.go: tryAcquireLease, allocateSubnet).

Deliberate differences from flannel: a previous subnet is refused when it overlaps any lease
(flannel only refuses an exactly equal one), and the free-subnet scan jumps over a taken
range instead of stepping through it, which yields the same candidates in bounded time.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Network
from typing import TypeVar

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig
from pyflannel_runtime.wire.subnet_env import PreviousSubnets

log = logging.getLogger(__name__)

MAX_CANDIDATES = 100

_Net = TypeVar("_Net", IPv4Network, IPv6Network)


class OutOfSubnets(PyflannelError):
    def __init__(self) -> None:
        super().__init__("out of subnets")


# --- compatibility with the configured network ------------------------------------------------


def subnet_fits(subnet: IPv4Network | None, cfg: NetworkConfig) -> bool:
    """flannel's isSubnetConfigCompat: inside [SubnetMin, SubnetMax] with the SubnetLen."""
    if subnet is None or cfg.subnet_min is None or cfg.subnet_max is None:
        return False
    return (
        cfg.subnet_min <= subnet.network_address <= cfg.subnet_max
        and subnet.prefixlen == cfg.subnet_len
    )


def ipv6_subnet_fits(subnet: IPv6Network | None, cfg: NetworkConfig) -> bool:
    if subnet is None or cfg.ipv6_subnet_min is None or cfg.ipv6_subnet_max is None:
        return False
    return (
        cfg.ipv6_subnet_min <= subnet.network_address <= cfg.ipv6_subnet_max
        and subnet.prefixlen == cfg.ipv6_subnet_len
    )


_NO_IPV4 = IPv4Network("0.0.0.0/0")


def _is_empty(subnet: IPv4Network | None) -> bool:
    """v6-only leases carry 0.0.0.0/0 (or nothing) as their IPv4 subnet."""
    return subnet is None or subnet == _NO_IPV4


def lease_fits(lease: Lease, cfg: NetworkConfig) -> bool:
    """A family that is disabled must be absent from the lease; an enabled one must fit."""
    v4_ok = subnet_fits(lease.subnet, cfg) if cfg.enable_ipv4 else _is_empty(lease.subnet)
    v6_ok = (
        ipv6_subnet_fits(lease.ipv6_subnet, cfg) if cfg.enable_ipv6 else lease.ipv6_subnet is None
    )
    return v4_ok and v6_ok


def find_own_lease(leases: Iterable[Lease], attrs: LeaseAttrs) -> Lease | None:
    """The lease this node held before, found by its public IP.

    Matching is on the IPv4 public IP as in flannel; a node without one (IPv6 only) is matched
    on its IPv6 public IP, so that v6-only nodes, all at 0.0.0.0, do not take each other's.
    """
    unset = IPv4Address("0.0.0.0")
    for lease in leases:
        if attrs.public_ip != unset:
            if lease.attrs.public_ip == attrs.public_ip:
                return lease
        elif attrs.public_ipv6 is not None and lease.attrs.public_ipv6 == attrs.public_ipv6:
            return lease
    return None


# --- the free-subnet scan ---------------------------------------------------------------------


def free_blocks(
    first: int, last: int, size: int, taken: Iterable[tuple[int, int]], limit: int
) -> list[int]:
    """Start addresses of the first ``limit`` blocks of ``size`` from ``first`` up to ``last``
    (inclusive starts, stepping by ``size``) that overlap no taken ``(start, end)`` range."""
    ranges = sorted(taken)
    found: list[int] = []
    start = first
    while start <= last and len(found) < limit:
        end = start + size - 1
        blocker = next((r for r in ranges if r[0] <= end and start <= r[1]), None)
        if blocker is None:
            found.append(start)
            start += size
        else:
            # Jump to the first block boundary past the blocking range.
            start = first + ((blocker[1] - first) // size + 1) * size
    return found


def free_ipv4_subnets(
    cfg: NetworkConfig, taken: Iterable[IPv4Network], limit: int = MAX_CANDIDATES
) -> list[IPv4Network]:
    assert cfg.subnet_min is not None and cfg.subnet_max is not None
    size = 1 << (32 - cfg.subnet_len)
    ranges = [(int(n.network_address), int(n.broadcast_address)) for n in taken]
    starts = free_blocks(int(cfg.subnet_min), int(cfg.subnet_max), size, ranges, limit)
    return [IPv4Network((start, cfg.subnet_len)) for start in starts]


def free_ipv6_subnets(
    cfg: NetworkConfig, taken: Iterable[IPv6Network], limit: int = MAX_CANDIDATES
) -> list[IPv6Network]:
    assert cfg.ipv6_subnet_min is not None and cfg.ipv6_subnet_max is not None
    size = 1 << (128 - cfg.ipv6_subnet_len)
    ranges = [(int(n.network_address), int(n.broadcast_address)) for n in taken]
    starts = free_blocks(int(cfg.ipv6_subnet_min), int(cfg.ipv6_subnet_max), size, ranges, limit)
    return [IPv6Network((start, cfg.ipv6_subnet_len)) for start in starts]


# --- the whole choice for a new lease -----------------------------------------------------------


@dataclass(frozen=True)
class NewSubnets:
    subnet: IPv4Network | None
    ipv6_subnet: IPv6Network | None


def _overlaps_any(subnet: _Net, others: Sequence[_Net]) -> bool:
    return any(subnet.overlaps(other) for other in others)


def _previous_v4(
    cfg: NetworkConfig, previous: PreviousSubnets, taken: list[IPv4Network]
) -> IPv4Network | None:
    sn = previous.subnet
    if sn is None or _overlaps_any(sn, taken):
        return None
    if not subnet_fits(sn, cfg):
        log.error(
            "Found previously leased subnet (%s) that is not compatible with the Etcd network "
            "config, ignoring",
            sn,
        )
        return None
    log.info("Found previously leased subnet (%s), reusing", sn)
    return sn


def _previous_v6(
    cfg: NetworkConfig, previous: PreviousSubnets, taken: list[IPv6Network]
) -> IPv6Network | None:
    sn = previous.ipv6_subnet
    if sn is None or _overlaps_any(sn, taken):
        return None
    if not ipv6_subnet_fits(sn, cfg):
        log.error(
            "Found previously leased ipv6 subnet (%s) that is not compatible with the Etcd "
            "network config, ignoring",
            sn,
        )
        return None
    log.info("Found previously leased ipv6 subnet (%s), reusing", sn)
    return sn


def choose_new_subnets(
    cfg: NetworkConfig,
    leases: Sequence[Lease],
    previous: PreviousSubnets,
    rng: random.Random,
) -> NewSubnets:
    """The previous run's subnet when still free and compatible, else a random free one,
    for each enabled family independently. Raises OutOfSubnets."""
    subnet: IPv4Network | None = None
    ipv6_subnet: IPv6Network | None = None
    if cfg.enable_ipv4:
        taken = [s for s in (lease.subnet for lease in leases) if s is not None and s != _NO_IPV4]
        subnet = _previous_v4(cfg, previous, taken)
        if subnet is None:
            candidates = free_ipv4_subnets(cfg, taken)
            if not candidates:
                raise OutOfSubnets()
            subnet = rng.choice(candidates)
    if cfg.enable_ipv6:
        taken6 = [lease.ipv6_subnet for lease in leases if lease.ipv6_subnet is not None]
        ipv6_subnet = _previous_v6(cfg, previous, taken6)
        if ipv6_subnet is None:
            candidates6 = free_ipv6_subnets(cfg, taken6)
            if not candidates6:
                raise OutOfSubnets()
            ipv6_subnet = rng.choice(candidates6)
    return NewSubnets(subnet, ipv6_subnet)
