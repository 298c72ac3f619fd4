"""The Kubernetes datastore's watch faults, against agents in network namespaces and their
kernels (docs/compatibility.md, "Node watch faults"): the Node API test double cuts a watch in the
middle of an event, answers one with 410 Gone, or restarts on another resourceVersion history
(lower or higher than the agents' cursor). After each the agents converge on the nodes as they
are, and the peers that stayed are never withdrawn: no REMOVED for them, no kernel deletion.

The double enforces the agents' least-privilege RBAC (docs/operating.md) for their token throughout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Network

import pytest

from pyflannel_lab.netns_agents import AgentLab
from pyflannel_runtime.wire.vxlan_data import vxlan_backend_data
from tests.fakes.kube_api import FLANNEL_AGENT, FakeKubeApi
from tests.integration.faults import (
    assert_in_sync,
    kernel_deletions,
    report,
    wait_routed,
)

pytestmark = pytest.mark.root

P = "flannel.alpha.coreos.com/"
TOKEN = "pyflannel-agent-token"
NEWCOMER = IPv4Network("10.244.50.0/24")


def add_newcomer(api: FakeKubeApi) -> None:
    """A flannel node that joins during the fault (its agent is elsewhere)."""
    api.add_node(
        "newcomer",
        pod_cidr=str(NEWCOMER),
        annotations={
            P + "kube-subnet-manager": "true",
            P + "backend-type": "vxlan",
            P + "backend-data": vxlan_backend_data(1, "02:00:00:00:00:50"),
            P + "public-ip": "192.0.2.50",
        },
    )


def cut_mid_event(api: FakeKubeApi) -> None:
    api.cut_next_event(streams=3)  # every agent's stream breaks in the newcomer's event
    add_newcomer(api)


def gone(api: FakeKubeApi) -> None:
    with api.hold_watches():
        add_newcomer(api)
        api.compact()


def restart(first: int) -> Callable[[FakeKubeApi], None]:
    def fault(api: FakeKubeApi) -> None:
        api.restart(first_resource_version=first)
        add_newcomer(api)

    return fault


FAULTS = {
    "cut mid-event": (cut_mid_event, 0),
    "410 Gone": (gone, 3),
    "restart, lower history": (restart(10), 3),
    "restart, higher history": (restart(90_000), 3),
}


@pytest.fixture(scope="module")
def lab() -> Iterator[AgentLab]:
    """Three agents in kube mode, serving every fault in turn."""

    def double(*, host: str) -> FakeKubeApi:
        return FakeKubeApi(host=host, tokens={TOKEN: FLANNEL_AGENT}, too_large_wait=0.5)

    with AgentLab(
        {"Type": "vxlan"}, hosts=3, prefix="pfk", kube_api=double, kube_token=TOKEN
    ) as running:
        running.start_all()
        yield running


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_agents_converge_after_a_watch_fault_withdrawing_no_peer(
    lab: AgentLab, fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    inflict, relists = FAULTS[fault]
    api = lab.kube
    assert isinstance(api, FakeKubeApi)
    h1, h2, h3 = lab.net.hosts
    if api.node("newcomer") is not None:  # the previous fault's
        api.delete_node("newcomer")
    for host in lab.net.hosts:
        wait_routed(lab, host, NEWCOMER, routed=False)
        for peer in lab.net.hosts:
            if peer is not host:
                wait_routed(lab, host, peer.subnet)
    api.wait_for_watches(3)
    lists = sum("watch" not in r.query for r in api.requests("GET", "/api/v1/nodes"))

    with kernel_deletions(lab, h1) as deleted:
        started = time.monotonic()
        inflict(api)
        done = wait_routed(lab, h1, NEWCOMER)
    for host in (h2, h3):
        wait_routed(lab, host, NEWCOMER)

    assert deleted == [], deleted  # no peer was withdrawn, not for a moment
    assert all(lab.reachability().values()), lab.reachability()
    relisted = sum("watch" not in r.query for r in api.requests("GET", "/api/v1/nodes"))
    assert relisted - lists == relists, (relisted, lists)
    assert_in_sync(lab, h1, leases=4)
    report(
        capsys,
        f"kube watch fault {fault}: h1 programmed the newcomer {done - started:.2f} s after it; "
        f"the agents listed the nodes {relists} times again; kernel deletions: {len(deleted)}",
    )
