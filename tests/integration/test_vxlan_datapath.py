"""The vxlan datapath on a 3-host netns lab, programmed from synthetic leases."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator, Sequence
from ipaddress import IPv4Address, IPv4Network

import pytest

from pyflannel_lab.netns_lab import (
    LabHost,
    NetLab,
    added,
    close_all,
    external_interface,
    lab_config,
    lease_acquirer,
    mesh,
    register_backend,
)
from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.base import Network
from pyflannel_runtime.backend.programmer import QUIET_WRITES
from pyflannel_runtime.backend.vxlan.vxlan import VxlanNetwork
from pyflannel_runtime.netlink.batch import OpFailure
from pyflannel_runtime.netlink.entries import Op
from pyflannel_runtime.netlink.monitor import (
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_IFADDR,
    RTMGRP_LINK,
)
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.vxlan_data import parse_vxlan_backend_data, vxlan_backend_data
from tests.unit.test_netlink_monitor import joined

pytestmark = pytest.mark.root

VXLAN = {"Type": "vxlan"}


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with NetLab(prefix="pdp", hosts=3, pod_mtu=1450) as lab:
        yield lab


@pytest.fixture
def lab6() -> Iterator[NetLab]:
    with NetLab(prefix="pdp", hosts=2, pod_mtu=1450, ipv6=True) as lab:
        yield lab


async def register(lab: NetLab, n: int, backend: dict[str, object] = VXLAN) -> Network:
    return await register_backend(lab, n, backend)


def go_flannel_host(lab: NetLab, n: int, mac: str) -> None:
    """Configure host n exactly as Go flanneld's vxlan backend would (its iproute2 equivalents:
    docs/compatibility.md, "VXLAN device and per-peer entries")."""
    h = lab.hosts[n - 1]
    lab.ip(h.ns, "link", "add", "flannel.1", "address", mac, "mtu", "1450", "type", "vxlan",
           "id", "1", "dev", "eth0", "local", str(h.underlay_ip), "nolearning")  # fmt: skip
    lab.ip(h.ns, "addr", "add", f"{h.subnet.network_address}/32", "dev", "flannel.1")
    lab.ip(h.ns, "link", "set", "flannel.1", "up")


def go_flannel_peer(lab: NetLab, n: int, peer: int, mac: str) -> None:
    h, p = lab.hosts[n - 1], lab.hosts[peer - 1]
    gw = str(p.subnet.network_address)
    lab.ip(h.ns, "neigh", "replace", gw, "lladdr", mac, "dev", "flannel.1", "nud", "permanent")
    lab.bridge(h.ns, "fdb", "replace", mac, "dev", "flannel.1", "dst", str(p.underlay_ip),
               "self", "permanent")  # fmt: skip
    lab.ip(h.ns, "route", "replace", str(p.subnet), "via", gw, "dev", "flannel.1", "onlink")


def vtep_mac(network: Network) -> str:
    return parse_vxlan_backend_data(network.lease.attrs.backend_data).vtep_mac


def test_pods_reach_each_other_with_exact_mtu(lab: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            assert all(net.mtu == 1450 for net in networks)
            for src in lab.hosts:
                for dst in lab.hosts:
                    if src is not dst:
                        assert lab.ping(src.pod_ns, dst.pod_ip), (src.n, dst.n)
            p1, p2 = lab.hosts[0], lab.hosts[1]
            assert lab.ping(p1.pod_ns, p2.pod_ip, size=1450 - 28, dont_fragment=True)
            assert not lab.ping(p1.pod_ns, p2.pod_ip, size=1450 - 27, dont_fragment=True)
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_device_has_flannels_exact_attributes(lab: NetLab) -> None:
    async def scenario() -> None:
        network = await register(lab, 1)
        await network.close()
        h = lab.hosts[0]
        details = lab.ip(h.ns, "-d", "link", "show", "flannel.1")
        assert "mtu 1450" in details
        assert re.search(r"vxlan id 1 local 192\.0\.2\.11 dev eth0 .*dstport 8472", details)
        assert "nolearning" in details
        assert vtep_mac(network) in details
        assert "10.244.1.0/32" in lab.ip(h.ns, "-4", "addr", "show", "dev", "flannel.1")
        assert "state UP" in details or ",UP" in details

    asyncio.run(scenario())


def test_stored_mac_is_used_and_compatible_device_reused(lab: NetLab) -> None:
    async def scenario() -> None:
        h = lab.hosts[0]
        first = await registry.create("vxlan", netns=h.ns).register_network(
            lab_config(VXLAN), external_interface(lab, h), lease_acquirer(h),
            ("0a:58:0a:f4:01:00", ""),
        )  # fmt: skip
        await first.close()
        assert vtep_mac(first) == "0a:58:0a:f4:01:00"
        index = lab.ifindex(h.ns, "flannel.1")
        again = await register(lab, 1)  # a new random MAC is asked for, the device is kept
        await again.close()
        assert lab.ifindex(h.ns, "flannel.1") == index
        assert vtep_mac(again) == "0a:58:0a:f4:01:00"

    asyncio.run(scenario())


def test_incompatible_device_is_recreated(lab: NetLab) -> None:
    async def scenario() -> None:
        h = lab.hosts[0]
        lab.ip(h.ns, "link", "add", "flannel.1", "type", "vxlan", "id", "7", "dev", "eth0",
               "local", str(h.underlay_ip), "dstport", "8472")  # fmt: skip
        network = await register(lab, 1)
        await network.close()
        assert "vxlan id 1 " in lab.ip(h.ns, "-d", "link", "show", "flannel.1")

    asyncio.run(scenario())


def peer_entries_on(lab: NetLab, n: int, peer: int) -> tuple[str, str, str]:
    h, p = lab.hosts[n - 1], lab.hosts[peer - 1]
    neigh = lab.ip(h.ns, "neigh", "show", "dev", "flannel.1", str(p.subnet.network_address))
    fdb = lab.bridge(h.ns, "fdb", "show", "dev", "flannel.1")
    fdb = "\n".join(line for line in fdb.splitlines() if f"dst {p.underlay_ip} " in line)
    route = lab.ip(h.ns, "route", "show", str(p.subnet))
    return neigh.strip(), fdb.strip(), route.strip()


def test_removing_a_lease_removes_neighbour_fdb_and_route(lab: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            neigh, fdb, route = peer_entries_on(lab, 1, 2)
            assert "PERMANENT" in neigh and vtep_mac(networks[1]) in neigh
            assert "permanent" in fdb and vtep_mac(networks[1]) in fdb
            assert "via 10.244.2.0 dev flannel.1" in route and "onlink" in route
            await networks[0].handle_events([LeaseEvent(EventType.REMOVED, networks[1].lease)])
            assert peer_entries_on(lab, 1, 2) == ("", "", "")
            assert all(peer_entries_on(lab, 1, 3))
            assert not lab.ping(lab.hosts[0].pod_ns, lab.hosts[1].pod_ip)
            assert lab.ping(lab.hosts[0].pod_ns, lab.hosts[2].pod_ip)
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_startup_reconcile_removes_stale_entries_then_writes_nothing(lab: NetLab) -> None:
    h1 = lab.hosts[0]
    # A previous run (Go flanneld) left flannel.1 with a peer that is gone, a peer whose MAC
    # changed since, and a host-gw leftover; plus a route that is not flannel's.
    go_flannel_host(lab, 1, "0a:58:0a:f4:01:00")
    go_flannel_peer(lab, 1, 3, "0a:58:0a:f4:03:00")  # host 3 is no longer in the cluster
    go_flannel_peer(lab, 1, 2, "0a:58:0a:f4:99:99")  # host 2 comes back with another MAC
    lab.ip(h1.ns, "route", "add", "10.244.77.0/24", "via", "192.0.2.77", "dev", "eth0")
    lab.ip(h1.ns, "route", "add", "198.51.100.0/24", "via", "192.0.2.99", "dev", "eth0")

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2)]
        try:
            writes = await networks[0].reconcile([networks[1].lease])
            # host 2: new neighbour MAC and FDB entry (its route is right already); stale:
            # host 3's three entries, host 2's old FDB entry and the host-gw route
            assert writes == 2 + 3 + 1 + 1
            assert peer_entries_on(lab, 1, 3) == ("", "", "")
            assert "10.244.77.0" not in lab.ip(h1.ns, "route")
            assert "198.51.100.0/24 via 192.0.2.99" in lab.ip(h1.ns, "route")
            fdb = lab.bridge(h1.ns, "fdb", "show", "dev", "flannel.1")
            assert "0a:58:0a:f4:99:99" not in fdb and vtep_mac(networks[1]) in fdb
            await networks[1].reconcile([networks[0].lease])
            assert lab.ping(h1.pod_ns, lab.hosts[1].pod_ip)
            assert await networks[0].reconcile([networks[1].lease]) == 0
            assert await networks[1].reconcile([networks[0].lease]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_deleted_device_is_recreated_with_all_peers(lab: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            h1 = lab.hosts[0]
            old_index = lab.ifindex(h1.ns, "flannel.1")
            lab.ip(h1.ns, "link", "del", "flannel.1")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                if all(all(peer_entries_on(lab, 1, p)) for p in (2, 3)):
                    break
            assert lab.ifindex(h1.ns, "flannel.1") != old_index
            assert vtep_mac(networks[0]) in lab.ip(h1.ns, "link", "show", "flannel.1")
            for peer in lab.hosts[1:]:
                assert await asyncio.to_thread(lab.ping, h1.pod_ns, peer.pod_ip)
                assert await asyncio.to_thread(lab.ping, peer.pod_ns, h1.pod_ip)
            assert isinstance(networks[0], VxlanNetwork)
            assert await networks[0].reconcile([n.lease for n in networks[1:]]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_mixed_cluster_with_a_go_flanneld_host(lab: NetLab) -> None:
    go_mac = "0a:58:0a:f4:03:00"
    go_flannel_host(lab, 3, go_mac)

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2)]
        try:
            await mesh(networks)
            go_lease = lease_acquirer(lab.hosts[2])
            from pyflannel_runtime.wire.lease import LeaseAttrs
            from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data

            lease3 = await go_lease(
                LeaseAttrs(lab.hosts[2].underlay_ip, None, "vxlan", vxlan_backend_data(1, go_mac))
            )
            for net in networks:
                await net.handle_events(added([lease3]))
            for n, net in zip((1, 2), networks, strict=True):
                go_flannel_peer(lab, 3, n, vtep_mac(net))
            h3 = lab.hosts[2]
            for h in lab.hosts[:2]:
                assert lab.ping(h.pod_ns, h3.pod_ip), h.n
                assert lab.ping(h3.pod_ns, h.pod_ip), h.n
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_dual_stack_uses_flannel_v6_device(lab6: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab6, n) for n in (1, 2)]
        try:
            await mesh(networks)
            h1, h2 = lab6.hosts
            details = lab6.ip(h1.ns, "-d", "link", "show", "flannel-v6.1")
            assert "local 2001:db8::11 dev eth0" in details
            # flannel asks for base - 50 on v6 too; the kernel caps it at eth0 - 70
            assert "mtu 1430" in details and networks[0].mtu == 1450
            assert "fd00:10:244:1::/128" in lab6.ip(h1.ns, "-6", "addr", "show", "flannel-v6.1")
            assert "via fd00:10:244:2:: dev flannel-v6.1" in lab6.ip(h1.ns, "-6", "route")
            assert lab6.ping(h1.pod_ns, h2.pod_ip6) and lab6.ping(h2.pod_ns, h1.pod_ip6)
            assert lab6.ping(h1.pod_ns, h2.pod_ip) and lab6.ping(h2.pod_ns, h1.pod_ip)
            assert await networks[0].reconcile([networks[1].lease]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_direct_routing_uses_the_underlay_for_same_segment_peers(lab: NetLab) -> None:
    async def scenario() -> None:
        backend = {"Type": "vxlan", "DirectRouting": True}
        networks = [await register(lab, n, backend) for n in (1, 2)]
        try:
            await mesh(networks)
            h1, h2 = lab.hosts[0], lab.hosts[1]
            assert "10.244.2.0/24 via 192.0.2.12 dev eth0" in lab.ip(h1.ns, "route")
            assert lab.ip(h1.ns, "neigh", "show", "dev", "flannel.1").strip() == ""
            assert lab.ping(h1.pod_ns, h2.pod_ip) and lab.ping(h2.pod_ns, h1.pod_ip)
            assert await networks[0].reconcile([networks[1].lease]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_routes_that_are_not_flannels_are_left_alone_and_its_own_replaced(lab: NetLab) -> None:
    h1, h2, h3 = lab.hosts
    # Host 1 has host 3's subnet on a local bridge (a connected route, the kernel's), and a
    # route for host 2 left by an earlier run through flannel.1, with an outdated gateway.
    lab.ip(h1.ns, "link", "add", "br-x", "type", "bridge")
    lab.ip(h1.ns, "addr", "add", f"{h3.subnet.network_address + 1}/24", "dev", "br-x")
    lab.ip(h1.ns, "link", "set", "br-x", "up")
    connected = lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip()
    assert "proto kernel" in connected

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            lab.ip(h1.ns, "route", "add", str(h2.subnet), "via", "10.244.2.9", "dev",
                   "flannel.1", "onlink")  # fmt: skip
            await mesh(networks)
            assert lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip() == connected
            assert peer_entries_on(lab, 1, 3) == ("", "", connected)  # rolled back whole
            assert "via 10.244.2.0 dev flannel.1" in peer_entries_on(lab, 1, 2)[2]
            assert lab.ping(h1.pod_ns, h2.pod_ip)
            await networks[0].reconcile([networks[1].lease, networks[2].lease])
            assert lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip() == connected
        finally:
            await close_all(networks)

    asyncio.run(scenario())


async def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """A hang guard, not a speed check (bench/bench_agent_scale.py measures how fast)."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        assert time.monotonic() < deadline, "not repaired"
        await asyncio.sleep(0.05)


def test_entries_deleted_or_changed_by_someone_else_are_put_back(lab: NetLab) -> None:
    """No reconcile runs here: only the kernel's notifications tell the datapath that its
    route, neighbour and FDB entries were deleted or changed behind its back."""
    h1, h2, h3 = lab.hosts

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            want = {p: peer_entries_on(lab, 1, p) for p in (2, 3)}
            gw2, gw3 = str(h2.subnet.network_address), str(h3.subnet.network_address)
            lab.ip(h1.ns, "route", "del", str(h2.subnet))
            lab.ip(h1.ns, "neigh", "del", gw3, "dev", "flannel.1")
            lab.bridge(h1.ns, "fdb", "del", vtep_mac(networks[1]), "dev", "flannel.1",
                       "dst", str(h2.underlay_ip), "self")  # fmt: skip
            await wait_until(lambda: all(peer_entries_on(lab, 1, p) == want[p] for p in (2, 3)))
            # a wrong MAC for a neighbour, a second remote for a VTEP MAC, and a neighbour no
            # lease explains
            lab.ip(h1.ns, "neigh", "replace", gw2, "lladdr", "0a:58:00:00:00:01",
                   "dev", "flannel.1", "nud", "permanent")  # fmt: skip
            lab.bridge(h1.ns, "fdb", "append", vtep_mac(networks[2]), "dev", "flannel.1",
                       "dst", "192.0.2.99", "self", "permanent")  # fmt: skip
            lab.ip(h1.ns, "neigh", "add", "10.244.9.0", "lladdr", "0a:58:0a:f4:09:00",
                   "dev", "flannel.1", "nud", "permanent")  # fmt: skip
            await wait_until(
                lambda: (
                    peer_entries_on(lab, 1, 2) == want[2]
                    and "192.0.2.99" not in lab.bridge(h1.ns, "fdb", "show", "dev", "flannel.1")
                    and "10.244.9.0" not in lab.ip(h1.ns, "neigh", "show", "dev", "flannel.1")
                )
            )
            assert await asyncio.to_thread(lab.ping, h1.pod_ns, h2.pod_ip)
            assert await asyncio.to_thread(lab.ping, h1.pod_ns, h3.pod_ip)
            # The repairs wrote what a reconcile would have: it finds nothing left to do.
            assert await networks[0].reconcile([n.lease for n in networks[1:]]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_a_route_someone_else_replaced_with_theirs_is_left_alone(lab: NetLab) -> None:
    """As the reconcile does: a destination the kernel now routes some other way (a static
    route of the operator's) is not taken over."""
    h1, h2, _ = lab.hosts

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            lab.ip(h1.ns, "route", "replace", str(h2.subnet), "via", "192.0.2.99", "dev",
                   "eth0", "proto", "static")  # fmt: skip
            lab.ip(h1.ns, "neigh", "del", str(lab.hosts[2].subnet.network_address),
                   "dev", "flannel.1")  # fmt: skip
            # the neighbour deleted after the route is put back: the route's turn has passed
            await wait_until(lambda: all(peer_entries_on(lab, 1, 3)))
            assert "via 192.0.2.99 dev eth0 proto static" in peer_entries_on(lab, 1, 2)[2]
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def synthetic_peers(count: int) -> list[Lease]:
    """Peers with no host behind them: their entries are all a batch needs."""
    return [
        Lease(
            IPv4Network(f"10.244.{100 + i}.0/24"),
            None,
            LeaseAttrs(
                IPv4Address(f"192.0.2.{10 + i}"),
                None,
                "vxlan",
                vxlan_backend_data(1, f"0a:58:0a:f4:{100 + i:02x}:00"),
            ),
        )
        for i in range(count)
    ]


def test_a_large_batch_goes_out_quietly_and_what_others_change_during_and_after_is_put_back(
    lab: NetLab,
) -> None:
    """A full sync as large as QUIET_WRITES is written with the monitor out of the route and
    neighbour groups; a route and a neighbour someone else deletes while it is out of them
    (right after the batch is sent, before it joins them again) are put back by the check that
    follows, and a route deleted once that check is done, by the notifications as ever."""
    h1 = lab.hosts[0]
    peers = synthetic_peers(QUIET_WRITES // 3 + 1)
    victims = peers[7], peers[8]

    async def scenario() -> None:
        network = await register(lab, 1)
        assert isinstance(network, VxlanNetwork)
        send = network._send
        groups_while_sending: list[int] = []

        async def send_then_meddle(ops: Sequence[Op]) -> list[OpFailure]:
            failures = await send(ops)
            assert network._monitor is not None
            groups_while_sending.append(joined(network._monitor))
            if len(ops) >= QUIET_WRITES:  # someone else, in the window
                lab.ip(h1.ns, "route", "del", str(victims[0].subnet))
                lab.ip(h1.ns, "neigh", "del", str(victims[0].subnet.network_address),
                       "dev", "flannel.1")  # fmt: skip
            return failures

        network._send = send_then_meddle  # type: ignore[method-assign]
        try:
            await network.reconcile(peers)
            # Only links and addresses were heard while the batch went out.
            assert groups_while_sending[0] == RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR
            await wait_until(lambda: all(peer_entries(lab, h1, victims[0])))
            assert network.repairs()["route"] == 1 and network.repairs()["neighbour"] == 1
            assert network._checker is not None
            await network._checker  # nothing but the notifications from here on
            assert groups_while_sending[-1] & RTMGRP_IPV4_ROUTE
            lab.ip(h1.ns, "route", "del", str(victims[1].subnet))
            await wait_until(lambda: all(peer_entries(lab, h1, victims[1])))
            assert network.repairs()["route"] == 2
            assert await network.reconcile(peers) == 0
        finally:
            await network.close()

    asyncio.run(scenario())


def peer_entries(lab: NetLab, host: LabHost, peer: Lease) -> tuple[str, str, str]:
    gateway = str(peer.subnet.network_address)
    neigh = lab.ip(host.ns, "neigh", "show", "dev", "flannel.1", gateway)
    fdb = lab.bridge(host.ns, "fdb", "show", "dev", "flannel.1")
    fdb = "\n".join(line for line in fdb.splitlines() if f"dst {peer.attrs.public_ip} " in line)
    route = lab.ip(host.ns, "route", "show", str(peer.subnet))
    return neigh.strip(), fdb.strip(), route.strip()
