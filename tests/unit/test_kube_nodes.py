"""Node objects to leases and back (docs/compatibility.md, "Node annotations"): pure functions,
no API server."""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.gojson.structs import compact, loads_pairs
from pyflannel_runtime.subnet.kube.annotations import Annotations
from pyflannel_runtime.subnet.kube.nodes import (
    NodeLeaseError,
    NodeLeaseTracker,
    annotation_changes,
    annotations_patch,
    network_available_patch,
    node_to_lease,
    own_lease,
    own_pod_cidrs,
    parse_cidr,
    read_lease,
)
from pyflannel_runtime.wire.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.wire.vxlan_data import vtep_mac
from tests.unit.test_lease import ADDRESS_TEXTS

KEYS = Annotations.for_prefix()
P = "flannel.alpha.coreos.com/"
MAC1 = "12:c6:65:89:b4:e3"
DATA1 = '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}'


def node(
    name: str = "n1",
    pod_cidr: str | None = "10.244.1.0/24",
    pod_cidrs: list[str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if pod_cidr is not None:
        spec["podCIDR"] = pod_cidr
    if pod_cidrs is not None:
        spec["podCIDRs"] = pod_cidrs
    metadata: dict[str, Any] = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def flannel_annotations(**extra: str) -> dict[str, str]:
    values = {
        P + "kube-subnet-manager": "true",
        P + "backend-type": "vxlan",
        P + "backend-data": DATA1,
        P + "public-ip": "192.0.2.1",
    }
    values.update({P + k.replace("_", "-"): v for k, v in extra.items()})
    return values


# --- nodeToLease ------------------------------------------------------------------------------


def test_node_to_lease_ipv4() -> None:
    lease = node_to_lease(node(annotations=flannel_annotations()), KEYS, True, False)
    assert lease == Lease(
        IPv4Network("10.244.1.0/24"),
        None,
        LeaseAttrs(IPv4Address("192.0.2.1"), None, "vxlan", DATA1, None),
        enable_ipv4=True,
        enable_ipv6=False,
    )


def test_node_to_lease_dual_stack_takes_the_first_cidr_of_each_family() -> None:
    n = node(
        pod_cidr="10.244.1.0/24",
        pod_cidrs=["fd00:1::/64", "10.244.1.0/24", "10.244.9.0/24"],
        annotations=flannel_annotations(
            public_ipv6="2001:db8::1", backend_v6_data='{"VNI":1, "VtepMAC":"aa:bb:cc:dd:ee:ff"}'
        ),
    )
    lease = node_to_lease(n, KEYS, True, True)
    assert lease.subnet == IPv4Network("10.244.1.0/24")
    assert lease.ipv6_subnet == IPv6Network("fd00:1::/64")
    assert lease.attrs.public_ipv6 == IPv6Address("2001:db8::1")
    assert lease.attrs.backend_v6_data == '{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}'
    assert (lease.enable_ipv4, lease.enable_ipv6) == (True, True)


def test_node_to_lease_without_data_or_with_null_data() -> None:
    annotations = flannel_annotations(backend_type="host-gw", backend_data="null")
    assert (
        node_to_lease(node(annotations=annotations), KEYS, True, False).attrs.backend_data is None
    )
    del annotations[P + "backend-data"]
    assert (
        node_to_lease(node(annotations=annotations), KEYS, True, False).attrs.backend_data is None
    )


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (
            node(annotations=flannel_annotations(public_ip="192.0.2.300")),
            'invalid IP address: "192.0.2.300"',
        ),
        (node(annotations=flannel_annotations(public_ip="")), 'invalid IP address: ""'),
        (
            node(annotations=flannel_annotations(backend_data="{oops")),
            "annotation flannel.alpha.coreos.com/backend-data is not valid JSON: {oops",
        ),
        (
            node(pod_cidr=None, annotations=flannel_annotations()),
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
        (
            node(pod_cidr="fd00::/64", annotations=flannel_annotations()),
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
        (  # no spec at all, or a null one: still the node's own failure, not a crash
            {"metadata": {"name": "n1", "annotations": flannel_annotations()}},
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
        (
            {"metadata": {"name": "n1", "annotations": flannel_annotations()}, "spec": None},
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
    ],
)
def test_node_to_lease_failures(n: dict[str, Any], message: str) -> None:
    with pytest.raises(NodeLeaseError) as err:
        node_to_lease(n, KEYS, True, False)
    assert str(err.value) == message


# --- AcquireLease -----------------------------------------------------------------------------


def test_own_pod_cidr_not_assigned() -> None:
    with pytest.raises(NodeLeaseError) as err:
        own_pod_cidrs(node("worker-7", pod_cidr=None))
    assert str(err.value) == 'node "worker-7" pod cidr not assigned'
    for specless in (
        {"metadata": {"name": "worker-7"}},
        {"metadata": {"name": "worker-7"}, "spec": None},
    ):
        with pytest.raises(NodeLeaseError) as err:
            own_pod_cidrs(specless)
        assert str(err.value) == 'node "worker-7" pod cidr not assigned'


def test_own_pod_cidrs_are_masked_and_classified() -> None:
    assert own_pod_cidrs(node(pod_cidr="10.244.1.77/24")) == (IPv4Network("10.244.1.0/24"), None)
    dual = node(pod_cidr="10.244.1.0/24", pod_cidrs=["10.244.1.0/24", "fd00:1::5/64"])
    assert own_pod_cidrs(dual) == (IPv4Network("10.244.1.0/24"), IPv6Network("fd00:1::/64"))


def test_three_pod_cidrs_are_refused() -> None:
    n = node("w", pod_cidrs=["10.244.1.0/24", "fd00:1::/64", "10.244.2.0/24"])
    with pytest.raises(NodeLeaseError) as err:
        own_pod_cidrs(n)
    assert str(err.value) == 'node "w" pod cidrs should be IPv4/IPv6 only or dualstack'


@pytest.mark.parametrize(
    "bad",
    [
        "10.244.1.0",
        "10.244.1.0/33",
        "10.244.1.0/255.255.255.0",
        "x/8",
        # Lengths Python's int() reads and Go's ParseCIDR does not: a sign, blanks, an
        # underscore, digits other than ASCII's.
        "10.244.1.0/+24",
        "10.244.1.0/ 24",
        "10.244.1.0/2_4",
        "10.244.1.0/\u0662\u0664",
    ],
)
def test_invalid_pod_cidr(bad: str) -> None:
    with pytest.raises(NodeLeaseError) as err:
        own_pod_cidrs(node(pod_cidr=bad))
    assert str(err.value) == f"invalid CIDR address: {bad}"


def _own(v4: str | None, v6: str | None = None, **kw: Any) -> Lease:
    args: dict[str, Any] = {
        "network": IPv4Network("10.244.0.0/16"),
        "ipv6_network": IPv6Network("fd00::/48"),
        "enable_ipv4": True,
        "enable_ipv6": v6 is not None,
        "backend_type": "vxlan",
        "name": "n1",
        "expiration": 0.0,
    }
    args.update(kw)
    return own_lease(
        IPv4Network(v4) if v4 else None, IPv6Network(v6) if v6 else None, LeaseAttrs(), **args
    )


def test_own_lease_checks_the_network() -> None:
    assert _own("10.244.1.0/24").subnet == IPv4Network("10.244.1.0/24")
    with pytest.raises(NodeLeaseError) as err:
        _own("10.9.1.0/24")
    assert str(err.value) == (
        'subnet "10.244.0.0/16" specified in the flannel net config doesn\'t contain '
        '"10.9.1.0/24" PodCIDR of the "n1" node'
    )
    with pytest.raises(NodeLeaseError) as err:
        _own("10.244.1.0/24", "fd01::/64")
    assert str(err.value) == (
        'subnet "fd00::/48" specified in the flannel net config doesn\'t contain '
        '"fd01::/64" IPv6 PodCIDR of the "n1" node'
    )
    with pytest.raises(NodeLeaseError, match=re.escape('subnet "0.0.0.0/0"')):
        _own("10.244.1.0/24", network=None)


def test_own_lease_flags() -> None:
    dual = _own("10.244.1.0/24", "fd00:0:0:1::/64")
    assert (dual.enable_ipv4, dual.enable_ipv6) == (True, True)
    udp = _own("10.244.1.0/24", "fd00:0:0:1::/64", backend_type="udp")
    assert (udp.enable_ipv4, udp.enable_ipv6) == (True, False)
    # A type no backend here has (the agent refuses it before): forced to IPv4 as udp.
    other = _own("10.244.1.0/24", "fd00:0:0:1::/64", backend_type="wireguard")
    assert (other.enable_ipv4, other.enable_ipv6) == (True, False)


def vxlan_attrs(**kw: Any) -> LeaseAttrs:
    args: dict[str, Any] = {
        "public_ip": IPv4Address("192.0.2.1"),
        "backend_type": "vxlan",
        "backend_data": DATA1,
    }
    args.update(kw)
    return LeaseAttrs(**args)


def test_a_fresh_node_gets_every_annotation_in_key_order() -> None:
    changes = annotation_changes({}, vxlan_attrs(), KEYS)
    assert changes == {
        P + "backend-data": DATA1,
        P + "backend-type": "vxlan",
        P + "kube-subnet-manager": "true",
        P + "public-ip": "192.0.2.1",
    }
    assert list(changes) == sorted(changes)


def test_an_up_to_date_node_needs_no_patch() -> None:
    assert annotation_changes(flannel_annotations(other="x"), vxlan_attrs(), KEYS) == {}


def test_only_the_changed_annotations_are_sent() -> None:
    current = flannel_annotations(public_ip="192.0.2.9")
    assert annotation_changes(current, vxlan_attrs(), KEYS) == {P + "public-ip": "192.0.2.1"}


def test_public_ip_overwrite_is_advertised() -> None:
    current = flannel_annotations(public_ip_overwrite="203.0.113.5")
    assert annotation_changes(current, vxlan_attrs(), KEYS) == {P + "public-ip": "203.0.113.5"}
    current[P + "public-ip"] = "203.0.113.5"
    assert annotation_changes(current, vxlan_attrs(), KEYS) == {}


def test_vxlan_without_v4_data_writes_only_type_and_flag() -> None:
    attrs = vxlan_attrs(backend_data=None, public_ipv6=IPv6Address("2001:db8::1"))
    changes = annotation_changes({}, attrs, KEYS)
    assert changes == {P + "backend-type": "vxlan", P + "kube-subnet-manager": "true"}


def test_vxlan_dual_stack_writes_the_v6_keys() -> None:
    v6data = '{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}'
    attrs = vxlan_attrs(public_ipv6=IPv6Address("2001:db8::1"), backend_v6_data=v6data)
    changes = annotation_changes(flannel_annotations(), attrs, KEYS)
    assert changes == {P + "backend-v6-data": v6data, P + "public-ipv6": "2001:db8::1"}


def test_host_gw_and_udp_write_null_data() -> None:
    host_gw = annotation_changes({}, LeaseAttrs(IPv4Address("192.0.2.1"), None, "host-gw"), KEYS)
    assert host_gw[P + "backend-data"] == "null"
    udp = annotation_changes({}, LeaseAttrs(IPv4Address("192.0.2.1")), KEYS)
    assert udp[P + "backend-type"] == "" and udp[P + "backend-data"] == "null"


# --- CompleteLease and GetStoredMacAddresses --------------------------------------------------


def test_network_available_patch_is_flannels_exact_body() -> None:
    when = datetime(2026, 3, 4, 7, 8, 9, 654321, tzinfo=timezone(timedelta(hours=2)))
    body = json.dumps(network_available_patch(when), separators=(",", ":"))
    assert body == (
        '{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False",'
        '"lastHeartbeatTime":"2026-03-04T05:08:09Z","lastTransitionTime":"2026-03-04T05:08:09Z",'
        '"reason":"FlannelIsUp","message":"Flannel is running on this node"}]}}'
    )
    assert network_available_patch(datetime(2026, 1, 1, tzinfo=UTC))["status"]["conditions"][0][
        "lastHeartbeatTime"
    ] == ("2026-01-01T00:00:00Z")


# --- the update filter and the per-node cache -------------------------------------------------


def tracker(v4: bool = True, v6: bool = False) -> NodeLeaseTracker:
    return NodeLeaseTracker(KEYS, v4, v6)


def added(lease: Lease) -> LeaseEvent:
    return LeaseEvent(EventType.ADDED, lease)


def removed(lease: Lease) -> LeaseEvent:
    return LeaseEvent(EventType.REMOVED, lease)


def test_nodes_without_the_managed_annotation_are_ignored() -> None:
    t = tracker()
    annotations = flannel_annotations()
    annotations[P + "kube-subnet-manager"] = "yes"
    assert t.update("n1", node(annotations=annotations)) == []
    assert t.update("n2", node("n2")) == []


def test_irrelevant_changes_are_not_updates_and_relevant_ones_are() -> None:
    t = tracker()
    first = node(annotations=flannel_annotations())
    (event,) = t.update("n1", first)
    assert event.type is EventType.ADDED
    assert t.update("n1", node(annotations=flannel_annotations(unrelated="1"))) == []
    newer = node(annotations=flannel_annotations(public_ip="192.0.2.2"))
    assert t.update("n1", newer) == [added(node_to_lease(newer, KEYS, True, False))]


def test_v6_only_changes_are_updates_in_dual_stack() -> None:
    t = tracker(True, True)

    def dual(v6data: str) -> dict[str, Any]:
        return node(
            pod_cidrs=["10.244.1.0/24", "fd00:1::/64"],
            annotations=flannel_annotations(public_ipv6="2001:db8::1", backend_v6_data=v6data),
        )

    t.update("n1", dual('{"VNI":1,"VtepMAC":"aa:aa:aa:aa:aa:aa"}'))
    changed = dual('{"VNI":1,"VtepMAC":"bb:bb:bb:bb:bb:bb"}')
    assert t.update("n1", changed) == [added(node_to_lease(changed, KEYS, True, True))]


def test_pod_cidr_changes_remove_the_old_subnet() -> None:
    t = tracker()
    before = node(annotations=flannel_annotations())
    after = node(pod_cidr="10.244.5.0/24", annotations=flannel_annotations())
    t.update("n1", before)
    assert t.update("n1", after) == [
        removed(node_to_lease(before, KEYS, True, False)),
        added(node_to_lease(after, KEYS, True, False)),
    ]


def test_a_malformed_node_is_skipped_with_a_warning_and_keeps_its_last_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    t = tracker()
    good = node(annotations=flannel_annotations())
    t.update("n1", good)
    t.update("n2", node("n2", pod_cidr="10.244.2.0/24", annotations=flannel_annotations()))
    bad = node(annotations=flannel_annotations(public_ip="not-an-ip"))
    with caplog.at_level(logging.WARNING):
        assert t.update("n1", bad) == []
        assert t.update("n3", node("n3", annotations=flannel_annotations(public_ip="x"))) == []
    assert caplog.messages == [
        'Error turning node "n1" to lease: invalid IP address: "not-an-ip"',
        'Error turning node "n3" to lease: invalid IP address: "x"',
    ]
    # A re-list keeps the last good lease of n1 and every other peer.
    snapshot = t.reset(
        [bad, node("n2", pod_cidr="10.244.2.0/24", annotations=flannel_annotations())]
    )
    assert [lease.subnet for lease in snapshot] == [
        IPv4Network("10.244.1.0/24"),
        IPv4Network("10.244.2.0/24"),
    ]
    assert t.update("n1", None) == [removed(node_to_lease(good, KEYS, True, False))]


def test_a_lease_read_in_the_watch_thread_makes_the_same_events_and_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = [
        ("n1", node(annotations=flannel_annotations())),
        ("n2", node("n2", pod_cidr="10.244.2.0/24", annotations=flannel_annotations())),
        ("n1", node(annotations=flannel_annotations(public_ip="192.0.2.2"))),
        ("n1", node(annotations=flannel_annotations(public_ip="not-an-ip"))),
        ("n2", node("n2", annotations={P + "public-ip": "192.0.2.1"})),  # no flannel node now
        ("n1", node(pod_cidr="10.244.5.0/24", annotations=flannel_annotations())),
    ]
    outcomes = []
    for read in (False, True):
        t = tracker()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            events = [
                t.update(name, read_lease(n, KEYS, True, False) if read else n) for name, n in steps
            ]
            snapshot = t.reset(read_lease(n, KEYS, True, False) if read else n for _, n in steps)
        outcomes.append((events, snapshot, list(caplog.messages)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][2][0] == 'Error turning node "n1" to lease: invalid IP address: "not-an-ip"'


def test_deleting_or_unmanaging_a_node_removes_its_full_lease() -> None:
    t = tracker()
    n = node(annotations=flannel_annotations())
    t.update("n1", n)
    unmanaged = node(annotations={P + "public-ip": "192.0.2.1"})
    assert t.update("n1", unmanaged) == [removed(node_to_lease(n, KEYS, True, False))]
    assert t.update("n1", None) == []


# --- what the mutation run showed untested ----------------------------------------------------

V6DATA = '{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}'


def dual_attrs(**kw: Any) -> LeaseAttrs:
    return vxlan_attrs(
        **{"public_ipv6": IPv6Address("2001:db8::1"), "backend_v6_data": V6DATA} | kw
    )


def dual_annotations(**extra: str) -> dict[str, str]:
    return flannel_annotations(**{"public_ipv6": "2001:db8::1", "backend_v6_data": V6DATA} | extra)


V4_STALE = [
    ({"backend_data": "null"}, {"backend-data": DATA1}),
    ({"backend_type": "udp"}, {"backend-type": "vxlan"}),
    ({"public_ip": "192.0.2.9"}, {"public-ip": "192.0.2.1"}),
    ({"kube_subnet_manager": "false"}, {"kube-subnet-manager": "true"}),
    ({"public_ip_overwrite": "203.0.113.5"}, {"public-ip": "203.0.113.5"}),
]
V6_STALE = [
    ({"backend_v6_data": "null"}, {"backend-v6-data": V6DATA}),
    ({"public_ipv6": "2001:db8::9"}, {"public-ipv6": "2001:db8::1"}),
    ({"public_ipv6_overwrite": "2001:db8::5"}, {"public-ipv6": "2001:db8::5"}),
]


@pytest.mark.parametrize(
    ("dual", "stale", "patch"),
    [(True, *case) for case in V4_STALE + V6_STALE] + [(False, *case) for case in V4_STALE],
)
def test_each_stale_annotation_alone_is_patched(
    dual: bool, stale: dict[str, str], patch: dict[str, str]
) -> None:
    """A node, dual-stack or v4-only, up to date but for one annotation gets exactly that one."""
    annotations = dual_annotations if dual else flannel_annotations
    attrs = dual_attrs() if dual else vxlan_attrs()
    expected = {P + k: v for k, v in patch.items()}
    assert annotation_changes(annotations(**stale), attrs, KEYS) == expected
    assert annotation_changes(annotations(), attrs, KEYS) == {}


def test_an_absent_annotation_equals_an_empty_wanted_one() -> None:
    """flannel reads a missing annotation as "": a udp node (BackendType "") needs no patch."""
    attrs = LeaseAttrs(IPv4Address("192.0.2.1"), backend_v6_data=V6DATA)
    current = {P + "kube-subnet-manager": "true", P + "backend-data": "null"}
    current[P + "public-ip"] = "192.0.2.1"
    assert annotation_changes(current, attrs, KEYS) == {}


def test_without_a_public_ipv6_the_ipv6_keys_do_not_make_a_node_stale() -> None:
    """flannel compares the IPv6 annotations only for a node with a public IPv6: a node up to
    date for IPv4 is left alone even though a patch would also carry IPv6 data."""
    attrs = vxlan_attrs(backend_v6_data=V6DATA)
    assert annotation_changes(flannel_annotations(), attrs, KEYS) == {}
    # An overwrite equal to the local IP is no reason to patch either.
    same = flannel_annotations(public_ip_overwrite="192.0.2.1")
    assert annotation_changes(same, attrs, KEYS) == {}
    assert (
        annotation_changes(flannel_annotations(public_ipv6_overwrite="2001:db8::5"), attrs, KEYS)
        == {}
    )
    # Stale for IPv4: now the IPv6 data and the overwritten IPv6 go along.
    current = flannel_annotations(public_ip="192.0.2.9", public_ipv6_overwrite="2001:db8::5")
    assert annotation_changes(current, attrs, KEYS) == {
        P + "backend-v6-data": V6DATA,
        P + "public-ip": "192.0.2.1",
        P + "public-ipv6": "2001:db8::5",
    }


@pytest.mark.parametrize(
    ("backend", "v6_keys"),
    [
        ("vxlan", True),
        ("wireguard", True),
        ("host-gw", True),
        ("extension", True),
        ("udp", False),
        ("ipip", False),
    ],
)
def test_which_backends_advertise_their_ipv6(backend: str, v6_keys: bool) -> None:
    """flannel's AcquireLease: vxlan and wireguard when they have IPv6 data, host-gw and
    extension whenever the node has a public IPv6."""
    changes = annotation_changes({}, dual_attrs(backend_type=backend), KEYS)
    assert (P + "backend-v6-data" in changes) is v6_keys
    assert (P + "public-ipv6" in changes) is v6_keys
    null_data = dual_attrs(backend_type=backend, backend_v6_data=None)
    null_changes = annotation_changes({}, null_data, KEYS)
    expect_null = backend in ("host-gw", "extension")
    assert null_changes.get(P + "backend-v6-data") == ("null" if expect_null else None)
    no_v6 = annotation_changes({}, vxlan_attrs(backend_type=backend, backend_v6_data=V6DATA), KEYS)
    assert (P + "backend-v6-data" in no_v6) is (backend == "vxlan")
    assert P + "public-ipv6" not in no_v6


def test_an_overwritten_public_ip_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        annotation_changes(
            flannel_annotations(public_ip_overwrite="203.0.113.5"), vxlan_attrs(), KEYS
        )
    assert caplog.messages == [
        "Overriding public ip with '203.0.113.5' from node annotation "
        "'flannel.alpha.coreos.com/public-ip-overwrite'"
    ]
    caplog.clear()
    v6 = dual_annotations(public_ipv6_overwrite="2001:db8::5", public_ipv6="2001:db8::5")
    v6[P + "backend-type"] = "udp"
    with caplog.at_level(logging.INFO):
        annotation_changes(v6, dual_attrs(), KEYS)
    assert caplog.messages == []
    caplog.clear()
    current = flannel_annotations(public_ip="203.0.113.5", public_ip_overwrite="203.0.113.5")
    current[P + "backend-type"] = "udp"  # stale, but the advertised IP is already in place
    with caplog.at_level(logging.INFO):
        annotation_changes(current, vxlan_attrs(), KEYS)
    assert caplog.messages == []


def test_node_to_lease_reads_only_the_enabled_families() -> None:
    annotations = dual_annotations(public_ip="192.0.2.1")
    n = node(pod_cidrs=["10.244.1.0/24", "fd00:1::/64"], annotations=annotations)
    v6_only = node_to_lease(n, KEYS, False, True)
    assert v6_only == Lease(
        None,
        IPv6Network("fd00:1::/64"),
        LeaseAttrs(IPv4Address("0.0.0.0"), IPv6Address("2001:db8::1"), "vxlan", None, V6DATA),
        enable_ipv4=False,
        enable_ipv6=True,
    )
    v4_only = node_to_lease(n, KEYS, True, False)
    assert v4_only == Lease(
        IPv4Network("10.244.1.0/24"),
        None,
        LeaseAttrs(IPv4Address("192.0.2.1"), None, "vxlan", DATA1, None),
    )
    typeless = dict(annotations)
    del typeless[P + "backend-type"]
    assert node_to_lease(node(annotations=typeless), KEYS, True, False).attrs.backend_type == ""


@pytest.mark.parametrize(
    ("annotations", "families", "message"),
    [
        ({}, (True, False), 'invalid IP address: ""'),
        ({P + "public-ip": "192.0.2.1"}, (False, True), 'invalid IP address: ""'),
        (
            {P + "public-ip": "192.0.2.1", P + "backend-data": "{"},
            (True, False),
            "annotation flannel.alpha.coreos.com/backend-data is not valid JSON: {",
        ),
        (
            {P + "public-ipv6": "2001:db8::1", P + "backend-v6-data": "["},
            (False, True),
            "annotation flannel.alpha.coreos.com/backend-v6-data is not valid JSON: [",
        ),
        (
            {P + "public-ipv6": "2001:db8::1"},
            (False, True),
            "missing IPv6 address on n.Spec.PodCIDRs",
        ),
    ],
)
def test_node_to_lease_messages(
    annotations: dict[str, str], families: tuple[bool, bool], message: str
) -> None:
    with pytest.raises(NodeLeaseError) as err:
        node_to_lease(node(annotations=annotations), KEYS, *families)
    assert str(err.value) == message


def test_empty_pod_cidrs_are_skipped() -> None:
    n = node(
        pod_cidr=None,
        pod_cidrs=["", "fd00:1::/64", "10.244.3.0/24"],
        annotations=flannel_annotations(),
    )
    assert node_to_lease(n, KEYS, True, False).subnet == IPv4Network("10.244.3.0/24")


def test_messages_quote_names_as_go_does() -> None:
    with pytest.raises(NodeLeaseError) as err:
        own_pod_cidrs(node("nöde-1", pod_cidr=None))
    assert str(err.value) == 'node "nöde-1" pod cidr not assigned'


def test_nodes_without_metadata_have_no_name_and_no_annotations() -> None:
    t = tracker()
    assert t.update("n1", {"spec": {"podCIDR": "10.244.1.0/24"}}) == []
    assert t.reset([{"spec": {}}, {"metadata": {}}]) == ()
    assert own_pod_cidrs({"metadata": {}, "spec": {"podCIDR": "10.244.1.0/24"}}) == (
        IPv4Network("10.244.1.0/24"),
        None,
    )
    with pytest.raises(NodeLeaseError, match=r'^node "" pod cidr not assigned$'):
        own_pod_cidrs({"spec": {}})


def test_own_pod_cidrs_of_a_v6_only_node() -> None:
    assert own_pod_cidrs(node(pod_cidr="fd00:1::/64")) == (None, IPv6Network("fd00:1::/64"))


def test_own_lease_without_an_ipv6_network_names_the_whole_space() -> None:
    with pytest.raises(NodeLeaseError, match=re.escape('subnet "::/0" specified')):
        _own("10.244.1.0/24", "fd00:0:0:1::/64", ipv6_network=None)


def test_the_patch_holds_only_the_annotations() -> None:
    assert annotations_patch({P + "public-ip": "192.0.2.1"}) == {
        "metadata": {"annotations": {P + "public-ip": "192.0.2.1"}}
    }


def test_the_condition_stamp_is_utc_whatever_the_local_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        when = datetime(2026, 3, 4, 7, 8, 9, tzinfo=UTC)
        condition = network_available_patch(when)["status"]["conditions"][0]
        assert condition["lastHeartbeatTime"] == "2026-03-04T07:08:09Z"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    ("v4", "v6", "families", "subnets"),
    [
        ("10.244.1.0/24", "fd00:0:0:1::/64", (False, True), (None, "fd00:0:0:1::/64")),
        ("10.244.1.0/24", "fd00:0:0:1::/64", (True, False), ("10.244.1.0/24", None)),
        (None, "fd00:0:0:1::/64", (True, True), (None, "fd00:0:0:1::/64")),
        ("10.244.1.0/24", None, (True, True), ("10.244.1.0/24", None)),
    ],
)
def test_own_lease_keeps_only_the_enabled_families(
    v4: str | None, v6: str | None, families: tuple[bool, bool], subnets: tuple[str | None, ...]
) -> None:
    attrs = LeaseAttrs(IPv4Address("192.0.2.1"), backend_type="vxlan")
    lease = own_lease(
        IPv4Network(v4) if v4 else None,
        IPv6Network(v6) if v6 else None,
        attrs,
        network=IPv4Network("10.244.0.0/16"),
        ipv6_network=IPv6Network("fd00::/48"),
        enable_ipv4=families[0],
        enable_ipv6=families[1],
        backend_type="vxlan",
        name="n1",
        expiration=1234.5,
    )
    assert (lease.subnet, lease.ipv6_subnet) == tuple(
        None if s is None else (IPv4Network(s) if "." in s else IPv6Network(s)) for s in subnets
    )
    assert (lease.attrs, lease.expiration) == (attrs, 1234.5)
    assert (lease.enable_ipv4, lease.enable_ipv6) == (
        subnets[0] is not None,
        subnets[1] is not None,
    )


def test_a_new_node_is_added_with_its_lease() -> None:
    n = node(annotations=flannel_annotations())
    assert tracker().update("n1", n) == [added(node_to_lease(n, KEYS, True, False))]


def _reference_cidr(text: str) -> IPv4Network | IPv6Network | None:
    """Go's net.ParseCIDR as ipaddress reads it, the mask's host bits cleared."""
    addr, _, length = text.partition("/")
    if not addr or not length.isascii() or not length.isdigit():
        return None
    try:
        return ip_network(f"{addr}/{int(length)}", strict=False)
    except ValueError:
        return None


@given(
    st.tuples(
        st.one_of(ADDRESS_TEXTS, st.ip_addresses().map(str)),
        st.one_of(st.integers(0, 130).map(str), st.sampled_from(["", "+8", "08", "1 ", "x"])),
    ).map("/".join)
    | st.text(max_size=24)
)
def test_parse_cidr_reads_what_ipaddress_reads(text: str) -> None:
    try:
        parsed: IPv4Network | IPv6Network | None = parse_cidr(text)
    except NodeLeaseError:
        parsed = None
    assert parsed == _reference_cidr(text)


_JSON_KEYS = st.text(st.sampled_from("AVINaeprtv0_"), min_size=1, max_size=8)
_JSON_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.text(max_size=12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
)


def _backend_data(text: str) -> str | None:
    n = node(annotations=flannel_annotations(backend_data=text))
    return node_to_lease(n, KEYS, True, False).attrs.backend_data


@given(
    st.dictionaries(_JSON_KEYS, _JSON_VALUES, max_size=4),
    st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")]),
    st.booleans(),
)
def test_backend_data_is_kept_as_go_marshals_it(
    data: dict[str, Any], separators: tuple[str, str], ascii_only: bool
) -> None:
    """Whether or not the text is already Go's compact form (which is kept without decoding),
    the lease holds what decoding and re-encoding it gives."""
    text = json.dumps(data, separators=separators, ensure_ascii=ascii_only)
    assert _backend_data(text) == compact(loads_pairs(text))


def test_backend_data_with_a_repeated_key_is_kept_as_written() -> None:
    """As flannel keeps the annotation (a json.RawMessage); the VTEP MAC read from it is the last
    one, as Go's decoding takes the last duplicate."""
    text = '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3","VtepMAC":"12:c6:65:89:b4:e4"}'
    assert _backend_data(text) == text
    assert vtep_mac(text) == "12:c6:65:89:b4:e4"
