"""The kube subnet manager against the Node API test double, through the real client."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

import pytest

from pyflannel_runtime.subnet import backoff
from pyflannel_runtime.subnet.kube.kube import (
    LIST_PAGE,
    KubeSettings,
    KubeSubnetError,
    KubeSubnetManager,
)
from pyflannel_runtime.subnet.manager import LeaseWatchBatch, Unimplemented
from pyflannel_runtime.subnet.watcher import LeaseScope, LeaseWatcher
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data
from tests.fakes.kube_api import STRATEGIC_MERGE, FakeKubeApi, Rule, Subject

P = "flannel.alpha.coreos.com/"
NODE = "node-a"
STATUS_PATH = f"/api/v1/nodes/{NODE}/status"
NET_CONF = '{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan"}}'
MAC_A = "aa:bb:cc:00:00:01"
ATTRS = LeaseAttrs(IPv4Address("192.0.2.10"), None, "vxlan", vxlan_backend_data(1, MAC_A))
WAIT = 20.0  # a safety net against hangs, never an assertion


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


@pytest.fixture
def net_conf(tmp_path: Path) -> Path:
    path = tmp_path / "net-conf.json"
    path.write_text(NET_CONF)
    return path


@asynccontextmanager
async def manager(
    api: FakeKubeApi, net_conf: Path, environ: dict[str, str] | None = None, **kw: Any
) -> AsyncIterator[KubeSubnetManager]:
    settings = KubeSettings(
        api_url=api.url,
        net_config_path=str(net_conf),
        retry_interval=0.05,
        retry_timeout=1.0,
        **kw,
    )
    environ = {"NODE_NAME": NODE} if environ is None else environ
    sm = await KubeSubnetManager.create(settings, environ=environ)
    try:
        yield sm
    finally:
        await sm.close()


def peer_annotations(ip: str, mac: str, **extra: str) -> dict[str, str]:
    values = {
        P + "kube-subnet-manager": "true",
        P + "backend-type": "vxlan",
        P + "backend-data": vxlan_backend_data(1, mac),
        P + "public-ip": ip,
    }
    values.update(extra)
    return values


def compact(body: bytes) -> str:
    """The request body re-encoded compactly, key order kept (the client adds blanks)."""
    return json.dumps(json.loads(body), separators=(",", ":"))


# --- AcquireLease -----------------------------------------------------------------------------


def test_acquire_lease_patches_the_annotations_once_with_flannels_body(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24", annotations={"unrelated": "x"})

    async def scenario() -> tuple[Lease, Lease]:
        async with manager(api, net_conf) as sm:
            first = await sm.acquire_lease(ATTRS)
        async with manager(api, net_conf) as sm:  # a restart with nothing changed
            second = await sm.acquire_lease(ATTRS)
        return first, second

    first, second = asyncio.run(scenario())
    assert first.subnet == second.subnet == IPv4Network("10.244.1.0/24")
    assert first.attrs == ATTRS and first.ipv6_subnet is None
    (patch,) = api.requests("PATCH")
    assert patch.path == STATUS_PATH
    assert patch.content_type == STRATEGIC_MERGE
    assert compact(patch.body) == (
        '{"metadata":{"annotations":{'
        f'"{P}backend-data":"{{\\"VNI\\":1,\\"VtepMAC\\":\\"{MAC_A}\\"}}",'
        f'"{P}backend-type":"vxlan",'
        f'"{P}kube-subnet-manager":"true",'
        f'"{P}public-ip":"192.0.2.10"'
        "}}}"
    )
    node = api.node(NODE)
    assert node is not None
    assert node["metadata"]["annotations"]["unrelated"] == "x"
    assert node["metadata"]["annotations"][P + "public-ip"] == "192.0.2.10"


def test_a_changed_attribute_sends_only_that_annotation(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24", annotations=peer_annotations("192.0.2.10", MAC_A))
    new_mac = "aa:bb:cc:00:00:02"

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(
                LeaseAttrs(IPv4Address("192.0.2.10"), None, "vxlan", vxlan_backend_data(1, new_mac))
            )

    asyncio.run(scenario())
    (patch,) = api.requests("PATCH", STATUS_PATH)
    data = vxlan_backend_data(1, new_mac)
    assert compact(patch.body) == json.dumps(
        {"metadata": {"annotations": {P + "backend-data": data}}}, separators=(",", ":")
    )


def test_a_node_without_annotations_gets_the_map_created(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24", annotations=None)

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(ATTRS)

    asyncio.run(scenario())
    node = api.node(NODE)
    assert node is not None
    assert node["metadata"]["annotations"][P + "kube-subnet-manager"] == "true"


def test_public_ip_overwrite_is_advertised_but_the_lease_keeps_the_local_ip(api, net_conf) -> None:
    api.add_node(
        NODE, pod_cidr="10.244.1.0/24", annotations={P + "public-ip-overwrite": "203.0.113.7"}
    )

    async def scenario() -> Lease:
        async with manager(api, net_conf) as sm:
            return await sm.acquire_lease(ATTRS)

    lease = asyncio.run(scenario())
    assert lease.attrs.public_ip == IPv4Address("192.0.2.10")
    node = api.node(NODE)
    assert node is not None and node["metadata"]["annotations"][P + "public-ip"] == "203.0.113.7"


def test_a_node_without_pod_cidr_fails_with_flannels_message(api, net_conf) -> None:
    api.add_node(NODE)

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(ATTRS)

    with pytest.raises(KubeSubnetError) as err:
        asyncio.run(scenario())
    assert str(err.value) == 'node "node-a" pod cidr not assigned'
    assert api.requests("PATCH") == []


def test_a_pod_cidr_outside_the_network_is_refused(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.99.1.0/24")

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(ATTRS)

    with pytest.raises(KubeSubnetError) as err:
        asyncio.run(scenario())
    assert str(err.value) == (
        'subnet "10.244.0.0/16" specified in the flannel net config doesn\'t contain '
        '"10.99.1.0/24" PodCIDR of the "node-a" node'
    )


def test_a_failed_patch_is_retried_with_the_same_body(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    api.fail_next("PATCH", STATUS_PATH, 500)

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(ATTRS)

    asyncio.run(scenario())
    first, second = api.requests("PATCH", STATUS_PATH)
    assert first.body == second.body


def test_failed_patches_are_retried_after_jittered_waits(
    api, net_conf, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wait is drawn from [0, 2 x retry_interval]: nodes started together (a restart
    storm) do not ask the API server together."""
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    api.fail_next("PATCH", STATUS_PATH, 500, times=3)
    draws = iter([0.5, 0.125, 1.0])
    monkeypatch.setattr(backoff, "jitter_source", lambda: next(draws))
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(delay)

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            with monkeypatch.context() as patch:
                patch.setattr(asyncio, "sleep", sleep)
                await sm.acquire_lease(ATTRS)

    asyncio.run(scenario())
    assert len(api.requests("PATCH", STATUS_PATH)) == 4
    assert slept == [0.1 * 0.5, 0.1 * 0.125, 0.1 * 1.0]  # retry_interval 0.05


def test_an_unknown_node_times_out_with_flannels_message(api, net_conf) -> None:
    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            await sm.acquire_lease(ATTRS)

    with pytest.raises(KubeSubnetError) as err:
        asyncio.run(scenario())
    assert str(err.value).startswith(
        'timeout contacting kube-api, failed to patch node "node-a". Error: '
    )
    assert len(api.requests("GET", f"/api/v1/nodes/{NODE}")) > 1


# --- CompleteLease ----------------------------------------------------------------------------

CONDITION_RE = re.compile(
    r'\{"status":\{"conditions":\[\{"type":"NetworkUnavailable","status":"False",'
    r'"lastHeartbeatTime":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)",'
    r'"lastTransitionTime":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)",'
    r'"reason":"FlannelIsUp","message":"Flannel is running on this node"\}\]\}\}'
)


def test_complete_lease_marks_the_network_available_once(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    api.update_node(
        NODE,
        lambda n: n["status"].update(
            conditions=[
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"},
            ]
        ),
    )

    async def scenario() -> None:
        async with manager(api, net_conf) as sm:
            lease = await sm.acquire_lease(ATTRS)
            api.clear_requests()
            await sm.complete_lease(lease)

    asyncio.run(scenario())
    (patch,) = api.requests("PATCH")
    assert (patch.path, patch.content_type) == (STATUS_PATH, STRATEGIC_MERGE)
    match = CONDITION_RE.fullmatch(compact(patch.body))
    assert match is not None and match.group(1) == match.group(2)
    node = api.node(NODE)
    assert node is not None
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert conditions["Ready"] == {"type": "Ready", "status": "True"}
    assert conditions["NetworkUnavailable"]["status"] == "False"
    assert conditions["NetworkUnavailable"]["reason"] == "FlannelIsUp"


def test_complete_lease_without_set_node_network_unavailable_sends_nothing(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")

    async def scenario() -> None:
        async with manager(api, net_conf, set_node_network_unavailable=False) as sm:
            lease = await sm.acquire_lease(ATTRS)
            api.clear_requests()
            await sm.complete_lease(lease)
            with pytest.raises(Unimplemented, match="unimplemented"):
                await sm.renew_lease(lease)

    asyncio.run(scenario())
    assert api.requests("PATCH") == []


# --- setup: node name, config, stored values -------------------------------------------------


def test_node_name_comes_from_the_pod(api, net_conf) -> None:
    api.add_pod("kube-flannel", "kube-flannel-ds-x", "worker-9")
    env = {"POD_NAME": "kube-flannel-ds-x", "POD_NAMESPACE": "kube-flannel"}

    async def scenario() -> str:
        async with manager(api, net_conf, environ=env) as sm:
            return sm.node_name

    assert asyncio.run(scenario()) == "worker-9"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POD_NAME": "p"}, "env variables POD_NAME and POD_NAMESPACE must be set"),
        (
            {"POD_NAME": "gone", "POD_NAMESPACE": "ns"},
            "error retrieving pod spec for 'ns/gone': pods \"gone\" not found",
        ),
        (
            {"POD_NAME": "unscheduled", "POD_NAMESPACE": "ns"},
            "node name not present in pod spec 'ns/unscheduled'",
        ),
    ],
)
def test_node_name_errors(api, net_conf, env: dict[str, str], message: str) -> None:
    api.add_pod("ns", "unscheduled", "")

    async def scenario() -> None:
        async with manager(api, net_conf, environ=env):
            pass

    with pytest.raises(KubeSubnetError) as err:
        asyncio.run(scenario())
    assert str(err.value) == message


def test_config_errors(api, tmp_path: Path) -> None:
    async def scenario(path: Path) -> None:
        async with manager(api, path):
            pass

    with pytest.raises(KubeSubnetError) as err:
        asyncio.run(scenario(tmp_path / "missing.json"))
    assert str(err.value) == (
        f"failed to read net conf: open {tmp_path}/missing.json: no such file or directory"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(KubeSubnetError, match=r"^error parsing subnet config: "):
        asyncio.run(scenario(bad))


def test_network_config_is_parsed_but_not_checked(api, net_conf) -> None:
    async def scenario() -> Any:
        async with manager(api, net_conf) as sm:
            return await sm.get_network_config()

    config = asyncio.run(scenario())
    assert config.network == IPv4Network("10.244.0.0/16")
    assert config.backend_type == "vxlan"
    assert config.subnet_len == 0  # CheckNetworkConfig would have filled in 24


def test_stored_public_ip_and_mac_addresses(api, net_conf) -> None:
    api.add_node(
        NODE,
        pod_cidr="10.244.1.0/24",
        annotations={
            P + "node-public-ip": "192.0.2.55",
            P + "backend-data": '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}',
            P + "backend-v6-data": '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e4"}',
        },
    )

    async def scenario() -> tuple[tuple[str, str], tuple[str, str]]:
        async with manager(api, net_conf) as sm:
            return await sm.get_stored_public_ip(), await sm.get_stored_mac_addresses()

    public, macs = asyncio.run(scenario())
    assert public == ("192.0.2.55", "")
    assert macs == ("12:c6:65:89:b4:e3", "12:c6:65:89:b4:e4")


def test_stored_values_of_a_missing_node_are_empty(api, net_conf) -> None:
    async def scenario() -> tuple[tuple[str, str], tuple[str, str]]:
        async with manager(api, net_conf) as sm:
            return await sm.get_stored_public_ip(), await sm.get_stored_mac_addresses()

    assert asyncio.run(scenario()) == (("", ""), ("", ""))


# --- WatchLeases ------------------------------------------------------------------------------


class Peers:
    """Consumes watch_leases into a LeaseWatcher, as the backend will."""

    def __init__(self, sm: KubeSubnetManager, own: Lease) -> None:
        self.watcher = LeaseWatcher(own, LeaseScope(IPv4Network("10.244.0.0/16")))
        self.batches: list[LeaseWatchBatch] = []
        self.events: list[LeaseEvent] = []
        self._incoming: asyncio.Queue[LeaseWatchBatch] = asyncio.Queue()
        self._task = asyncio.create_task(self._pump(sm))

    async def _pump(self, sm: KubeSubnetManager) -> None:
        async for batch in sm.watch_leases():
            await self._incoming.put(batch)

    async def until(self, done: Callable[[], bool]) -> None:
        """Apply batches until ``done()`` holds."""
        while not done():
            batch = await asyncio.wait_for(self._incoming.get(), WAIT)
            self.batches.append(batch)
            self.events.extend(self.watcher.apply(batch))

    def subnets(self) -> set[str]:
        return {str(lease.subnet) for lease in self.watcher.leases}

    def lease_of(self, subnet: str) -> Lease:
        return next(lease for lease in self.watcher.leases if str(lease.subnet) == subnet)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def watching(
    api: FakeKubeApi, net_conf: Path, body: Callable[[Peers], Awaitable[None]]
) -> None:
    async with manager(api, net_conf) as sm:
        own = await sm.acquire_lease(ATTRS)
        peers = Peers(sm, own)
        try:
            await peers.until(lambda: len(peers.batches) > 0)
            await body(peers)
        finally:
            await peers.stop()


def add_peer(api: FakeKubeApi, name: str, third: int, **extra: str) -> None:
    api.add_node(
        name,
        pod_cidr=f"10.244.{third}.0/24",
        annotations=peer_annotations(f"192.0.2.{third}", f"aa:bb:cc:00:00:{third:02x}", **extra),
    )


def test_peers_appear_update_and_disappear(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    api.add_node("not-flannel", pod_cidr="10.244.9.0/24", annotations={"x": "y"})

    async def body(peers: Peers) -> None:
        # The first batch is the listing: every flannel node but us.
        assert peers.batches[0].snapshot is not None
        assert peers.subnets() == {"10.244.2.0/24"}
        add_peer(api, "c", 3)
        await peers.until(lambda: "10.244.3.0/24" in peers.subnets())
        api.annotate("c", {P + "public-ip": "192.0.2.33"})
        await peers.until(lambda: peers.lease_of("10.244.3.0/24").attrs.public_ip.packed[3] == 33)
        api.delete_node("b")
        await peers.until(lambda: "10.244.2.0/24" not in peers.subnets())
        gone = peers.events[-1]
        assert gone.type is EventType.REMOVED
        assert gone.lease.attrs.public_ip == IPv4Address("192.0.2.2")  # full attrs on removal

    asyncio.run(watching(api, net_conf, body))


def test_irrelevant_node_changes_produce_no_events(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)

    async def body(peers: Peers) -> None:
        before = len(peers.events)
        api.annotate("b", {"some.other/annotation": "1"})
        api.update_node("b", lambda n: n["status"].update(conditions=[{"type": "Ready"}]))
        api.annotate(NODE, {"another/one": "2"})
        add_peer(api, "marker", 4)  # once this arrives, the changes above have been seen
        await peers.until(lambda: "10.244.4.0/24" in peers.subnets())
        assert [e.lease.subnet for e in peers.events[before:]] == [IPv4Network("10.244.4.0/24")]

    asyncio.run(watching(api, net_conf, body))


def test_a_410_relist_removes_peers_that_vanished_while_disconnected(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    add_peer(api, "c", 3)

    async def body(peers: Peers) -> None:
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24"}
        await asyncio.to_thread(api.wait_for_watches, 1)
        with api.hold_watches():
            api.delete_node("b")
            api.annotate("c", {P + "public-ip": "192.0.2.133"})
            add_peer(api, "d", 4)
            api.compact()
        await peers.until(lambda: peers.subnets() == {"10.244.3.0/24", "10.244.4.0/24"})
        await peers.until(
            lambda: peers.lease_of("10.244.3.0/24").attrs.public_ip == IPv4Address("192.0.2.133")
        )
        assert sum(batch.snapshot is not None for batch in peers.batches) == 2
        kinds = {(e.type, str(e.lease.subnet)) for e in peers.events}
        assert (EventType.REMOVED, "10.244.2.0/24") in kinds

    asyncio.run(watching(api, net_conf, body))
    # The watch resumed from the list's resourceVersion, then re-listed after the 410.
    lists = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" not in r.query]
    assert len(lists) == 2


def lists(api: FakeKubeApi) -> int:
    """How often the nodes were listed (not watched)."""
    return sum("watch" not in r.query for r in api.requests("GET", "/api/v1/nodes"))


def test_a_410_as_http_status_also_relists(api, net_conf) -> None:
    api.gone_as_http_status = True
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)

    async def body(peers: Peers) -> None:
        await asyncio.to_thread(api.wait_for_watches, 1)
        with api.hold_watches():
            api.delete_node("b")
            api.compact()
        await peers.until(lambda: peers.subnets() == set())
        assert sum(batch.snapshot is not None for batch in peers.batches) == 2

    asyncio.run(watching(api, net_conf, body))
    # The first listing, then the one after the 410.
    assert lists(api) == 2


def test_a_watch_cut_mid_event_resumes_and_converges(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    add_peer(api, "c", 3)

    async def body(peers: Peers) -> None:
        await asyncio.to_thread(api.wait_for_watches, 1)
        api.cut_next_event()
        api.annotate("c", {P + "public-ip": "192.0.2.133"})
        await peers.until(
            lambda: peers.lease_of("10.244.3.0/24").attrs.public_ip == IPv4Address("192.0.2.133")
        )
        add_peer(api, "d", 4)
        await peers.until(lambda: "10.244.4.0/24" in peers.subnets())
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24", "10.244.4.0/24"}
        assert all(event.type is EventType.ADDED for event in peers.events)

    asyncio.run(watching(api, net_conf, body))
    # The resourceVersion before the cut event is still in the history: the watch resumed from
    # it (the server replayed the event whole), with no second listing.
    watches = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" in r.query]
    assert len(watches) >= 2 and lists(api) == 1
    assert len({r.query["resourceVersion"][0] for r in watches[:2]}) == 1


@pytest.mark.parametrize("history", ["lower", "higher"])
def test_a_server_restarted_on_another_history_is_listed_again(net_conf, history: str) -> None:
    """An API server on a restored or new etcd: the agent's resourceVersion means nothing there
    (too large, or older than the history), so it lists the nodes again and converges, with
    events only for what differs."""
    with FakeKubeApi(too_large_wait=0.2) as api:
        api.add_node(NODE, pod_cidr="10.244.1.0/24")
        add_peer(api, "b", 2)
        add_peer(api, "c", 3)

        async def body(peers: Peers) -> None:
            await asyncio.to_thread(api.wait_for_watches, 1)
            before = len(peers.events)
            api.restart(first_resource_version=10 if history == "lower" else 90_000)
            api.delete_node("b")
            add_peer(api, "d", 4)
            await peers.until(lambda: peers.subnets() == {"10.244.3.0/24", "10.244.4.0/24"})
            changes = {(e.type, str(e.lease.subnet)) for e in peers.events[before:]}
            assert changes == {
                (EventType.REMOVED, "10.244.2.0/24"),
                (EventType.ADDED, "10.244.4.0/24"),
            }
            assert sum(batch.snapshot is not None for batch in peers.batches) == 2

        asyncio.run(watching(api, net_conf, body))
        assert lists(api) == 2


def test_a_token_that_may_not_patch_node_status_is_told_so(net_conf) -> None:
    nodes_only = Subject("reader", (Rule(frozenset({"nodes"}), frozenset({"get", "list"})),))
    with FakeKubeApi(tokens={"reader": nodes_only}) as api:
        api.add_node(NODE, pod_cidr="10.244.1.0/24")
        kubeconfig = net_conf.parent / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: c, cluster: {{server: '{api.url}'}}}}]\n"
            "users: [{name: u, user: {token: reader}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
        )

        async def scenario() -> None:
            async with manager(api, net_conf, kubeconfig_file=str(kubeconfig)) as sm:
                await sm.acquire_lease(ATTRS)

        with pytest.raises(KubeSubnetError) as err:
            asyncio.run(scenario())
        assert str(err.value) == (
            f'timeout contacting kube-api, failed to patch node "{NODE}". Error: nodes "{NODE}" '
            'is forbidden: User "reader" cannot patch resource "nodes/status" in API group "" '
            "at the cluster scope"
        )


def test_a_malformed_annotation_skips_that_node_and_keeps_the_others(
    api, net_conf, caplog: pytest.LogCaptureFixture
) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    add_peer(api, "c", 3)
    add_peer(api, "broken", 5, **{P + "public-ip": "192.0.2.999"})

    async def body(peers: Peers) -> None:
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24"}
        api.annotate("c", {P + "backend-data": "{not json"})
        add_peer(api, "marker", 4)
        await peers.until(lambda: "10.244.4.0/24" in peers.subnets())
        # c keeps its last good lease; nothing was withdrawn.
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24", "10.244.4.0/24"}
        assert all(e.type is EventType.ADDED for e in peers.events)

    with caplog.at_level(logging.WARNING):
        asyncio.run(watching(api, net_conf, body))
    assert 'Error turning node "broken" to lease: invalid IP address: "192.0.2.999"' in caplog.text
    assert 'Error turning node "c" to lease: annotation' in caplog.text


def test_a_node_with_a_field_of_the_wrong_type_is_skipped_and_keeps_the_others(
    api, net_conf, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's answer whose Node has a number where flannel's annotation is: the page is
    decoded again node by node (listed), or the event dropped (watched); that node keeps its
    last good lease and no other is withdrawn."""
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    add_peer(api, "c", 3)
    api.add_node_object(
        {
            "metadata": {"name": "typed", "uid": "u-typed", "annotations": {P + "public-ip": 7}},
            "spec": {"podCIDR": "10.244.5.0/24", "podCIDRs": "10.244.5.0/24"},
        }
    )

    async def body(peers: Peers) -> None:
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24"}
        api.update_node("c", lambda n: n["metadata"]["annotations"].update({P + "public-ip": 9}))
        add_peer(api, "marker", 4)
        await peers.until(lambda: "10.244.4.0/24" in peers.subnets())
        assert peers.subnets() == {"10.244.2.0/24", "10.244.3.0/24", "10.244.4.0/24"}
        assert peers.lease_of("10.244.3.0/24").attrs.public_ip == IPv4Address("192.0.2.3")
        assert all(e.type is EventType.ADDED for e in peers.events)

    with caplog.at_level(logging.WARNING):
        asyncio.run(watching(api, net_conf, body))
    assert 'Error reading node "typed": Expected `str | null`, got `int`' in caplog.text
    assert "Skipped a node watch event that cannot be read: Expected `str | null`" in caplog.text


def test_the_watch_never_waits_for_the_consumer(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)

    async def body(peers: Peers) -> None:
        # 300 updates while nobody consumes: they coalesce to b's newest state.
        for i in range(300):
            api.annotate("b", {P + "public-ip": f"192.0.2.{i % 200 + 1}"})
        add_peer(api, "marker", 4)
        await peers.until(lambda: "10.244.4.0/24" in peers.subnets())
        assert peers.lease_of("10.244.2.0/24").attrs.public_ip == IPv4Address("192.0.2.100")
        assert len(peers.events) < 300

    asyncio.run(watching(api, net_conf, body))


def test_a_failed_watch_resumes_from_the_last_resource_version(
    api, net_conf, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """...after jittered waits: up to 0.1 s, doubling with each failure in a row."""
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)
    draws: list[float] = []

    def draw() -> float:
        draws.append(random.random())
        return draws[-1]

    monkeypatch.setattr(backoff, "jitter_source", draw)

    async def body(peers: Peers) -> None:
        await asyncio.to_thread(api.wait_for_watches, 1)
        api.fail_next("GET", "/api/v1/nodes", 503, times=2)
        api.end_watches()
        add_peer(api, "c", 3)
        await peers.until(lambda: "10.244.3.0/24" in peers.subnets())
        assert sum(batch.snapshot is not None for batch in peers.batches) == 1

    asyncio.run(watching(api, net_conf, body))
    watches = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" in r.query]
    assert len(watches) >= 3  # the first stream, two refused attempts, the resumed one
    assert len({r.query["resourceVersion"][0] for r in watches}) == 1
    waits = [
        float(m.group(1))
        for r in caplog.records
        if (m := re.search(r"Node watch failed \(retrying in (\d+\.\d)s\)", r.getMessage()))
    ]
    # The two refusals, after the stream that ended (a failure too when it ended within a
    # second of its start, with nothing in it): one failure after another.
    assert len(waits) == len(draws) in (2, 3)
    assert waits == [round(0.1 * 2**n * d, 1) for n, d in enumerate(draws)]


def test_a_kubeconfig_file_is_used_and_the_api_url_overrides_its_server(
    api, net_conf, tmp_path: Path
) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    kubeconfig = tmp_path / "kubeconfig"

    def write(server: str) -> None:
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
            f"clusters: [{{name: lab, cluster: {{server: '{server}'}}}}]\n"
            "users: [{name: flannel, user: {token: secret-token}}]\n"
            "contexts: [{name: lab, context: {cluster: lab, user: flannel}}]\n"
        )

    async def scenario(**kw: str) -> None:
        settings = KubeSettings(net_config_path=str(net_conf), kubeconfig_file=str(kubeconfig))
        sm = await KubeSubnetManager.create(replace(settings, **kw), environ={"NODE_NAME": NODE})
        try:
            await sm.get_stored_public_ip()
        finally:
            await sm.close()

    write(api.url)
    asyncio.run(scenario())
    write("http://127.0.0.1:9")  # a dead server: only the URL override can reach the double
    asyncio.run(scenario(api_url=api.url))
    reads = api.requests("GET", f"/api/v1/nodes/{NODE}")
    assert [r.authorization for r in reads] == ["Bearer secret-token"] * 2


def test_in_cluster_config_needs_the_service_environment(
    net_conf, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)

    async def scenario() -> None:
        settings = KubeSettings(net_config_path=str(net_conf))
        await KubeSubnetManager.create(settings, environ={"NODE_NAME": NODE})

    with pytest.raises(KubeSubnetError, match=r"^fail to create kubernetes config: "):
        asyncio.run(scenario())


METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


def test_the_list_comes_in_pages_and_the_watch_asks_for_metadata_only(api, net_conf) -> None:
    """A heartbeat's event then carries no spec or status; the podCIDRs come from the list."""
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    for third in range(2, 9):
        add_peer(api, f"peer-{third}", third)
    for n in range(2 * LIST_PAGE - 5):  # the nodes make three pages
        api.add_node(f"plain-{n:04d}")

    async def body(peers: Peers) -> None:
        assert peers.subnets() == {f"10.244.{t}.0/24" for t in range(2, 9)}
        lists = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" not in r.query]
        assert [r.query.get("limit") for r in lists] == [[str(LIST_PAGE)]] * 3
        assert "continue" in lists[1].query and "continue" in lists[2].query
        # a heartbeat and an annotation change of a listed node, metadata alone
        api.update_node("peer-2", lambda n: n["status"].update(conditions=[{"type": "Ready"}]))
        api.annotate("peer-2", {P + "public-ip": "192.0.2.222"})
        await peers.until(lambda: peers.lease_of("10.244.2.0/24").attrs.public_ip.packed[3] == 222)
        watches = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" in r.query]
        assert {r.accept for r in watches} == {METADATA_ONLY}
        assert not api.requests("GET", "/api/v1/nodes/peer-2")  # its podCIDR was listed

    asyncio.run(watching(api, net_conf, body))


def test_a_list_whose_continue_expired_is_read_again_from_its_first_page(api, net_conf) -> None:
    """etcd compacted while the agent read the pages: the next page is 410 Expired, and the
    agent lists again from the start instead of keeping the nodes of the pages it had."""
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "peer-2", 2)
    for n in range(2 * LIST_PAGE):  # the nodes make three pages
        api.add_node(f"plain-{n:04d}")
    add_peer(api, "zz-last-page", 9)
    api.compact_after_pages(1)

    async def body(peers: Peers) -> None:
        await peers.until(lambda: "10.244.9.0/24" in peers.subnets())
        assert peers.subnets() == {"10.244.2.0/24", "10.244.9.0/24"}
        lists = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" not in r.query]
        assert ["continue" in r.query for r in lists] == [False, True, False, True, True]
        first = peers.batches[0].snapshot  # the pages read before the 410 were not handed on
        assert first is not None
        assert {str(lease.subnet) for lease in first} - {"10.244.1.0/24"} == peers.subnets()

    asyncio.run(watching(api, net_conf, body))


def test_a_node_not_listed_is_read_once_for_its_pod_cidr(api, net_conf) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")

    async def body(peers: Peers) -> None:
        add_peer(api, "late", 5)
        await peers.until(lambda: "10.244.5.0/24" in peers.subnets())
        api.annotate("late", {P + "public-ip": "192.0.2.55"})
        await peers.until(lambda: peers.lease_of("10.244.5.0/24").attrs.public_ip.packed[3] == 55)
        assert len(api.requests("GET", "/api/v1/nodes/late")) == 1
        # re-created under the same name with another podCIDR (a new UID): read again
        api.delete_node("late")
        await peers.until(lambda: "10.244.5.0/24" not in peers.subnets())
        add_peer(api, "late", 6)
        await peers.until(lambda: "10.244.6.0/24" in peers.subnets())
        assert len(api.requests("GET", "/api/v1/nodes/late")) == 2

    asyncio.run(watching(api, net_conf, body))


def test_a_node_whose_pod_cidr_came_after_the_list_is_read_when_it_turns_flannels(
    api, net_conf
) -> None:
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    api.add_node("joining")  # registered, no podCIDR yet, no flanneld yet

    async def body(peers: Peers) -> None:
        api.update_node(
            "joining",
            lambda n: n["spec"].update(podCIDR="10.244.7.0/24", podCIDRs=["10.244.7.0/24"]),
        )
        api.annotate("joining", peer_annotations("192.0.2.7", "aa:bb:cc:00:00:07"))
        await peers.until(lambda: "10.244.7.0/24" in peers.subnets())

    asyncio.run(watching(api, net_conf, body))


def test_a_server_that_cannot_watch_metadata_alone_is_watched_for_whole_nodes(
    api, net_conf, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fakes import kube_api

    def whole_only(accept: str, list_call: bool) -> bool | None:
        return None if "as=" in accept else False

    monkeypatch.setattr(kube_api, "negotiate", whole_only)
    api.add_node(NODE, pod_cidr="10.244.1.0/24")
    add_peer(api, "b", 2)

    async def body(peers: Peers) -> None:
        add_peer(api, "c", 3)
        await peers.until(lambda: "10.244.3.0/24" in peers.subnets())
        watches = [r for r in api.requests("GET", "/api/v1/nodes") if "watch" in r.query]
        assert watches[0].accept == METADATA_ONLY and watches[-1].accept == "application/json"

    asyncio.run(watching(api, net_conf, body))
