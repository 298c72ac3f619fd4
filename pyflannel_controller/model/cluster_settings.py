"""The cluster model's settings, each field valid on its own: the cluster-wide ones and the
per-node overrides, in kubespray's role-prefixed names where kubespray has them and otherwise
flannel's own key names (``flannel_subnet_len`` for ``SubnetLen``)."""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictInt,
    field_validator,
)

from pyflannel_controller.model.cluster_fields import (
    AbsPath,
    AnyAddress,
    BackendType,
    DelegateExtra,
    Endpoint,
    Mtu,
    Regexp,
    RuntimeFile,
    Text,
    TxChecksumOffload,
    UdpPort,
    V4Addr,
    V4Net,
    V6Addr,
    V6Net,
    VxlanMtu,
    VxlanPort,
    VxlanVni,
    single_line,
)
from pyflannel_runtime import DEFAULT_SUBNET_FILE
from pyflannel_runtime.wire.netconf import NetworkConfig

DEFAULT_ETCD_PREFIX = "/coreos.com/network"

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


class ClusterSettings(BaseModel):
    """Cluster-wide flannel settings and per-node overrides, each field valid on its own (the
    cross-field rules are ``cluster_rules``', applied by ``cluster.ClusterModel``)."""

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
    # pyflanneld's --metrics: /metrics on the health port (flanneld has none).
    flannel_metrics_enabled: StrictBool = True

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
            single_line(value.get_secret_value())
        return value

    @field_validator("nodes", mode="before")
    @classmethod
    def _bare_node_names(cls, value: Any) -> Any:
        # In YAML a node without overrides is naturally written as `node1:` (null).
        if isinstance(value, Mapping):
            return {name: {} if spec is None else spec for name, spec in value.items()}
        return value

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
