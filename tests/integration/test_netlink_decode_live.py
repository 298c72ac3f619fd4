"""The raw dump decoder against pyroute2 on live dumps of a namespace with a few hundred entries
(vxlan peers for both families, host-gw routes, and entries that are not ours)."""

from __future__ import annotations

import secrets
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network
from typing import Any

import pytest
from pyroute2.netlink.rtnl.marshal import MarshalRtnl

from pyflannel_runtime.backend.drift import Wanted
from pyflannel_runtime.netlink.batch import open_route_socket
from pyflannel_runtime.netlink.decoder import (
    RTM_NEWNEIGH,
    RTM_NEWROUTE,
    decode_neigh,
    decode_route,
    neigh_dump_request,
    parse_dump,
    route_dump_request,
)
from pyflannel_runtime.netlink.dump import (
    Ownership,
    open_dump_socket,
    owned_state,
    read_owned_state,
)
from pyflannel_runtime.netlink.encoder import AF_BRIDGE
from pyflannel_runtime.netlink.entries import DatapathState, Entry, Fdb, Neigh, Route
from pyflannel_runtime.netlink.netns import iproute
from tests.netlink_reference import neigh_record, route_record

pytestmark = pytest.mark.root

V4_PEERS = 180
V6_PEERS = 60
HOSTGW_PEERS = 40
NETWORK4 = IPv4Network("10.244.0.0/16")
NETWORK6 = IPv6Network("fd00:10:244::/48")


def sh(*argv: str, stdin: str | None = None) -> str:
    return subprocess.run(argv, input=stdin, check=True, capture_output=True, text=True).stdout


def mac(n: int, family: int) -> str:
    return f"0a:58:{family:02x}:00:{n >> 8:02x}:{n & 0xFF:02x}"


def underlay(n: int) -> str:
    return f"{('192.0.2', '198.51.100', '203.0.113')[n % 3]}.{10 + n // 3}"


class Host:
    """A namespace programmed with `ip -batch` / `bridge -batch`; `expected` is what a datapath
    owning flannel.1 and flannel-v6.1 must read back."""

    def __init__(self) -> None:
        self.ns = f"pbn-{secrets.token_hex(3)}-dec"
        self.expected: set[Entry] = set()

    def create(self) -> None:
        ns = self.ns
        sh("ip", "netns", "add", ns)
        ip: list[str] = [
            "link add eth0 type veth peer name eth0p",
            "addr add 192.0.2.1/24 dev eth0",
            "addr add 198.51.100.1/24 dev eth0",
            "addr add 2001:db8::1/64 dev eth0 nodad",
            "link set eth0 up",
            "link set eth0p up",
            "link add flannel.1 type vxlan id 1 dev eth0 local 192.0.2.1 nolearning",
            "link add flannel-v6.1 type vxlan id 1 dev eth0 local 2001:db8::1 nolearning",
            "link set flannel.1 up",
            "link set flannel-v6.1 up",
            "link add cni0 type bridge",
            "link add veth1 type veth peer name veth1p",
            "link set veth1 master cni0",
            "link set cni0 up",
            "link set veth1 up",
            "addr add 10.244.0.1/24 dev cni0",
        ]
        sh("ip", "-n", ns, "-batch", "-", stdin="\n".join(ip) + "\n")
        self.v4_dev, self.v6_dev, self.eth0 = (
            int(sh("ip", "-n", ns, "-o", "link", "show", name).split(":", 1)[0])
            for name in ("flannel.1", "flannel-v6.1", "eth0")
        )
        neighs, fdbs, routes = self._peers()
        sh("ip", "-n", ns, "-batch", "-", stdin="\n".join(neighs + self._noise()) + "\n")
        sh("bridge", "-n", ns, "-batch", "-", stdin="\n".join(fdbs) + "\n")
        sh("ip", "-n", ns, "-batch", "-", stdin="\n".join(routes) + "\n")

    def _peers(self) -> tuple[list[str], list[str], list[str]]:
        neighs, fdbs, routes = [], [], []
        for n in range(1, V4_PEERS + 1):
            subnet = ip_network(f"10.244.{n}.0/24")
            gw, remote, vtep = subnet.network_address, ip_address(underlay(n)), mac(n, 4)
            neighs.append(f"neigh replace {gw} lladdr {vtep} dev flannel.1 nud permanent")
            fdbs.append(f"fdb replace {vtep} dev flannel.1 dst {remote} self permanent")
            routes.append(f"route replace {subnet} via {gw} dev flannel.1 onlink")
            self.expected |= {
                Neigh(self.v4_dev, gw, vtep),
                Fdb(self.v4_dev, vtep, remote),
                Route(subnet, gw, self.v4_dev, onlink=True),
            }
        for n in range(1, V6_PEERS + 1):
            subnet6 = ip_network(f"fd00:10:244:{n:x}::/64")
            gw6, remote6, vtep = subnet6.network_address, ip_address(f"2001:db8::{n:x}"), mac(n, 6)
            neighs.append(f"neigh replace {gw6} lladdr {vtep} dev flannel-v6.1 nud permanent")
            fdbs.append(f"fdb replace {vtep} dev flannel-v6.1 dst {remote6} self permanent")
            routes.append(f"route replace {subnet6} via {gw6} dev flannel-v6.1 onlink")
            self.expected |= {
                Neigh(self.v6_dev, gw6, vtep),
                Fdb(self.v6_dev, vtep, remote6),
                Route(subnet6, gw6, self.v6_dev, onlink=True, priority=1024),
            }
        for n in range(V4_PEERS + 1, V4_PEERS + HOSTGW_PEERS + 1):
            subnet = ip_network(f"10.244.{n}.0/24")
            gw = ip_address(f"192.0.2.{n - V4_PEERS + 10}")
            routes.append(f"route replace {subnet} via {gw} dev eth0")  # host-gw: proto boot
            self.expected.add(Route(subnet, gw, self.eth0))
        # Several remotes for one MAC (the kernel allows it for the all-zeros MAC only; flannel
        # never writes it, reconcile must see each to remove it).
        fdbs.append("fdb replace 0a:58:00:00:fb:00 dev flannel.1 dst 192.0.2.250 self dynamic")
        for remote in ("203.0.113.200", "203.0.113.201"):
            fdbs.append(f"fdb append 00:00:00:00:00:00 dev flannel.1 dst {remote} self permanent")
            self.expected.add(Fdb(self.v4_dev, "00:00:00:00:00:00", ip_address(remote)))
        return neighs, fdbs, routes

    def _noise(self) -> list[str]:
        """Entries a flannel datapath must leave alone."""
        return [
            "neigh replace 10.244.250.0 lladdr 0a:58:00:00:fa:00 dev flannel.1 nud reachable",
            "neigh replace 192.0.2.77 lladdr 0a:58:00:00:4d:00 dev eth0 nud permanent",
            "route add 10.244.251.0/24 via 192.0.2.2 dev eth0 proto static",
            "route add 10.244.252.0/24 via 192.0.2.2 dev eth0 table 100",
            "route add blackhole 10.244.253.0/24",
            "route add 10.244.254.0/24 nexthop via 192.0.2.2 dev eth0 nexthop via 198.51.100.2",
            "route add 203.0.113.0/24 via 192.0.2.2 dev eth0",
            "route add 10.250.0.0/16 via 192.0.2.3 dev eth0",
        ]

    def destroy(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], check=False)

    @property
    def ownership(self) -> Ownership:
        return Ownership(frozenset({self.v4_dev, self.v6_dev}), (NETWORK4, NETWORK6))


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    lab = Host()
    try:
        lab.create()
        yield lab
    finally:
        lab.destroy()


def raw_dump(sock: socket.socket, request: bytes) -> list[bytes]:
    """The datagrams of one dump reply, as the kernel sent them."""
    seq = int.from_bytes(request[8:12], "little")
    sock.send(request)
    datagrams = []
    while True:
        datagrams.append(sock.recv(1 << 16))
        if parse_dump(datagrams[-1], seq, -1, decode_route, []).done:
            return datagrams


Decode = Callable[[bytes, int, int], Any]
REQUESTS: list[tuple[str, int, Callable[[int, Host], bytes], Decode, Callable[[Any], Any]]] = [
    ("routes v4", RTM_NEWROUTE, lambda s, h: route_dump_request(2, s, 254, 1), decode_route,
     route_record),
    ("routes v6", RTM_NEWROUTE, lambda s, h: route_dump_request(10, s, 254, 1), decode_route,
     route_record),
    ("neigh v4", RTM_NEWNEIGH, lambda s, h: neigh_dump_request(2, s, h.v4_dev), decode_neigh,
     neigh_record),
    ("neigh v6", RTM_NEWNEIGH, lambda s, h: neigh_dump_request(10, s, h.v6_dev), decode_neigh,
     neigh_record),
    ("fdb", RTM_NEWNEIGH, lambda s, h: neigh_dump_request(AF_BRIDGE, s, h.v4_dev), decode_neigh,
     neigh_record),
]  # fmt: skip


@pytest.mark.parametrize("strict", [True, False], ids=["filtered", "everything"])
@pytest.mark.parametrize(("what", "reply", "request_", "decode", "reference"), REQUESTS,
                         ids=[r[0] for r in REQUESTS])  # fmt: skip
def test_each_dumped_message_decodes_as_pyroute2_decodes_it(
    host: Host, strict: bool, what: str, reply: int, request_: Any, decode: Decode, reference: Any
) -> None:
    # Without strict checking the kernel ignores the filters: every table, every device.
    sock = open_dump_socket(host.ns) if strict else open_route_socket(host.ns)
    try:
        datagrams = raw_dump(sock, request_(77, host))
    finally:
        sock.close()
    ours: list[Any] = []
    for datagram in datagrams:
        parse_dump(datagram, 77, reply, decode, ours)
    theirs = [
        reference(msg)
        for datagram in datagrams
        for msg in MarshalRtnl().parse(datagram)
        if msg["header"]["type"] == reply
    ]
    assert ours == theirs
    assert len(ours) >= (V6_PEERS if "v6" in what else V4_PEERS)


def pyroute2_owned_state(host: Host) -> DatapathState:
    """The owned entries as the pyroute2-based reader found them (the reference)."""
    own = host.ownership
    found: set[Entry] = set()
    with iproute(host.ns) as ipr:
        for family in (socket.AF_INET, socket.AF_INET6):
            for msg in ipr.get_routes(family=family, table=254):
                oif, gateway, proto = msg.get("oif"), msg.get("gateway"), msg["proto"]
                if oif is None or msg.get("table") != 254 or msg["type"] != 1 or proto == 2:
                    continue
                dst = ip_network(f"{msg.get('dst') or ('::' if family == 10 else '0.0.0.0')}"
                                 f"/{msg['dst_len']}")  # fmt: skip
                into_cluster = any(dst.version == n.version and dst.subnet_of(n)  # type: ignore[arg-type]
                                   for n in own.networks)  # fmt: skip
                if oif in own.devices or (proto == 3 and gateway and into_cluster):
                    gw = ip_address(gateway) if gateway else None
                    found.add(Route(dst, gw, oif, bool(msg["flags"] & 4), msg.get("priority") or 0))
            for msg in ipr.get_neighbours(family=family):
                if msg["ifindex"] in own.devices and msg["state"] & 0x80 and msg.get("lladdr"):
                    found.add(Neigh(msg["ifindex"], ip_address(msg.get("dst")), msg.get("lladdr")))
        for msg in ipr.get_neighbours(family=AF_BRIDGE):
            dst = msg.get("dst")
            if msg["ifindex"] in own.devices and msg["flags"] & 2 and msg["state"] & 0x80 and dst:
                found.add(Fdb(msg["ifindex"], msg.get("lladdr"), ip_address(dst)))
    return DatapathState.of(found)


def test_owned_state_is_what_was_programmed_and_what_pyroute2_reads(host: Host) -> None:
    sock = open_dump_socket(host.ns)
    try:
        state = read_owned_state(sock, host.ownership)
    finally:
        sock.close()
    assert state == DatapathState.of(host.expected)
    assert state == pyroute2_owned_state(host)
    with iproute(host.ns) as ipr:
        assert owned_state(ipr, host.ownership) == state


def test_a_host_gw_ownership_reads_only_gateway_routes_into_its_network(host: Host) -> None:
    own = Ownership(networks=(NETWORK4,))
    sock = open_dump_socket(host.ns)
    try:
        state = read_owned_state(sock, own)
    finally:
        sock.close()
    # Protocol-boot gateway routes into the network, whichever device: vxlan's as well.
    v4_routes = {e for e in host.expected if isinstance(e, Route) and e.dst.version == 4}
    assert state == DatapathState(routes=frozenset(v4_routes))


def test_entries_equal_to_held_ones_come_back_as_the_held_objects(host: Host) -> None:
    """What a full reconcile relies on to keep no second copy of the datapath in memory."""
    held_entries = sorted(host.expected, key=repr)[::2]  # every other entry, copies of them
    wanted = Wanted.of(replace(e) for e in held_entries)
    changed = next(e for e in held_entries[1:] if isinstance(e, Neigh))
    wanted.add(replace(changed, lladdr="0a:58:ff:ff:ff:ff"))  # held under the key, not equal
    sock = open_dump_socket(host.ns)
    try:
        state = read_owned_state(sock, host.ownership, wanted.held)
    finally:
        sock.close()
    assert state == DatapathState.of(host.expected)
    ids = {id(e) for table in (wanted.routes, wanted.neighs, wanted.fdbs) for e in table.values()}
    read = state.entries()
    same = {e for e in read if id(e) in ids}
    assert same == set(held_entries) - {changed}
    assert changed in read and id(next(e for e in read if e == changed)) not in ids
