"""The host-gw datapath on a 3-host netns lab, programmed from synthetic leases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from pyflannel_lab.netns_lab import (
    NetLab,
    added,
    close_all,
    lease_acquirer,
    mesh,
    register_backend,
)
from pyflannel_runtime.backend import programmer
from pyflannel_runtime.backend.base import Network
from pyflannel_runtime.wire.lease import EventType, LeaseAttrs, LeaseEvent

pytestmark = pytest.mark.root

HOSTGW = {"Type": "host-gw"}


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with NetLab(prefix="pdp", hosts=3, pod_mtu=1500) as lab:
        yield lab


@pytest.fixture
def lab6() -> Iterator[NetLab]:
    with NetLab(prefix="pdp", hosts=2, pod_mtu=1500, ipv6=True) as lab:
        yield lab


async def register(lab: NetLab, n: int) -> Network:
    return await register_backend(lab, n, HOSTGW)


def test_pods_reach_each_other_with_exact_mtu(lab: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            assert all(net.mtu == 1500 for net in networks)
            assert networks[0].lease.attrs.to_json() == (
                '{"PublicIP":"192.0.2.11","PublicIPv6":null,"BackendType":"host-gw"}'
            )
            routes = lab.ip(lab.hosts[0].ns, "route", "show", "proto", "boot", "scope", "global")
            assert "10.244.2.0/24 via 192.0.2.12 dev eth0" in routes
            assert "10.244.3.0/24 via 192.0.2.13 dev eth0" in routes
            for src in lab.hosts:
                for dst in lab.hosts:
                    if src is not dst:
                        assert lab.ping(src.pod_ns, dst.pod_ip), (src.n, dst.n)
            p1, p2 = lab.hosts[0], lab.hosts[1]
            assert lab.ping(p1.pod_ns, p2.pod_ip, size=1500 - 28, dont_fragment=True)
            assert not lab.ping(p1.pod_ns, p2.pod_ip, size=1500 - 27, dont_fragment=True)
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_removed_lease_removes_route_and_reconcile_cleans_up(lab: NetLab) -> None:
    h1 = lab.hosts[0]
    # Left over from an earlier run: a peer that is gone and a wrong next hop for host 2;
    # and a gateway route into another network, which is not ours.
    lab.ip(h1.ns, "route", "add", "10.244.9.0/24", "via", "192.0.2.19", "dev", "eth0")
    lab.ip(h1.ns, "route", "add", "10.244.2.0/24", "via", "192.0.2.99", "dev", "eth0")
    lab.ip(h1.ns, "route", "add", "198.51.100.0/24", "via", "192.0.2.99", "dev", "eth0")

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            peers = [networks[1].lease, networks[2].lease]
            assert await networks[0].reconcile(peers) == 1 + 1 + 1  # fix, add, remove
            routes = lab.ip(h1.ns, "route")
            assert "10.244.9.0" not in routes and "198.51.100.0/24 via 192.0.2.99" in routes
            assert "10.244.2.0/24 via 192.0.2.12 dev eth0" in routes
            assert await networks[0].reconcile(peers) == 0
            await networks[0].handle_events([LeaseEvent(EventType.REMOVED, networks[2].lease)])
            assert "10.244.3.0" not in lab.ip(h1.ns, "route")
            assert await networks[0].reconcile(peers[:1]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_mixed_cluster_with_a_go_flanneld_host(lab: NetLab) -> None:
    h3 = lab.hosts[2]
    for peer in lab.hosts[:2]:  # what Go flanneld's host-gw does on host 3
        lab.ip(h3.ns, "route", "replace", str(peer.subnet), "via", str(peer.underlay_ip),
               "dev", "eth0")  # fmt: skip

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2)]
        try:
            await mesh(networks)
            lease3 = await lease_acquirer(h3)(LeaseAttrs(h3.underlay_ip, None, "host-gw"))
            for net in networks:
                await net.handle_events(added([lease3]))
            for h in lab.hosts[:2]:
                assert lab.ping(h.pod_ns, h3.pod_ip), h.n
                assert lab.ping(h3.pod_ns, h.pod_ip), h.n
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_dual_stack(lab6: NetLab) -> None:
    async def scenario() -> None:
        networks = [await register(lab6, n) for n in (1, 2)]
        try:
            await mesh(networks)
            h1, h2 = lab6.hosts
            assert "fd00:10:244:2::/64 via 2001:db8::12 dev eth0" in lab6.ip(h1.ns, "-6", "route")
            assert lab6.ping(h1.pod_ns, h2.pod_ip6) and lab6.ping(h2.pod_ns, h1.pod_ip6)
            assert lab6.ping(h1.pod_ns, h2.pod_ip) and lab6.ping(h2.pod_ns, h1.pod_ip)
            assert await networks[0].reconcile([networks[1].lease]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_a_route_that_is_not_flannels_is_left_alone(lab: NetLab) -> None:
    h1, h3 = lab.hosts[0], lab.hosts[2]
    # An operator's static route for host 3's subnet: flannel must not take it over.
    lab.ip(h1.ns, "route", "add", str(h3.subnet), "via", "192.0.2.99", "dev", "eth0",
           "proto", "static")  # fmt: skip
    static = lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip()

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            assert lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip() == static
            assert lab.ping(h1.pod_ns, lab.hosts[1].pod_ip)
            peers = [networks[1].lease, networks[2].lease]
            await networks[0].reconcile(peers)
            assert lab.ip(h1.ns, "route", "show", str(h3.subnet)).strip() == static
            lab.ip(h1.ns, "route", "del", str(h3.subnet))
            assert await networks[0].reconcile(peers) == 1
            assert lab.ping(h1.pod_ns, h3.pod_ip)
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_routes_deleted_or_redirected_by_someone_else_are_put_back(lab: NetLab) -> None:
    """No reconcile runs here: the kernel's notifications tell the datapath."""
    h1, h2, h3 = lab.hosts

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            lab.ip(h1.ns, "route", "del", str(h2.subnet))
            # a flannel-style route (proto boot) with a wrong next hop: flannel's, so replaced
            lab.ip(h1.ns, "route", "replace", str(h3.subnet), "via", "192.0.2.99", "dev", "eth0",
                   "proto", "boot")  # fmt: skip
            deadline = time.monotonic() + 20  # a hang guard (bench_agent_scale.py times it)
            while not all(
                f"{h.subnet} via {h.underlay_ip} dev eth0" in lab.ip(h1.ns, "route")
                for h in (h2, h3)
            ):
                assert time.monotonic() < deadline, "not repaired"
                await asyncio.sleep(0.05)
            assert await networks[0].reconcile([n.lease for n in networks[1:]]) == 0
        finally:
            await close_all(networks)

    asyncio.run(scenario())


def test_a_periodic_checks_dump_leaves_alone_what_events_wrote_after_it(
    lab: NetLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dump runs without the datapath lock; a peer removed after it is not removed again
    (the route is gone: a second delete would fail)."""
    h1, h2, h3 = lab.hosts
    monkeypatch.setattr(programmer, "FULL_RECONCILE_PERIOD", 0.0)

    async def scenario() -> None:
        networks = [await register(lab, n) for n in (1, 2, 3)]
        try:
            await mesh(networks)
            survey = await networks[0].survey()
            assert survey is not None
            assert {r.dst for r in survey.state.routes} == {h2.subnet, h3.subnet}
            await networks[0].handle_events([LeaseEvent(EventType.REMOVED, networks[2].lease)])
            assert await networks[0].recheck([networks[1].lease], survey) == 0
            routes = lab.ip(h1.ns, "route")
            assert str(h3.subnet) not in routes and f"{h2.subnet} via {h2.underlay_ip}" in routes
        finally:
            await close_all(networks)

    asyncio.run(scenario())
