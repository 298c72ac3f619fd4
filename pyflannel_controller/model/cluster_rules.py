"""The cluster model's cross-field rules: settings that only mean something together with
others (``cluster`` runs them after the fields are valid)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from pydantic import BaseModel

from pyflannel_controller.model.cluster_settings import (
    AGENT_BACKEND_SETTINGS,
    BACKEND_SETTINGS,
    ClusterSettings,
)
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.wire.netconf import ConfigError, check_network_config

_NODE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")

_ETCD_ONLY = (
    "flannel_etcd_endpoints",
    "flannel_etcd_prefix",
    "flannel_etcd_cafile",
    "flannel_etcd_certfile",
    "flannel_etcd_keyfile",
    "flannel_etcd_username",
    "flannel_etcd_password",
    "flannel_subnet_lease_renew_margin",
)
_IPV4_ONLY = (
    "flannel_network",
    "flannel_subnet_len",
    "flannel_subnet_min",
    "flannel_subnet_max",
    "flannel_public_ip",
)
_IPV6_ONLY = ("flannel_ipv6_network", "flannel_ipv6_subnet_len", "flannel_public_ipv6")


def _given(model: BaseModel, name: str) -> bool:
    """Set explicitly by the user, as opposed to left at its default."""
    return name in model.model_fields_set and getattr(model, name) is not None


def _unused(model: BaseModel, names: Sequence[str], reason: str) -> list[str]:
    return [f"{name}: only used {reason}" for name in names if _given(model, name)]


def _backend_problems(m: ClusterSettings) -> list[str]:
    backend = m.flannel_backend_type
    owners = {
        **{setting: owner for setting, (owner, _) in BACKEND_SETTINGS.items()},
        **AGENT_BACKEND_SETTINGS,
    }
    problems = [
        f"{setting}: only used with {owner} (backend is {backend})"
        for setting, owner in owners.items()
        if owner != backend
        and _given(m, setting)
        # An explicit default (YAML's `on` for the offload) is no choice of another backend's.
        and getattr(m, setting) != type(m).model_fields[setting].default
    ]
    if m.flannel_enable_ipv6 and not specs.get(backend).dual_stack:
        problems.append(f"flannel_enable_ipv6: the {backend} backend carries IPv4 only")
    return problems


def _datastore_problems(m: ClusterSettings) -> list[str]:
    if m.flannel_datastore == "kubernetes":
        return _unused(m, _ETCD_ONLY, "with flannel_datastore etcd")
    problems = _unused(m, ("flannel_kubeconfig_file",), "with flannel_datastore kubernetes")
    for one, other in (
        ("flannel_etcd_certfile", "flannel_etcd_keyfile"),
        ("flannel_etcd_keyfile", "flannel_etcd_certfile"),
        # The agent speaks TLS only with a client certificate (as flanneld).
        ("flannel_etcd_cafile", "flannel_etcd_certfile"),
        ("flannel_etcd_username", "flannel_etcd_password"),
        ("flannel_etcd_password", "flannel_etcd_username"),
    ):
        if getattr(m, one) is not None and getattr(m, other) is None:
            problems.append(f"{other}: required when {one} is set")
    endpoints = m.flannel_etcd_endpoints or []
    tls = m.flannel_etcd_cafile or m.flannel_etcd_certfile
    if tls and endpoints and not any(e.startswith("https://") for e in endpoints):
        problems.append("flannel_etcd_endpoints: TLS files are set but no endpoint is https://")
    return problems


# What the agent's unit (render/templates/pyflanneld.service.j2) hides from the service, by the
# setting that hides it: a file the agent must read cannot live there.
SANDBOX_HIDDEN = {
    "ProtectHome=yes": ("/home", "/root", "/run/user"),
    "PrivateTmp=yes": ("/tmp", "/var/tmp"),
}
_AGENT_READS = (
    "flannel_kubeconfig_file",
    "flannel_net_conf_path",
    "flannel_etcd_cafile",
    "flannel_etcd_certfile",
    "flannel_etcd_keyfile",
)


def _sandbox_problems(m: ClusterSettings) -> list[str]:
    problems = []
    for name in _AGENT_READS:
        path = getattr(m, name)
        for setting, hidden in SANDBOX_HIDDEN.items():
            inside = [d for d in hidden if path is not None and (path + "/").startswith(d + "/")]
            if inside:
                problems.append(
                    f"{name}: {path} is out of the agent's reach: its unit's {setting} hides "
                    f"{inside[0]} from the service; use another directory, e.g. /etc/pyflannel"
                )
    return problems


def _network_field(message: str, family: str) -> str:
    prefix = "flannel_" if family == "ipv4" else "flannel_ipv6_"
    if "SubnetMin" in message:
        return prefix + "subnet_min"
    if "SubnetMax" in message:
        return prefix + "subnet_max"
    if "SubnetLen" in message or "subnets" in message:
        return prefix + "subnet_len"
    return "flannel_network" if family == "ipv4" else "flannel_ipv6_network"


def _network_problems(m: ClusterSettings) -> list[str]:
    if not m.flannel_enable_ipv4 and not m.flannel_enable_ipv6:
        return ["flannel_enable_ipv4: none defined stack (enable IPv4, IPv6 or both)"]
    problems: list[str] = []
    if not m.flannel_enable_ipv4:
        problems += _unused(m, _IPV4_ONLY, "when flannel_enable_ipv4 is true")
    if not m.flannel_enable_ipv6:
        problems += _unused(m, _IPV6_ONLY, "when flannel_enable_ipv6 is true")
    cfg = m.to_network_config()
    # Checked one family at a time: flannel's messages do not always say which one failed.
    for family, enabled, single in (
        ("ipv4", m.flannel_enable_ipv4, dataclasses.replace(cfg, enable_ipv6=False)),
        ("ipv6", m.flannel_enable_ipv6, dataclasses.replace(cfg, enable_ipv4=False)),
    ):
        if not enabled:
            continue
        try:
            check_network_config(single)
        except ConfigError as err:
            problems.append(f"{_network_field(str(err), family)}: {err}")
    return problems


def _node_problems(m: ClusterSettings) -> list[str]:
    problems: list[str] = []
    for name, node in m.nodes.items():
        path = f"nodes.{name}"
        if not _NODE_NAME.fullmatch(name):
            problems.append(f"{path}: node names use letters, digits, '.', '_' and '-' only")
        if not m.flannel_enable_ipv4:
            problems += [
                f"{path}.{f}: only used when flannel_enable_ipv4 is true"
                for f in ("subnet", "public_ip")
                if _given(node, f)
            ]
        if not m.flannel_enable_ipv6:
            problems += [
                f"{path}.{f}: only used when flannel_enable_ipv6 is true"
                for f in ("ipv6_subnet", "public_ipv6")
                if _given(node, f)
            ]
    return problems


def _cni_problems(m: ClusterSettings) -> list[str]:
    own_setting = {
        "hairpinMode": "flannel_hairpin_mode",
        "isDefaultGateway": "flannel_is_default_gateway",
    }
    problems = []
    for key in m.flannel_cni_delegate_extra:
        if key in own_setting:
            problems.append(f"flannel_cni_delegate_extra.{key}: set {own_setting[key]} instead")
        elif key in ("name", "cniVersion"):
            problems.append(f"flannel_cni_delegate_extra.{key}: the flannel plugin sets it")
    return problems


def cross_field_problems(m: ClusterSettings) -> list[str]:
    return [
        *_backend_problems(m),
        *_datastore_problems(m),
        *_sandbox_problems(m),
        *_network_problems(m),
        *_node_problems(m),
        *_cni_problems(m),
    ]
