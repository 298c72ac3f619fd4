"""What the agent and the CNI plugin leave on a node outside their own files, found and removed
exactly, for reset.yml: flannel's iptables chains with the jumps into them (IPv4 and IPv6),
flannel's nft tables, its routes to other nodes' subnets (host-gw's, on the external
interface; the other backends' go with their devices), the plugin's saved per-container state
and the flannel network's host-local store. Nothing else is touched: no table is flushed, and
no other chain, table, route or directory is changed.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.firewall.command import CommandRunner, FirewallError
from pyflannel_runtime.firewall.iptables import IPTablesManager
from pyflannel_runtime.firewall.nftables import NFTablesManager
from pyflannel_runtime.ipam.node import IpamError, load_target
from pyflannel_runtime.netlink.batch import BatchSender
from pyflannel_runtime.netlink.dump import Ownership, open_dump_socket, owned_routes
from pyflannel_runtime.netlink.entries import Action, IPNetwork, Op, Route
from pyflannel_runtime.ops.verify import describe, read_subnet_env_text
from pyflannel_runtime.subnet.etcd.etcd import (
    ETCD_ERRORS,
    EtcdSettings,
    EtcdSubnetManager,
    describe_etcd_error,
)
from pyflannel_runtime.wire.subnet_env import read_previous_subnets

_IPTABLES = {4: "iptables", 6: "ip6tables"}


class ResetError(PyflannelError):
    """Something of ours could not be found or removed; ``str()`` says what and why."""


@dataclass(frozen=True)
class Leftovers:
    """What was (in check mode: would be) removed."""

    # "iptables -t nat -N FLANNEL-POSTRTG", ..., "nft table ip flannel-ipv4"
    firewall: tuple[str, ...]
    # "route 10.244.7.0/24 via 192.0.2.12 dev eth0"
    routes: tuple[str, ...]
    # the plugin's state directory and the network's host-local store
    directories: tuple[str, ...]

    @property
    def found(self) -> bool:
        return bool(self.firewall or self.routes or self.directories)


async def remove_firewall(runner: CommandRunner, *, check: bool) -> list[str]:
    """flannel's iptables chains and jumps of both IP versions, and its nft tables; a family
    whose tool is not installed cannot hold any. Raises FirewallError."""
    found: list[str] = []
    iptables = IPTablesManager(runner)
    for version, tool in _IPTABLES.items():
        if shutil.which(tool) is not None:
            removed = await iptables.remove_owned_chains(version, check=check)
            found += [f"{tool} {line}" for line in removed]
    if shutil.which("nft") is not None:
        found += [
            f"nft table {t}" for t in await NFTablesManager(runner).remove_tables(check=check)
        ]
    return found


def flannel_routes(networks: Sequence[IPNetwork], netns: str | None = None) -> list[Route]:
    """The routes the agent's datapath owns in the main table: via a gateway to a subnet of
    the cluster's networks, with the protocol it writes (``netlink.dump.owns_route``)."""
    sock = open_dump_socket(netns)
    try:
        routes = owned_routes(sock, Ownership(networks=tuple(networks)))
    finally:
        sock.close()
    return sorted(routes, key=lambda route: (route.dst.version, route.dst, route.priority))


def remove_routes(routes: Sequence[Route], netns: str | None = None) -> None:
    """Delete the routes; one that is gone already is no failure. Raises ResetError."""
    sender = BatchSender.open(netns)
    try:
        failures = sender.send([Op(Action.DELETE, route) for route in routes])
    finally:
        sender.close()
    refused = [f for f in failures if f.errno != errno.ESRCH]
    if refused:
        raise ResetError(
            "; ".join(
                f"cannot delete {describe(f.op.entry, {})}: {os.strerror(f.errno)}" for f in refused
            )
        )


def cni_state_directories(conflist: str) -> list[str]:
    """The flannel plugin's state directory (its ``dataDir``) and the host-local store of the
    conflist's network, those that exist; none without the conflist. Raises IpamError."""
    if not os.path.exists(conflist):
        return []
    target = load_target(conflist)
    return [d for d in (target.state_dir, target.hostlocal_dir) if d and os.path.isdir(d)]


def remove_leftovers(
    conflist: str, networks: Sequence[IPNetwork], *, check: bool, netns: str | None = None
) -> Leftovers:
    """Find, and unless ``check`` remove, what the agent of the cluster ``networks`` and the
    plugin of ``conflist`` left (in network namespace ``netns``; the directories are the
    file system's). The conflist is read, not removed: call this before the files go. Raises
    ResetError.
    """
    runner = CommandRunner.in_netns(netns) if netns else CommandRunner()
    names = {} if netns else dict(socket.if_nameindex())
    try:
        directories = cni_state_directories(conflist)
        routes = flannel_routes(networks, netns)
        firewall = asyncio.run(remove_firewall(runner, check=check))
        if not check:
            remove_routes(routes, netns)
            for directory in directories:
                shutil.rmtree(directory)
    except (FirewallError, IpamError) as err:
        raise ResetError(str(err)) from None
    except OSError as err:
        what = err.filename or "the routes"
        raise ResetError(f"cannot remove {what}: {err.strerror or err}") from None
    return Leftovers(
        tuple(firewall), tuple(describe(route, names) for route in routes), tuple(directories)
    )


def release_lease(settings: EtcdSettings, subnet_file: str, *, check: bool) -> str | None:
    """Release in etcd the lease subnet.env names (``EtcdSubnetManager.release_lease``), with the
    agent stopped (a running one would take a lease again). Returns its subnets, or None when
    there was no subnet.env or no lease (a reservation stays). Raises ResetError."""
    try:
        previous = read_previous_subnets(read_subnet_env_text(subnet_file))
    except OSError as err:
        if err.errno == errno.ENOENT:
            return None
        raise ResetError(f"cannot read {subnet_file}: {err.strerror or err}") from None
    subnets = [s for s in (previous.subnet, previous.ipv6_subnet) if s is not None]
    if not subnets:
        return None

    async def release() -> bool:
        manager = EtcdSubnetManager(settings)
        try:
            return await manager.release_lease(previous.subnet, previous.ipv6_subnet, check=check)
        finally:
            await manager.close()

    named = ", ".join(str(subnet) for subnet in subnets)
    try:
        released = asyncio.run(release())
    except ETCD_ERRORS as err:
        raise ResetError(
            f"cannot release the lease of {named}: {describe_etcd_error(err)}"
        ) from None
    return named if released else None
