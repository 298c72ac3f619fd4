"""--kube-annotation-prefix normalisation and the annotation keys (flannel-io/flannel
pkg/subnet/kube/annotations.go: newAnnotations)."""

from __future__ import annotations

import pytest

from pyflannel_runtime.subnet.annotations import (
    AnnotationPrefixError,
    Annotations,
    normalize_prefix,
)


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


def test_all_keys_of_the_default_prefix() -> None:
    keys = Annotations.for_prefix()
    p = "flannel.alpha.coreos.com/"
    assert keys == Annotations(
        subnet_kube_managed=p + "kube-subnet-manager",
        backend_data=p + "backend-data",
        backend_v6_data=p + "backend-v6-data",
        backend_type=p + "backend-type",
        public_ip=p + "public-ip",
        public_ipv6=p + "public-ipv6",
        public_ip_overwrite=p + "public-ip-overwrite",
        public_ipv6_overwrite=p + "public-ipv6-overwrite",
        node_public_ip=p + "node-public-ip",
        node_public_ipv6=p + "node-public-ipv6",
    )
