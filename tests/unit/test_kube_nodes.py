"""Node objects to leases and back (docs/compatibility.md, "Node annotations"): pure functions,
no API server."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta, timezone
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

import pytest

from pyflannel_runtime.model.lease import EventType, Lease, LeaseAttrs, LeaseEvent
from pyflannel_runtime.subnet.annotations import Annotations
from pyflannel_runtime.subnet.kube_nodes import (
    NodeLeaseError,
    NodeLeaseTracker,
    annotation_changes,
    network_available_patch,
    node_to_lease,
    own_lease,
    own_pod_cidrs,
)

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
        (node(annotations=flannel_annotations(public_ip="192.0.2.300")), "invalid IP address"),
        (node(annotations=flannel_annotations(public_ip="")), "invalid IP address"),
        (node(annotations=flannel_annotations(backend_data="{oops")), "is not valid JSON"),
        (
            node(pod_cidr=None, annotations=flannel_annotations()),
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
        (
            node(pod_cidr="fd00::/64", annotations=flannel_annotations()),
            "missing IPv4 address on n.Spec.PodCIDRs",
        ),
    ],
)
def test_node_to_lease_failures(n: dict[str, Any], message: str) -> None:
    with pytest.raises(NodeLeaseError, match=message):
        node_to_lease(n, KEYS, True, False)


# --- AcquireLease -----------------------------------------------------------------------------


def test_own_pod_cidr_not_assigned() -> None:
    with pytest.raises(NodeLeaseError) as err:
        own_pod_cidrs(node("worker-7", pod_cidr=None))
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


@pytest.mark.parametrize("bad", ["10.244.1.0", "10.244.1.0/33", "10.244.1.0/255.255.255.0", "x/8"])
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
    assert 'Error turning node "n1" to lease: invalid IP address: "not-an-ip"' in caplog.text
    # A re-list keeps the last good lease of n1 and every other peer.
    snapshot = t.reset(
        [bad, node("n2", pod_cidr="10.244.2.0/24", annotations=flannel_annotations())]
    )
    assert [lease.subnet for lease in snapshot] == [
        IPv4Network("10.244.1.0/24"),
        IPv4Network("10.244.2.0/24"),
    ]
    assert t.update("n1", None) == [removed(node_to_lease(good, KEYS, True, False))]


def test_deleting_or_unmanaging_a_node_removes_its_full_lease() -> None:
    t = tracker()
    n = node(annotations=flannel_annotations())
    t.update("n1", n)
    unmanaged = node(annotations={P + "public-ip": "192.0.2.1"})
    assert t.update("n1", unmanaged) == [removed(node_to_lease(n, KEYS, True, False))]
    assert t.update("n1", None) == []
