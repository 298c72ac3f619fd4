"""A Node object shaped like a real cluster's (kubeadm, kubelet with ~25 images, flannel), about
10 KB of JSON, for the Kubernetes-datastore benches; and the kubelet heartbeat that rewrites
its status. The values are invented; the fields and their sizes are what a real node carries
(`kubectl get node -o json`)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

ANNOTATION_PREFIX = "flannel.alpha.coreos.com"
NODE_INFO = (
    "bootID",
    "containerRuntimeVersion",
    "kernelVersion",
    "kubeProxyVersion",
    "kubeletVersion",
    "machineID",
    "osImage",
    "systemUUID",
)
IMAGES = [
    ("registry.k8s.io/kube-proxy", "v1.31.2", 30_000_000),
    ("registry.k8s.io/pause", "3.10", 320_000),
    ("docker.io/flannel/flannel", "v0.26.1", 32_000_000),
    ("docker.io/flannel/flannel-cni-plugin", "v1.5.1-flannel2", 4_800_000),
    ("registry.k8s.io/coredns/coredns", "v1.11.3", 18_000_000),
    ("quay.io/prometheus/node-exporter", "v1.8.2", 11_000_000),
    ("quay.io/prometheus/prometheus", "v2.54.1", 118_000_000),
    ("docker.io/grafana/promtail", "3.1.1", 82_000_000),
    ("registry.k8s.io/ingress-nginx/controller", "v1.11.3", 104_000_000),
    ("docker.io/library/nginx", "1.27.2", 72_000_000),
    ("docker.io/library/redis", "7.4.1", 45_000_000),
    ("docker.io/library/postgres", "17.0", 158_000_000),
    ("quay.io/jetstack/cert-manager-controller", "v1.16.1", 23_000_000),
    ("quay.io/jetstack/cert-manager-webhook", "v1.16.1", 17_000_000),
    ("registry.k8s.io/metrics-server/metrics-server", "v0.7.2", 19_000_000),
    ("docker.io/bitnami/kubectl", "1.31.2", 91_000_000),
    ("quay.io/cilium/hubble-relay", "v1.16.3", 21_000_000),
    ("docker.io/library/busybox", "1.37.0", 2_200_000),
    ("registry.k8s.io/csi-secrets-store/driver", "v1.4.6", 38_000_000),
    ("registry.k8s.io/sig-storage/csi-node-driver-registrar", "v2.12.0", 11_000_000),
    ("registry.k8s.io/sig-storage/livenessprobe", "v2.14.0", 9_800_000),
    ("docker.io/openpolicyagent/gatekeeper", "v3.17.1", 44_000_000),
    ("docker.io/library/alpine", "3.20.3", 3_600_000),
    ("ghcr.io/fluxcd/source-controller", "v1.4.1", 34_000_000),
    ("ghcr.io/fluxcd/kustomize-controller", "v1.4.0", 31_000_000),
]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str, message: str, at: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": at,
        "lastTransitionTime": at,
        "reason": reason,
        "message": message,
    }


def _kubelet_conditions(at: str) -> list[dict[str, str]]:
    return [
        _condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                   "kubelet has sufficient memory available", at),
        _condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                   "kubelet has no disk pressure", at),
        _condition("PIDPressure", "False", "KubeletHasSufficientPID",
                   "kubelet has sufficient PID available", at),
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", at),
    ]  # fmt: skip


def _managed(manager: str, operation: str, at: str, fields: dict[str, Any], sub: str = "") -> dict:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": at,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def node(
    name: str, pod_cidr: str, public_ip: str, vtep_mac: str, n: int, now: datetime | None = None
) -> dict[str, Any]:
    """A flannel (vxlan) node as the API returns it, without a resourceVersion."""
    at = _stamp(now or datetime.now(UTC))
    internal_ip = public_ip
    flannel = {
        f"{ANNOTATION_PREFIX}/backend-data": f'{{"VNI":1,"VtepMAC":"{vtep_mac}"}}',
        f"{ANNOTATION_PREFIX}/backend-type": "vxlan",
        f"{ANNOTATION_PREFIX}/kube-subnet-manager": "true",
        f"{ANNOTATION_PREFIX}/public-ip": public_ip,
    }
    annotations = {
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        **flannel,
    }
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "m6i.2xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": f"eu-west-1{'abc'[n % 3]}",
        "node-role.kubernetes.io/worker": "",
    }
    flannel_condition = _condition(
        "NetworkUnavailable", "False", "FlannelIsUp", "Flannel is running on this node", at
    )
    resources = {
        "cpu": "8",
        "ephemeral-storage": "101430960Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "32475836Ki",
        "pods": "110",
    }
    images = [
        {"names": [f"{image}@sha256:{_digest(image + tag)}", f"{image}:{tag}"], "sizeBytes": size}
        for image, tag, size in IMAGES
    ]
    status_fields = {
        "f:status": {
            "f:allocatable": {f"f:{k}": {} for k in resources},
            "f:capacity": {f"f:{k}": {} for k in resources},
            "f:conditions": {
                f'k:{{"type":"{c}"}}': {
                    ".": {},
                    "f:lastHeartbeatTime": {},
                    "f:lastTransitionTime": {},
                    "f:message": {},
                    "f:reason": {},
                    "f:status": {},
                    "f:type": {},
                }
                for c in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")
            },
            "f:daemonEndpoints": {"f:kubeletEndpoint": {"f:Port": {}}},
            "f:images": {},
            "f:nodeInfo": {f"f:{k}": {} for k in NODE_INFO},
        }
    }
    managed = [
        _managed("kubeadm", "Update", at, {"f:metadata": {"f:annotations": {
            "f:kubeadm.alpha.kubernetes.io/cri-socket": {}}}}),
        _managed("kube-controller-manager", "Update", at, {
            "f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
            "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, f'v:"{pod_cidr}"': {}}}}),
        _managed("kubelet", "Update", at, {
            "f:metadata": {"f:annotations": {".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                           "f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}},
            "f:spec": {"f:providerID": {}}}),
        _managed("flanneld", "Update", at, {
            "f:metadata": {"f:annotations": {f"f:{k}": {} for k in flannel}},
            "f:status": {"f:conditions": {'k:{"type":"NetworkUnavailable"}': {
                ".": {}, "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {},
                "f:reason": {}, "f:status": {}, "f:type": {}}}}}, "status"),
        _managed("kubelet", "Update", at, status_fields, "status"),
    ]  # fmt: skip
    return {
        "metadata": {
            "name": name,
            "uid": str(uuid.UUID(int=n + 1)),
            "creationTimestamp": at,
            "labels": labels,
            "annotations": annotations,
            "managedFields": managed,
        },
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "providerID": f"aws:///eu-west-1a/i-{_digest(name)[:17]}",
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [flannel_condition, *_kubelet_conditions(at)],
            "addresses": [
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _digest(name)[:32],
                "systemUUID": str(uuid.UUID(int=n + 10**9)),
                "bootID": str(uuid.UUID(int=n + 2 * 10**9)),
                "kernelVersion": "6.8.0-1017-aws",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.2",
                "kubeProxyVersion": "v1.31.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


def heartbeat(obj: dict[str, Any], now: datetime | None = None) -> None:
    """What a kubelet status update changes: its conditions' heartbeat times and its managed
    fields' time (the lease of the node would change too, but that is another object)."""
    at = _stamp(now or datetime.now(UTC))
    for condition in obj["status"]["conditions"]:
        if condition["type"] != "NetworkUnavailable":
            condition["lastHeartbeatTime"] = at
    for entry in obj["metadata"]["managedFields"]:
        if entry["manager"] == "kubelet" and entry.get("subresource") == "status":
            entry["time"] = at
