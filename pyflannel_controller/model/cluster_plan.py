"""The per-node plan derived from a cluster model: what each node will run with, and the
cross-node rules (pinned subnets that fit and do not overlap, distinct public IPs, a pod MTU the
family allows) that only the nodes together can break.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

from pyflannel_controller.model.cluster import ClusterModel, ClusterModelError
from pyflannel_controller.model.cluster_settings import NodeOverrides
from pyflannel_runtime.backend_spec import specs
from pyflannel_runtime.wire.netconf import NetworkConfig, check_network_config

ASSUMED_INTERFACE_MTU = 1500
_MIN_MTU_IPV4 = 68
_MIN_MTU_IPV6 = 1280


class PlanError(ClusterModelError):
    """The model is well-formed but the nodes do not fit together."""


@dataclass(frozen=True)
class NodePlan:
    """What one node will run with; ``mtu`` is the FLANNEL_MTU flanneld should report."""

    name: str
    interface: str | None
    interface_regexp: str | None
    interface_can_reach: IPv4Address | IPv6Address | None
    public_ip: IPv4Address | None
    public_ipv6: IPv6Address | None
    subnet: IPv4Network | None
    ipv6_subnet: IPv6Network | None
    interface_mtu: int
    mtu: int


@dataclass(frozen=True)
class ClusterPlan:
    network_config: NetworkConfig  # checked: SubnetLen, SubnetMin and SubnetMax filled in
    nodes: tuple[NodePlan, ...]  # sorted by name

    def node(self, name: str) -> NodePlan:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise PlanError([f"nodes.{name}: not in the cluster model (nodes: {known})"])


def _expected_mtu(m: ClusterModel, name: str, node: NodeOverrides) -> tuple[int, int, list[str]]:
    interface_mtu = node.mtu or ASSUMED_INTERFACE_MTU
    problems: list[str] = []
    if m.flannel_mtu is not None and node.mtu is not None and m.flannel_mtu > node.mtu:
        problems.append(f"nodes.{name}.mtu: {node.mtu} is smaller than flannel_mtu {m.flannel_mtu}")
    options = specs.get(m.flannel_backend_type).options.decode(m.backend_options())
    mtu = options.device_mtu(interface_mtu)
    minimum, family = (_MIN_MTU_IPV6, "IPv6") if m.flannel_enable_ipv6 else (_MIN_MTU_IPV4, "IPv4")
    if mtu < minimum:
        problems.append(
            f"nodes.{name}: the pod MTU would be {mtu}, below the {family} minimum {minimum}"
        )
    return interface_mtu, mtu, problems


AnyNet = IPv4Network | IPv6Network


def _subnet_problems(
    path: str,
    subnet: AnyNet,
    network: AnyNet,
    subnet_len: int,
    bounds: tuple[int, int] | None,
    len_field: str,
) -> list[str]:
    if not subnet.subnet_of(network):  # type: ignore[arg-type]
        return [f"{path}: {subnet} is not inside the network {network}"]
    problems = []
    if subnet.prefixlen != subnet_len:
        problems.append(f"{path}: {subnet} must be a /{subnet_len} ({len_field})")
    start = int(subnet.network_address)
    if bounds is not None and not bounds[0] <= start <= bounds[1]:
        low, high = (ipaddress.ip_address(b) for b in bounds)
        problems.append(f"{path}: {subnet} is outside SubnetMin..SubnetMax ({low}..{high})")
    return problems


def _overlap_problems(pins: list[tuple[AnyNet, str]]) -> list[str]:
    """Sweep the pinned subnets in address order; each overlap names both nodes."""
    problems: list[str] = []
    ordered = sorted(pins, key=lambda p: (int(p[0].network_address), p[0].prefixlen, p[1]))
    widest: tuple[AnyNet, str] | None = None
    for net, path in ordered:
        if widest is not None and int(net.network_address) <= int(widest[0].broadcast_address):
            problems.append(f"{path}: {net} overlaps {widest[1]} {widest[0]}")
        if widest is None or int(net.broadcast_address) > int(widest[0].broadcast_address):
            widest = (net, path)
    return problems


def _pin_problems(m: ClusterModel, cfg: NetworkConfig) -> list[str]:
    etcd = m.flannel_datastore == "etcd"
    problems: list[str] = []
    families: list[tuple[str, AnyNet | None, int, tuple[int, int] | None, str]] = []
    if cfg.enable_ipv4:
        assert cfg.subnet_min is not None and cfg.subnet_max is not None
        v4_bounds = (int(cfg.subnet_min), int(cfg.subnet_max)) if etcd else None
        families.append(("subnet", cfg.network, cfg.subnet_len, v4_bounds, "flannel_subnet_len"))
    if cfg.enable_ipv6:
        assert cfg.ipv6_subnet_min is not None and cfg.ipv6_subnet_max is not None
        v6_bounds = (int(cfg.ipv6_subnet_min), int(cfg.ipv6_subnet_max)) if etcd else None
        families.append(
            (
                "ipv6_subnet",
                cfg.ipv6_network,
                cfg.ipv6_subnet_len,
                v6_bounds,
                "flannel_ipv6_subnet_len",
            )
        )
    for field, network, subnet_len, bounds, len_field in families:
        assert network is not None
        pins: list[tuple[AnyNet, str]] = []
        for name in sorted(m.nodes):
            node = m.nodes[name]
            subnet: AnyNet | None = getattr(node, field)
            path = f"nodes.{name}.{field}"
            if subnet is None:
                pinned_other = [f for f, *_ in families if getattr(node, f) is not None]
                if pinned_other:
                    problems.append(
                        f"{path}: required too when nodes.{name}.{pinned_other[0]} "
                        "is pinned (the lease holds every enabled family)"
                    )
                continue
            problems += _subnet_problems(path, subnet, network, subnet_len, bounds, len_field)
            pins.append((subnet, path))
        problems += _overlap_problems(pins)
    return problems


def _duplicate_problems(m: ClusterModel, nodes: Sequence[NodePlan]) -> list[str]:
    """Two nodes with one public IP would take over each other's lease in etcd."""
    problems: list[str] = []
    for field in ("public_ip", "public_ipv6"):
        owner: dict[Any, str] = {}
        for node in nodes:
            address = getattr(node, field)
            if address is None:
                continue
            if address not in owner:
                owner[address] = node.name
                continue
            inherited = getattr(m.nodes[node.name], field) is None
            source = f" (inherited from flannel_{field})" if inherited else ""
            problems.append(
                f"nodes.{node.name}.{field}: {address}{source} is also the {field} of "
                f"nodes.{owner[address]}"
            )
    return problems


def plan_cluster(model: ClusterModel) -> ClusterPlan:
    """Per-node facts, the same for the same model whatever order the nodes were listed in."""
    cfg = check_network_config(model.to_network_config())
    problems = _pin_problems(model, cfg)
    nodes: list[NodePlan] = []
    for name in sorted(model.nodes):
        node = model.nodes[name]
        interface_mtu, mtu, mtu_problems = _expected_mtu(model, name, node)
        problems += mtu_problems
        nodes.append(
            NodePlan(
                name=name,
                interface=node.interface or model.flannel_interface,
                interface_regexp=node.interface_regexp or model.flannel_interface_regexp,
                interface_can_reach=node.interface_can_reach or model.flannel_interface_can_reach,
                public_ip=node.public_ip or model.flannel_public_ip,
                public_ipv6=node.public_ipv6 or model.flannel_public_ipv6,
                subnet=node.subnet,
                ipv6_subnet=node.ipv6_subnet,
                interface_mtu=interface_mtu,
                mtu=mtu,
            )
        )
    problems += _duplicate_problems(model, nodes)
    if problems:
        raise PlanError(problems)
    return ClusterPlan(network_config=cfg, nodes=tuple(nodes))
