"""Following the external interface's address: a node renumbered under a running agent (a new
DHCP lease, a NIC replaced) keeps its subnet, and its peers learn the new address.

flanneld picks its external interface and public IP once, at start: on a renumbered node it
keeps advertising the old address, so every peer's routes and FDB entries point at nothing
until someone restarts it (flannel-io/flannel main.go: main, which calls LookupExtIface once).
The agent watches the kernel's address notifications instead, picks the interface again with
the same flags when one comes, and when the address it would advertise moved, its datapath
follows and the lease is advertised with the new address, on the same subnet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from pyflannel_runtime.netdev.types import ExternalInterface, InterfaceError
from pyflannel_runtime.netlink.monitor import (
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV6_IFADDR,
    address_changes,
    open_monitor,
)
from pyflannel_runtime.wire.lease import LeaseAttrs

log = logging.getLogger("pyflannel.agent")

# Notifications are gathered this long before the interface is picked again: a renumbering is
# an address added and another removed, and a route or two.
SETTLE_SECONDS = 0.5
_RECV = 1 << 16


def moved(old: ExternalInterface, new: ExternalInterface) -> bool:
    """Whether the node's external address (interface, its addresses, the public ones) changed."""
    return (old.index, old.iface_addr, old.iface_v6_addr, old.ext_addr, old.ext_v6_addr) != (
        new.index,
        new.iface_addr,
        new.iface_v6_addr,
        new.ext_addr,
        new.ext_v6_addr,
    )


def moved_attrs(attrs: LeaseAttrs, new: ExternalInterface) -> LeaseAttrs:
    """The lease's attributes with the new public addresses (the backend's data stays)."""
    return dataclasses.replace(
        attrs,
        public_ip=new.ext_addr or attrs.public_ip,
        public_ipv6=new.ext_v6_addr if attrs.public_ipv6 is not None else None,
    )


def describe(old: ExternalInterface, new: ExternalInterface) -> str:
    before = ", ".join(str(a) for a in (old.ext_addr, old.ext_v6_addr) if a is not None)
    after = ", ".join(str(a) for a in (new.ext_addr, new.ext_v6_addr) if a is not None)
    return f"the external address moved from {before} ({old.name}) to {after} ({new.name})"


async def next_move(
    current: ExternalInterface, pick: Callable[[], ExternalInterface]
) -> ExternalInterface:
    """Wait for the kernel's notifications of the external interface's addresses until `pick`
    (the interface selection the agent started with) finds the external address moved;
    returns where to. A moment without a usable address (the old one gone, the new one not
    there yet) waits for the next notification. Other links' addresses (a pod's veth coming
    up) do not count: a node's external address moving to another interface is not followed."""
    loop = asyncio.get_running_loop()
    sock = open_monitor(None, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR)
    arrived = asyncio.Event()

    def drain() -> None:
        while True:
            try:
                data = sock.recv(_RECV)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ENOBUFS: notifications were lost, one may have been ours
                arrived.set()
                continue
            if any(change.index == current.index for change in address_changes(data)):
                arrived.set()

    loop.add_reader(sock.fileno(), drain)
    try:
        while True:
            await arrived.wait()
            await asyncio.sleep(SETTLE_SECONDS)
            arrived.clear()
            try:
                found = await asyncio.to_thread(pick)
            except InterfaceError as err:
                log.warning("The external interface has no usable address for now: %s", err)
                continue
            if moved(current, found):
                return found
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()
