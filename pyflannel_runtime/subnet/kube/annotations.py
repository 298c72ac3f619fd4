"""The node annotation keys flannel reads and writes, under ``--kube-annotation-prefix``
(flannel-io/flannel pkg/subnet/kube/annotations.go: newAnnotations)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyflannel_runtime import PyflannelError

DEFAULT_PREFIX = "flannel.alpha.coreos.com"

# Go matches this without a start anchor, so "Org.com" slipped through as "rg.com/"; the API
# server then rejects the upper-case key. Anchoring rejects it up front, as documented.
_PREFIX_RE = re.compile(r"(?:[a-z0-9_-]+\.)+[a-z0-9_-]+/(?:[a-z0-9_-]+-)?")


class AnnotationPrefixError(PyflannelError, ValueError):
    """An unusable ``--kube-annotation-prefix``; ``str()`` is flannel's message."""


def normalize_prefix(prefix: str) -> str:
    """The prefix every key is appended to: ``fqdn/`` or ``fqdn/name-``."""
    slashes = prefix.count("/")
    if slashes > 1:
        raise AnnotationPrefixError("subnet/kube: prefix can contain at most single slash")
    if slashes == 0:
        prefix += "/"
    if not prefix.endswith(("/", "-")):
        prefix += "-"
    if _PREFIX_RE.fullmatch(prefix) is None:
        raise AnnotationPrefixError("subnet/kube: prefix must be in a format: fqdn/[0-9a-z-_]*")
    return prefix


@dataclass(frozen=True)
class Annotations:
    """The full annotation keys for one prefix."""

    subnet_kube_managed: str
    backend_data: str
    backend_v6_data: str
    backend_type: str
    public_ip: str
    public_ipv6: str
    public_ip_overwrite: str
    public_ipv6_overwrite: str
    node_public_ip: str
    node_public_ipv6: str

    @classmethod
    def for_prefix(cls, prefix: str = DEFAULT_PREFIX) -> Annotations:
        p = normalize_prefix(prefix)
        return cls(
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
