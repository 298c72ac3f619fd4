"""Publish the network config and pin subnet reservations in etcd: read, compare, write.

What ``etcdctl put <prefix>/config`` and flannel's Documentation/reservations.md do by hand,
in the form an Ansible module needs: the config is checked as flanneld would decode it before
anything is written, nothing is written when etcd already holds the same bytes, and every call
returns what was there before and what is there after (for ``--diff``). With ``check=True``
nothing is written at all; the result says what would change.

A reservation is a subnet key without an etcd lease (``pkg/subnet/etcd/registry.go``): the node
whose public IP it names takes that subnet and keeps it across restarts. Pinning one that an
agent already holds under a lease turns it into a reservation with the agent's own value, so the
running agent keeps its backend data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TypeVar

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.subnet.etcd.client import EtcdClient, EtcdUnavailable, KeyValue
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, client_tls, parse_endpoint
from pyflannel_runtime.wire.lease import LeaseAttrs, LeaseError, make_subnet_key
from pyflannel_runtime.wire.netconf import check_network_config, ip_stack, parse_config

_T = TypeVar("_T")


class PublishError(PyflannelError):
    """The change cannot be made: an invalid config, or a subnet another node holds."""


@dataclass(frozen=True)
class Change:
    """One key: its value before and after (None: absent), and whether it was (or would be)
    written."""

    key: str
    before: str | None
    after: str
    changed: bool


@dataclass(frozen=True)
class Reservation:
    """A pinned subnet for the node with ``public_ip`` (and ``public_ipv6`` when dual stack)."""

    subnet: IPv4Network | None
    ipv6_subnet: IPv6Network | None
    public_ip: IPv4Address | None
    public_ipv6: IPv6Address | None = None


def _join(prefix: str, *parts: str) -> str:
    return "/".join([prefix.rstrip("/"), *parts])


def config_key(prefix: str) -> str:
    return _join(prefix, "config")


def reservation_key(prefix: str, reservation: Reservation) -> str:
    return _join(prefix, "subnets", make_subnet_key(reservation.subnet, reservation.ipv6_subnet))


def validate_config(text: str) -> None:
    """Raises PublishError with flanneld's own message when flanneld would reject ``text``."""
    try:
        config = check_network_config(parse_config(text))
        ip_stack(config)
        specs.validate(config)  # the agent's own check of the backend and its options
    except ValueError as err:  # ConfigError, and LeaseError/ValueError from the decoders
        raise PublishError(f"invalid network config: {err}") from None


async def publish_config(client: EtcdClient, prefix: str, text: str, *, check: bool) -> Change:
    """Make ``<prefix>/config`` hold exactly ``text``."""
    validate_config(text)
    key = config_key(prefix)
    current = await client.get(key.encode())
    before = None if current is None else current.value.decode(errors="replace")
    changed = before != text
    if changed and not check:
        await client.put(key.encode(), text.encode())
    return Change(key, before, text, changed)


def _owner_attrs(current: KeyValue, reservation: Reservation, key: str) -> LeaseAttrs:
    try:
        attrs = LeaseAttrs.from_json(current.value)
    except LeaseError as err:
        raise PublishError(f"{key}: holds a value that is not a lease ({err})") from None
    if (
        current.lease
        and reservation.public_ip is not None
        and attrs.public_ip != (reservation.public_ip)
    ):
        raise PublishError(
            f"{key}: leased by the node with public IP {attrs.public_ip}, "
            f"not {reservation.public_ip}; release that lease first"
        )
    return attrs


async def pin_reservation(
    client: EtcdClient, prefix: str, reservation: Reservation, *, check: bool
) -> Change:
    """Make the subnet's key a reservation (no etcd lease) naming the node's public IPs."""
    key = reservation_key(prefix, reservation)
    current = await client.get(key.encode())
    before = None if current is None else current.value.decode(errors="replace")
    wanted = LeaseAttrs(
        public_ip=reservation.public_ip or IPv4Address(0), public_ipv6=reservation.public_ipv6
    )
    after = wanted.to_json()
    if current is not None:
        attrs = _owner_attrs(current, reservation, key)
        if (attrs.public_ip, attrs.public_ipv6) == (wanted.public_ip, wanted.public_ipv6):
            # The owner's own value (with its backend data) stays; only the lease goes.
            after = current.value.decode(errors="replace")
            changed = current.lease != 0
            if changed and not check:
                await client.put(key.encode(), current.value)
            return Change(key, before, after, changed)
    if not check:
        await client.put(key.encode(), after.encode())
    return Change(key, before, after, True)


async def with_client(settings: EtcdSettings, op: Callable[[EtcdClient], Awaitable[_T]]) -> _T:
    """Run ``op`` against the first endpoint that answers (flanneld's flags: TLS, user)."""
    tls = client_tls(settings)
    endpoints = [parse_endpoint(e, tls) for e in settings.endpoints]
    for index, endpoint in enumerate(endpoints):
        client = EtcdClient(
            endpoint,
            username=settings.username,
            password=settings.password if settings.username else "",
            timeout=settings.request_timeout,
        )
        try:
            return await op(client)
        except EtcdUnavailable:
            if index == len(endpoints) - 1:
                raise
        finally:
            await client.close()
    raise PublishError("no etcd endpoints given")


def stored_config(settings: EtcdSettings) -> str | None:
    """What ``<prefix>/config`` holds now (None: nothing), read as ``publish`` reads it before
    it compares."""

    async def read(client: EtcdClient) -> str | None:
        current = await client.get(config_key(settings.prefix).encode())
        return None if current is None else current.value.decode(errors="replace")

    return asyncio.run(with_client(settings, read))


def publish(
    settings: EtcdSettings,
    config: str | None,
    reservations: Sequence[Reservation] = (),
    *,
    check: bool,
) -> list[Change]:
    """The config (when given) and every reservation, in that order, over one connection."""
    if config is not None:
        validate_config(config)

    async def run(client: EtcdClient) -> list[Change]:
        changes = []
        if config is not None:
            changes.append(await publish_config(client, settings.prefix, config, check=check))
        for reservation in reservations:
            changes.append(await pin_reservation(client, settings.prefix, reservation, check=check))
        return changes

    return asyncio.run(with_client(settings, run))
