"""The lab's underlay: a bridge in the root namespace and one veth per host into its netns.

The controller reaches the hosts over this bridge, so its range must be one the root
namespace does not already route (packets would otherwise leave through a real NIC). The
candidates are slots of the TEST-NET-2 and TEST-NET-3 ranges; TEST-NET-1 is often the
machine's own network. Each lab takes the first free slot, so several labs can run side by
side. The bridge takes the slot's first address; node N takes the (10+N)th. Each host's NIC
gets a MAC derived from its address, so it looks the same after a reboot.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network

from pyflannel_lab.errors import LabError

CANDIDATE_RANGES = (IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/24"))
SLOT_PREFIX = 26
FIRST_HOST_OFFSET = 10
MAX_HOSTS = 50  # .11 to .60 of a /26


def free_slot(routes: Iterable[IPv4Network]) -> IPv4Network | None:
    """The first slot no route covers; default routes (/0) do not count."""
    specific = [route for route in routes if route.prefixlen > 0]
    for candidate in CANDIDATE_RANGES:
        for slot in candidate.subnets(new_prefix=SLOT_PREFIX):
            if not any(slot.overlaps(route) for route in specific):
                return slot
    return None


def gateway(slot: IPv4Network) -> IPv4Address:
    return slot.network_address + 1


def host_address(slot: IPv4Network, n: int) -> IPv4Address:
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"host number {n} outside 1..{MAX_HOSTS}")
    return slot.network_address + FIRST_HOST_OFFSET + n


def host_number(slot: IPv4Network, address: IPv4Address) -> int:
    """The N of ``host_address(slot, N)``."""
    return int(address) - int(slot.network_address) - FIRST_HOST_OFFSET


def host_mac(address: IPv4Address) -> str:
    """Locally administered, unicast, unique per address."""
    return "02:00:" + ":".join(f"{byte:02x}" for byte in address.packed)


def root_routes() -> list[IPv4Network]:
    """Every IPv4 route of the root namespace, in every table."""
    listing = json.loads(_ip("-j", "-4", "route", "show", "table", "all") or "[]")
    return [
        IPv4Network(route["dst"], strict=False) for route in listing if route["dst"] != "default"
    ]


def pick_slot() -> IPv4Network:
    slot = free_slot(root_routes())
    if slot is None:
        ranges = ", ".join(str(r) for r in CANDIDATE_RANGES)
        raise LabError(
            f"no free /{SLOT_PREFIX} for the lab underlay in {ranges}: the root namespace "
            "already routes all of them (other labs up? `ip route show table all`)"
        )
    return slot


def create_bridge(name: str, slot: IPv4Network) -> None:
    _ip_batch(
        [
            # Its own address: a bridge without one takes its ports' lowest, and a host attached
            # later (a node added to the lab) would change it under the others' neighbour entries.
            f"link add {name} address {host_mac(gateway(slot))} type bridge",
            f"addr add {gateway(slot)}/{slot.prefixlen} dev {name}",
            f"link set {name} up",
        ]
    )


def attach_host(bridge: str, veth: str, pid: int, address: IPv4Address, slot: IPv4Network) -> None:
    """Give the netns of process ``pid`` an ``eth0`` on the bridge, with a default route via it."""
    delete_link(veth)  # a stale end from a netns that is gone
    _ip_batch(
        [
            f"link add {veth} type veth peer name eth0 address {host_mac(address)} netns {pid}",
            f"link set {veth} master {bridge} up",
        ]
    )
    _ip_batch(
        [
            f"addr add {address}/{slot.prefixlen} dev eth0",
            "link set eth0 up",
            f"route add default via {gateway(slot)} dev eth0",
        ],
        netns_pid=pid,
    )


def delete_link(name: str) -> None:
    if link_exists(name):
        _ip("link", "del", name)


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def _ip(*args: str) -> str:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def _ip_batch(commands: list[str], netns_pid: int | None = None) -> None:
    enter = ["nsenter", f"--net=/proc/{netns_pid}/ns/net"] if netns_pid else []
    result = subprocess.run(
        [*enter, "ip", "-batch", "-"],
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise LabError(f"ip -batch ({'; '.join(commands)}): {result.stderr.strip()}")
