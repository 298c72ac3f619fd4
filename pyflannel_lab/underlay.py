"""The lab's underlay: a bridge in the root namespace and one veth per host into its netns.

The controller reaches the hosts over this bridge, so its range must be one the root
namespace does not already route (packets would otherwise leave through a real NIC), and one
that holds none of the addresses the machine must still reach through its routes: its package
mirrors and name servers (a sandbox may serve them from a TEST-NET address, which a lab bridge
would then capture). The candidates are slots of the TEST-NET-2 and TEST-NET-3 ranges;
TEST-NET-1 is often the machine's own network. Each lab takes the first free slot, so several labs can run side by
side. The bridge takes the slot's first address; node N takes the (10+N)th. Each host's NIC
gets a MAC derived from its address, so it looks the same after a reboot.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from urllib.parse import urlsplit

from pyflannel_lab import aptsources
from pyflannel_lab.errors import LabError

CANDIDATE_RANGES = (IPv4Network("198.51.100.0/24"), IPv4Network("203.0.113.0/24"))
SLOT_PREFIX = 26
FIRST_HOST_OFFSET = 10
MAX_HOSTS = 50  # .11 to .60 of a /26


def free_slot(
    routes: Iterable[IPv4Network], needed: Iterable[IPv4Address] = ()
) -> IPv4Network | None:
    """The first slot no route covers (default routes, /0, do not count) that holds none of
    the ``needed`` addresses."""
    specific = [route for route in routes if route.prefixlen > 0]
    kept = list(needed)
    for candidate in CANDIDATE_RANGES:
        for slot in candidate.subnets(new_prefix=SLOT_PREFIX):
            if any(slot.overlaps(route) for route in specific):
                continue
            if not any(address in slot for address in kept):
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


def needed_addresses() -> list[IPv4Address]:
    """The IPv4 addresses of the machine's name servers and of the hosts its apt sources and pip
    indexes name: what the lab must leave reachable (image builds, wheelhouse builds)."""
    found: set[IPv4Address] = set()
    for host in _needed_hosts():
        try:
            answers = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue  # a name that does not resolve routes nowhere
        found.update(IPv4Address(answer[4][0]) for answer in answers)
    return sorted(found)


def _needed_hosts() -> Iterator[str]:
    resolv = Path("/etc/resolv.conf")
    text = resolv.read_text() if resolv.is_file() else ""
    yield from re.findall(r"^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$", text, re.M)
    uris = [uri for source in aptsources.read_sources() for uri in source.uris]
    for uri in [*uris, *_pip_index_urls()]:
        host = urlsplit(uri).hostname
        if host:
            yield host


def _pip_index_urls() -> list[str]:
    """pip's index URLs, as `pip config list` gives them (files and PIP_* variables)."""
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    urls = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] in ("index-url", "extra-index-url"):
            urls += value.strip("'\"").split()
    return urls or ["https://pypi.org/simple"]


def pick_slot() -> IPv4Network:
    needed = needed_addresses()
    slot = free_slot(root_routes(), needed)
    if slot is None:
        ranges = ", ".join(str(r) for r in CANDIDATE_RANGES)
        kept = ", ".join(str(address) for address in needed) or "none"
        raise LabError(
            f"no free /{SLOT_PREFIX} for the lab underlay in {ranges}: the root namespace "
            "already routes all of them (other labs up? `ip route show table all`), or they "
            f"hold addresses the machine must reach (its mirrors and name servers: {kept})"
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


def readdress_host(pid: int, old: IPv4Address, new: IPv4Address, slot: IPv4Network) -> None:
    """Give the netns of process ``pid`` a new address on its ``eth0`` in place of the old
    (the NIC and its MAC stay), as a DHCP server renumbering the host would."""
    _ip_batch(
        [
            f"addr del {old}/{slot.prefixlen} dev eth0",
            f"addr add {new}/{slot.prefixlen} dev eth0",
            f"route replace default via {gateway(slot)} dev eth0",
        ],
        netns_pid=pid,
    )


def delete_link(name: str) -> None:
    """Delete the link if it is there. A link can go between the look and the delete: the
    kernel removes a veth pair whose other end's namespace was deleted a moment before, in the
    background."""
    if not link_exists(name):
        return
    try:
        _ip("link", "del", name)
    except LabError:
        if link_exists(name):
            raise


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
