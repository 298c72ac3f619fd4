"""Every lease of the network, the inventory host each belongs to, the orphans, and how much of
the network the leases take: the runtime API behind the ``leases_info`` module.

flannel answers "out of subnets" and leases left behind by gone nodes with "wait for the TTL"
(flannel-io/flannel issues 875 and 954); this report names them. A lease belongs to the host
that holds its public IP (IPv4, else IPv6, the addresses flanneld announces); an orphan is a
lease whose public IP no host of the inventory holds. The utilisation is `subnet.usage`'s:
the subnets the agents' allocator hands out and how many of them the leases take.

`leases_report`, `owner` and `with_owners` are pure; `read_leases` reads the lease store.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.ops.verify import LeaseStore, lease_order, list_leases, store_kind
from pyflannel_runtime.subnet.manager import LeaseListing, ListedLease, UnreadableLease
from pyflannel_runtime.subnet.usage import SubnetUsage, subnet_usage
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig

_NO_IPV4 = IPv4Address("0.0.0.0")


@dataclass(frozen=True)
class InventoryHost:
    """A host of the inventory and the addresses it is known by."""

    name: str
    addresses: frozenset[IPv4Address | IPv6Address]


def owner(lease: Lease, hosts: Sequence[InventoryHost]) -> str | None:
    """The first host holding the lease's public IPv4 address (unless unset, as on an IPv6-only
    node), else its public IPv6 address; None for an orphan."""
    return _holder(lease.attrs.public_ip, lease.attrs.public_ipv6, hosts)


def _holder(
    public_ip: IPv4Address, public_ipv6: IPv6Address | None, hosts: Sequence[InventoryHost]
) -> str | None:
    for address in (public_ip if public_ip != _NO_IPV4 else None, public_ipv6):
        if address is None:
            continue
        for host in hosts:
            if address in host.addresses:
                return host.name
    return None


def with_owners(found: Mapping[str, Any], hosts: Sequence[InventoryHost]) -> dict[str, Any]:
    """A report as ``report_dict`` gave it, read where the inventory was not known (each
    lease's host None), with each lease's host from ``hosts`` and the orphans among them.
    Raises ValueError for a lease whose public IPs are not addresses."""
    leases = []
    for lease in found["leases"]:
        public_ipv6 = lease.get("public_ipv6")
        holder = _holder(
            IPv4Address(lease["public_ip"]),
            None if public_ipv6 is None else IPv6Address(public_ipv6),
            hosts,
        )
        leases.append({**lease, "host": holder})
    return {**found, "leases": leases, "orphans": [lease for lease in leases if not lease["host"]]}


# --- the report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeasesReport:
    store: str  # "etcd" or "kube"
    leases: tuple[ListedLease, ...]
    owners: tuple[str | None, ...]  # the inventory host of each lease, in order
    usage: tuple[SubnetUsage, ...]
    unreadable: tuple[UnreadableLease, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def orphans(self) -> tuple[ListedLease, ...]:
        return tuple(row for row, host in zip(self.leases, self.owners, strict=True) if not host)


def leases_report(
    config: NetworkConfig, listing: LeaseListing, store: str, hosts: Sequence[InventoryHost]
) -> LeasesReport:
    leases = tuple(sorted(listing.leases, key=lease_order))
    notes = []
    try:
        usage = subnet_usage(config, [row.lease for row in leases])
    except ConfigError as err:
        usage = ()
        notes.append(f"subnet utilisation not counted: the network config has no range ({err})")
    if store == "kube":
        notes.append(
            "with the Kubernetes datastore the controller manager assigns podCIDRs; the "
            "utilisation counts them in blocks of flannel's SubnetLen"
        )
    return LeasesReport(
        store,
        leases,
        tuple(owner(row.lease, hosts) for row in leases),
        usage,
        listing.unreadable,
        tuple(notes),
    )


def read_leases(store: LeaseStore, hosts: Sequence[InventoryHost]) -> LeasesReport:
    """Every lease in the store, matched to `hosts`. Raises VerifyError (LeaseStoreError) when
    the store cannot be read."""
    config, listing = asyncio.run(list_leases(store))
    return leases_report(config, listing, store_kind(store), hosts)


# --- renderings (pure) ------------------------------------------------------------------------


def vtep_macs(lease: Lease) -> tuple[str, str]:
    """The VTEP MACs (IPv4, IPv6) a lease advertises; empty for backends without one."""
    spec = specs.find(lease.attrs.backend_type)
    if spec is None or spec.advertised_mac is None:
        return "", ""
    return spec.advertised_mac(lease.attrs.backend_data), spec.advertised_mac(
        lease.attrs.backend_v6_data
    )


def iso_time(expiration: float | None) -> str | None:
    """A lease's expiry in UTC (None: none, or not looked up)."""
    if expiration is None or not math.isfinite(expiration):
        return None
    return datetime.fromtimestamp(expiration, UTC).isoformat().replace("+00:00", "Z")


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def lease_fields(row: ListedLease) -> dict[str, Any]:
    """A lease as scripts read it (``pyflannel status -o json`` and the modules)."""
    lease = row.lease
    v4_mac, v6_mac = vtep_macs(lease)
    return {
        "node": row.node or None,
        "subnet": _text(lease.subnet),
        "ipv6_subnet": _text(lease.ipv6_subnet),
        "public_ip": str(lease.attrs.public_ip),
        "public_ipv6": _text(lease.attrs.public_ipv6),
        "backend": lease.attrs.backend_type,
        "vtep_mac": v4_mac or None,
        "vtep_mac_v6": v6_mac or None,
        "expires": iso_time(lease.expiration),
    }


def usage_fields(usage: SubnetUsage) -> dict[str, Any]:
    return {
        "family": usage.family,
        "network": str(usage.network),
        "subnet_len": usage.subnet_len,
        "subnet_min": str(usage.subnet_min),
        "subnet_max": str(usage.subnet_max),
        "total": usage.total,
        "used": usage.used,
        "free": usage.free,
        "outside": usage.outside,
    }


def report_dict(report: LeasesReport) -> dict[str, Any]:
    """The report as the leases_info module returns it."""
    leases = [
        {
            **lease_fields(row),
            # An etcd subnet key without an etcd lease: pinned, it never expires.
            "reservation": report.store == "etcd" and row.lease.expiration is None,
            "host": host,
        }
        for row, host in zip(report.leases, report.owners, strict=True)
    ]
    return {
        "store": report.store,
        "leases": leases,
        "orphans": [lease for lease in leases if lease["host"] is None],
        "utilisation": [usage_fields(u) for u in report.usage],
        "unreadable": [{"name": u.name, "reason": u.reason} for u in report.unreadable],
        "notes": list(report.notes),
    }
