"""--kube-annotation-prefix normalisation and the annotation keys (flannel-io/flannel
pkg/subnet/kube/annotations.go: newAnnotations)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import pytest

from pyflannel_runtime.subnet.kube.annotations import (
    AnnotationPrefixError,
    Annotations,
    normalize_prefix,
)
from pyflannel_runtime.subnet.kube.nodes import is_flannel_node, node_to_lease
from pyflannel_runtime.wire.lease import LeaseAttrs


@pytest.mark.parametrize(
    ("prefix", "backend_type"),
    [
        ("flannel.alpha.coreos.com", "flannel.alpha.coreos.com/backend-type"),
        ("flannel.alpha.coreos.com/", "flannel.alpha.coreos.com/backend-type"),
        ("flannel.alpha.coreos.com/prefix", "flannel.alpha.coreos.com/prefix-backend-type"),
        ("flannel.alpha.coreos.com/prefix-", "flannel.alpha.coreos.com/prefix-backend-type"),
        ("org.com", "org.com/backend-type"),
        ("org.com/9", "org.com/9-backend-type"),
        ("org.com/9-", "org.com/9-backend-type"),
        ("org9.com/9-", "org9.com/9-backend-type"),
        ("my_org.co-op.io/x_y", "my_org.co-op.io/x_y-backend-type"),
    ],
)
def test_prefix_examples(prefix: str, backend_type: str) -> None:
    assert Annotations.for_prefix(prefix).backend_type == backend_type


@pytest.mark.parametrize(
    "prefix",
    ["ORG.com", "Org.com", "flannel.alpha.coreos.com/Prefix", "org", "org/", "/", "", ".com/x"],
)
def test_upper_case_and_non_fqdn_prefixes_are_rejected(prefix: str) -> None:
    with pytest.raises(AnnotationPrefixError) as err:
        normalize_prefix(prefix)
    assert str(err.value) == "subnet/kube: prefix must be in a format: fqdn/[0-9a-z-_]*"


def test_more_than_one_slash_is_rejected() -> None:
    with pytest.raises(AnnotationPrefixError) as err:
        normalize_prefix("org.com/a/b")
    assert str(err.value) == "subnet/kube: prefix can contain at most single slash"


def test_a_node_annotated_under_a_custom_prefix_is_read_with_that_prefix() -> None:
    # The annotations as flanneld --kube-annotation-prefix=example.com/pf writes them.
    annotations = {
        "example.com/pf-kube-subnet-manager": "true",
        "example.com/pf-backend-type": "vxlan",
        "example.com/pf-backend-data": '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e3"}',
        "example.com/pf-backend-v6-data": '{"VNI":1,"VtepMAC":"12:c6:65:89:b4:e4"}',
        "example.com/pf-public-ip": "192.0.2.1",
        "example.com/pf-public-ipv6": "2001:db8::1",
    }
    node = {
        "metadata": {"name": "n1", "annotations": annotations},
        "spec": {"podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"]},
    }
    keys = Annotations.for_prefix("example.com/pf")
    assert is_flannel_node(node, keys)
    assert not is_flannel_node(node, Annotations.for_prefix())
    lease = node_to_lease(node, keys, True, True)
    assert lease.attrs == LeaseAttrs(
        public_ip=IPv4Address("192.0.2.1"),
        public_ipv6=IPv6Address("2001:db8::1"),
        backend_type="vxlan",
        backend_data=annotations["example.com/pf-backend-data"],
        backend_v6_data=annotations["example.com/pf-backend-v6-data"],
    )
    assert (lease.subnet, lease.ipv6_subnet) == (
        IPv4Network("10.244.1.0/24"),
        IPv6Network("fd00:10:244:1::/64"),
    )
