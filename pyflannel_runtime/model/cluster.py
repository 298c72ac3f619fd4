"""The cluster model the Ansible roles validate: its schema and cross-field rules (the per-node
plan derived from it is in ``cluster_plan``).

Settings carry kubespray's role-prefixed names where kubespray has them and otherwise flannel's
own key names (``flannel_subnet_len`` for ``SubnetLen``), so an inventory reads the same here
and in the roles. Per-node overrides live under ``nodes``. Every problem is reported as
``<field path>: <what is wrong>`` so a user can find the offending line.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import ipaddress
import json
import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    SecretStr,
    StrictBool,
    StrictInt,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pyflannel_runtime import DEFAULT_SUBNET_FILE
from pyflannel_runtime.backend import registry, tx_offload
from pyflannel_runtime.backend.options import Option, UdpOptions, VxlanOptions
from pyflannel_runtime.model.netconf import ConfigError, NetworkConfig, check_network_config

DEFAULT_ETCD_PREFIX = "/coreos.com/network"

_SAFE_PATH = re.compile(r"/[A-Za-z0-9._@+/-]*")
_NODE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


class ClusterModelError(ValueError):
    """Invalid cluster model; ``problems`` holds one ``<path>: <message>`` line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# --- field types ------------------------------------------------------------------------------


def _single_line(value: str) -> str:
    # These strings end up in KEY=VALUE files and unit files, where a line break would inject.
    if any(ch in value for ch in "\n\r\0"):
        raise ValueError("must be a single line of text")
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _absolute_path(value: str) -> str:
    _single_line(value)
    # Also safe unquoted in unit files: no spaces, no systemd % specifiers.
    if not _SAFE_PATH.fullmatch(value) or posixpath.normpath(value) != value:
        raise ValueError(f"{value!r} must be a normalized absolute path of [A-Za-z0-9._@+-/]")
    return value


# The parsers are module functions bound with partial, not closures: a closure is made once at
# import time, so no test run could tell a changed one apart (scripts/mutation).
def _parse_network(value: Any, version: int) -> Any:
    if isinstance(value, IPv4Network | IPv6Network):
        return value
    try:
        address = ipaddress.ip_interface(value) if "/" in str(value) else None
    except ValueError:
        address = None
    if not isinstance(value, str) or address is None or address.version != version:
        raise ValueError(f"{value!r} is not an IPv{version} CIDR")
    if address.ip != address.network.network_address:
        raise ValueError(f"{value} has host bits set (did you mean {address.network}?)")
    return address.network


def _network(version: int) -> BeforeValidator:
    return BeforeValidator(functools.partial(_parse_network, version=version))


def _parse_address(value: Any, version: int | None) -> Any:
    if isinstance(value, IPv4Address | IPv6Address):
        return value
    try:
        address = ipaddress.ip_address(value) if isinstance(value, str) else None
    except ValueError:
        address = None
    if address is None or version not in (None, address.version):
        kind = "an IP address" if version is None else f"an IPv{version} address"
        raise ValueError(f"{value!r} is not {kind}")
    return address


def _address(version: int | None) -> BeforeValidator:
    return BeforeValidator(functools.partial(_parse_address, version=version))


def _runtime_file(value: str) -> str:
    # The service may write only below /run (ProtectSystem=strict + RuntimeDirectory=).
    _absolute_path(value)
    if not value.startswith("/run/") or posixpath.dirname(value) == "/run":
        raise ValueError(f"{value!r} must be in a directory below /run/, e.g. /run/flannel/")
    return value


def _endpoint(value: str) -> str:
    _single_line(value)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or "," in value:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


def _regexp(value: str) -> str:
    _single_line(value)
    try:
        re.compile(value)
    except re.error as err:
        raise ValueError(f"{value!r} is not a valid regular expression: {err}") from None
    return value


# flannel_cni_delegate_extra is copied into the conflist the container runtime reads, and into
# the flannel plugin's stdin (two levels down, in "delegate") on every pod operation. Plugin
# options are flat or nest a level or two, and a whole conflist is under 1 KiB; these bounds
# leave room for any plugin and keep that stdin far inside the gojson core's limits.
DELEGATE_EXTRA_MAX_DEPTH = 16
DELEGATE_EXTRA_MAX_BYTES = 64 * 1024
_MAX_INT_BITS = 14_000  # str() of a larger int exceeds Python's 4300-digit conversion limit


def _json_scalar_size(value: Any) -> int:
    if isinstance(value, str):
        return len(json.encoder.encode_basestring(value).encode("utf-8", "surrogatepass"))
    if isinstance(value, bool) or value is None:
        return 4 if value in (True, None) else 5
    if isinstance(value, int):
        if value.bit_length() >= _MAX_INT_BITS:
            raise ValueError("an integer is too large to write out")
        return len(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value} is not a JSON number")
    return len(str(value))  # floats; other types are refused by the type check that follows


def _bounded_json(value: Any) -> Any:
    """Refuse a value that encodes deeper than DELEGATE_EXTRA_MAX_DEPTH or longer than
    DELEGATE_EXTRA_MAX_BYTES of compact JSON. The walk uses an explicit stack and stops at the
    first excess: YAML aliases build values that are small in memory and huge when encoded."""
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > DELEGATE_EXTRA_MAX_DEPTH:
                raise ValueError(f"nests deeper than {DELEGATE_EXTRA_MAX_DEPTH} levels")
            size += 1 + max(len(item), 1) + (len(item) if isinstance(item, Mapping) else 0)
            if size <= DELEGATE_EXTRA_MAX_BYTES:
                if isinstance(item, Mapping):
                    size += sum(_json_scalar_size(key) for key in item)
                    item = item.values()
                stack.extend((child, depth + 1) for child in item)
        else:
            size += _json_scalar_size(item)
        if size > DELEGATE_EXTRA_MAX_BYTES:
            raise ValueError(f"larger than {DELEGATE_EXTRA_MAX_BYTES} bytes as JSON")
    return value


Text = Annotated[str, AfterValidator(_single_line)]
AbsPath = Annotated[str, AfterValidator(_absolute_path)]
RuntimeFile = Annotated[str, AfterValidator(_runtime_file)]
V4Net = Annotated[IPv4Network, _network(4)]
V6Net = Annotated[IPv6Network, _network(6)]
Regexp = Annotated[str, AfterValidator(_regexp)]
V4Addr = Annotated[IPv4Address, _address(4)]
V6Addr = Annotated[IPv6Address, _address(6)]
AnyAddress = Annotated[IPv4Address | IPv6Address, _address(None)]
Endpoint = Annotated[str, AfterValidator(_endpoint)]
Mtu = Annotated[StrictInt, Field(ge=576, le=65535)]
DelegateExtra = Annotated[dict[str, JsonValue], BeforeValidator(_bounded_json)]


def _known_backend(value: Any) -> Any:
    if not isinstance(value, str) or value not in registry.BACKENDS:
        known = [repr(name) for name in registry.names()]
        choices = f"{', '.join(known[:-1])} or {known[-1]}" if len(known) > 1 else known[0]
        raise PydanticCustomError("literal_error", f"Input should be {choices}")
    return value


def _option_range(option: Option) -> Any:
    """The range the backend accepts (a default the option's 0 may stand for is the setting
    left out here)."""
    return Field(ge=option.minimum, le=option.maximum)


BackendType = Annotated[
    str,
    BeforeValidator(_known_backend),
    WithJsonSchema({"type": "string", "enum": list(registry.names())}),
]
VxlanVni = Annotated[StrictInt, _option_range(VxlanOptions.option("VNI"))]
VxlanPort = Annotated[StrictInt, _option_range(VxlanOptions.option("Port"))]
VxlanMtu = Annotated[StrictInt, _option_range(VxlanOptions.option("MTU"))]
UdpPort = Annotated[StrictInt, _option_range(UdpOptions.option("Port"))]


def _offload_mode(value: Any) -> Any:
    # YAML 1.1 (Ansible's inventories) reads a bare on/off as a boolean.
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


TxChecksumOffload = Annotated[
    Literal["on", "off", "auto"],
    BeforeValidator(_offload_mode),
    WithJsonSchema({"type": "string", "enum": list(tx_offload.MODES)}),
]


class NodeOverrides(BaseModel):
    """What one node sets differently from the cluster, plus what is known about it ahead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interface: Text | None = None
    interface_regexp: Regexp | None = None
    interface_can_reach: AnyAddress | None = None
    public_ip: V4Addr | None = None
    public_ipv6: V6Addr | None = None
    # A pinned lease: an etcd reservation, or the podCIDR the controller assigns (kube mode).
    subnet: V4Net | None = None
    ipv6_subnet: V6Net | None = None
    # The MTU of the node's external interface, when it is not the assumed 1500.
    mtu: Mtu | None = None


class ClusterModel(BaseModel):
    """Cluster-wide flannel settings and per-node overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # backend (kubespray names)
    flannel_backend_type: BackendType = "vxlan"
    flannel_vxlan_vni: VxlanVni | None = None
    flannel_vxlan_port: VxlanPort | None = None
    flannel_vxlan_direct_routing: StrictBool | None = None
    flannel_udp_port: UdpPort | None = None
    # Backend.MTU: the underlay MTU the vxlan device is sized from (flannel subtracts 50).
    flannel_mtu: VxlanMtu | None = None
    # pyflanneld's --vxlan-tx-checksum-offload (not a net-conf option: flanneld has none).
    flannel_vxlan_tx_checksum_offload: TxChecksumOffload = "on"  # tx_offload.DEFAULT_MODE

    # interface selection and public addresses (cluster defaults; nodes may override)
    flannel_interface: Text | None = None
    flannel_interface_regexp: Regexp | None = None
    flannel_interface_can_reach: AnyAddress | None = None
    flannel_public_ip: V4Addr | None = None
    flannel_public_ipv6: V6Addr | None = None

    # the pod network (net-conf.json)
    flannel_enable_ipv4: StrictBool = True
    flannel_network: V4Net = IPv4Network("10.244.0.0/16")
    flannel_subnet_len: Annotated[StrictInt, Field(ge=1)] | None = None
    flannel_subnet_min: V4Addr | None = None
    flannel_subnet_max: V4Addr | None = None
    flannel_enable_ipv6: StrictBool = False
    flannel_ipv6_network: V6Net | None = None
    flannel_ipv6_subnet_len: Annotated[StrictInt, Field(ge=1)] | None = None
    flannel_enable_nftables: StrictBool = False

    # agent behaviour (flanneld flags)
    flannel_ip_masq: StrictBool = True
    flannel_iptables_forward_rules: StrictBool = True
    flannel_iptables_resync: Annotated[StrictInt, Field(ge=1)] = 5
    flannel_ip_blackhole_route: StrictBool = False
    flannel_subnet_file: RuntimeFile = DEFAULT_SUBNET_FILE
    flannel_net_conf_path: AbsPath = "/etc/kube-flannel/net-conf.json"
    flannel_healthz_ip: AnyAddress = IPv4Address("0.0.0.0")
    flannel_healthz_port: Annotated[StrictInt, Field(ge=0, le=65535)] = 8081

    # datastore
    flannel_datastore: Literal["kubernetes", "etcd"] = "kubernetes"
    flannel_kubeconfig_file: AbsPath | None = None
    flannel_etcd_endpoints: list[Endpoint] | None = Field(default=None, min_length=1)
    flannel_etcd_prefix: AbsPath = DEFAULT_ETCD_PREFIX
    flannel_etcd_cafile: AbsPath | None = None
    flannel_etcd_certfile: AbsPath | None = None
    flannel_etcd_keyfile: AbsPath | None = None
    flannel_etcd_username: Text | None = None
    flannel_etcd_password: SecretStr | None = None
    flannel_subnet_lease_renew_margin: Annotated[StrictInt, Field(ge=1, le=1439)] = 60

    # CNI (the conflist)
    flannel_cni_conf_dir: AbsPath = "/etc/cni/net.d"
    flannel_cni_conf_file: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+\.conflist$")] = (
        "10-flannel.conflist"
    )
    flannel_cni_network_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] = (
        "cbr0"
    )
    flannel_cni_version: Literal["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] = "0.3.1"
    flannel_hairpin_mode: StrictBool = True
    flannel_is_default_gateway: StrictBool = True
    flannel_cni_delegate_extra: DelegateExtra = Field(default_factory=dict)
    flannel_portmap_enabled: StrictBool = True

    # the systemd service
    flannel_agent_venv: AbsPath = "/opt/pyflannel/venv"
    flannel_agent_restart_sec: Annotated[StrictInt, Field(ge=1)] = 5

    nodes: dict[str, NodeOverrides] = Field(default_factory=dict)

    @field_validator("flannel_etcd_password", mode="after")
    @classmethod
    def _password_single_line(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _single_line(value.get_secret_value())
        return value

    @field_validator("nodes", mode="before")
    @classmethod
    def _bare_node_names(cls, value: Any) -> Any:
        # In YAML a node without overrides is naturally written as `node1:` (null).
        if isinstance(value, Mapping):
            return {name: {} if spec is None else spec for name, spec in value.items()}
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ClusterModel:
        problems = _cross_field_problems(self)
        if problems:
            raise PydanticCustomError(
                "cluster_rules", "{problems}", {"problems": "\n".join(problems)}
            )
        return self

    def to_network_config(self) -> NetworkConfig:
        """The net-conf this model stands for, as flannel would decode it (not yet checked)."""
        return NetworkConfig(
            enable_ipv4=self.flannel_enable_ipv4,
            enable_ipv6=self.flannel_enable_ipv6,
            enable_nftables=self.flannel_enable_nftables,
            network=self.flannel_network if self.flannel_enable_ipv4 else None,
            ipv6_network=self.flannel_ipv6_network if self.flannel_enable_ipv6 else None,
            subnet_len=self.flannel_subnet_len or 0,
            subnet_min=self.flannel_subnet_min,
            subnet_max=self.flannel_subnet_max,
            ipv6_subnet_len=self.flannel_ipv6_subnet_len or 0,
            backend_type=self.flannel_backend_type,
            backend=self.backend_options(),
        )

    def backend_options(self) -> dict[str, Any]:
        """net-conf's Backend object, in the order it is rendered; only what was set."""
        settings = {name: getattr(self, name) for name in BACKEND_SETTINGS}
        return backend_options({"flannel_backend_type": self.flannel_backend_type, **settings})


def backend_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """net-conf's Backend object for cluster settings (a model's dump, as the collection's
    facts carry it): the backend's own options, in rendering order; only what was set."""
    backend_type = settings["flannel_backend_type"]
    options: dict[str, Any] = {"Type": backend_type}
    for setting, (backend, key) in BACKEND_SETTINGS.items():
        value = settings.get(setting)
        if backend == backend_type and value is not None:
            options[key] = value
    return options


# --- cross-field rules ------------------------------------------------------------------------

# The settings that are a backend's option in net-conf (kubespray's names), in rendering order.
BACKEND_SETTINGS = {
    "flannel_vxlan_vni": ("vxlan", "VNI"),
    "flannel_vxlan_port": ("vxlan", "Port"),
    "flannel_mtu": ("vxlan", "MTU"),
    "flannel_vxlan_direct_routing": ("vxlan", "DirectRouting"),
    "flannel_udp_port": ("udp", "Port"),
}
# Settings for one backend that are the agent's flags rather than net-conf options.
AGENT_BACKEND_SETTINGS = {"flannel_vxlan_tx_checksum_offload": "vxlan"}
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


def _backend_problems(m: ClusterModel) -> list[str]:
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
        and getattr(m, setting) != ClusterModel.model_fields[setting].default
    ]
    if m.flannel_enable_ipv6 and not registry.get(backend).dual_stack:
        problems.append(f"flannel_enable_ipv6: the {backend} backend carries IPv4 only")
    return problems


def _datastore_problems(m: ClusterModel) -> list[str]:
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


def _sandbox_problems(m: ClusterModel) -> list[str]:
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


def _network_problems(m: ClusterModel) -> list[str]:
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


def _node_problems(m: ClusterModel) -> list[str]:
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


def _cni_problems(m: ClusterModel) -> list[str]:
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


def _cross_field_problems(m: ClusterModel) -> list[str]:
    return [
        *_backend_problems(m),
        *_datastore_problems(m),
        *_sandbox_problems(m),
        *_network_problems(m),
        *_node_problems(m),
        *_cni_problems(m),
    ]


# --- loading ----------------------------------------------------------------------------------


def _field_names_at(loc: tuple[int | str, ...]) -> list[str]:
    if len(loc) == 1:
        return list(ClusterModel.model_fields)
    if len(loc) == 3 and loc[0] == "nodes":
        return list(NodeOverrides.model_fields)
    return []


def _describe(error: Mapping[str, Any]) -> list[str]:
    loc: tuple[int | str, ...] = tuple(error["loc"])
    path = ".".join(str(part) for part in loc)
    if error["type"] == "cluster_rules":
        return str(error["ctx"]["problems"]).splitlines()
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
        close = difflib.get_close_matches(str(loc[-1]), _field_names_at(loc), n=1)
        if close:
            message += f" (did you mean {close[0]}?)"
    else:
        message = str(error["msg"]).removeprefix("Value error, ")
    return [f"{path}: {message}" if path else message]


def load_model(data: Any) -> ClusterModel:
    """Validate a decoded model file; raises ClusterModelError naming every bad field."""
    if not isinstance(data, Mapping):
        raise ClusterModelError(["the cluster model must be a mapping of settings"])
    try:
        return ClusterModel.model_validate(data)
    except ValidationError as err:
        problems = [line for e in err.errors() for line in _describe(e)]
        raise ClusterModelError(problems) from None
