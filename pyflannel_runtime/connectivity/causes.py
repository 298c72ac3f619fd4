"""The most likely cause of a failed scenario, from what the nodes at its ends can see. Pure.

A node's view (``NodeView``) gathers what the verify role already knows about it: the agent's
state and the entries the routes module found missing (its report), the MTUs of the flannel
devices and subnet.env, and what the suite's setup read: the probe pod's MTU, the firewall
(a FORWARD policy that drops, flannel's forward and masquerade rules), the vxlan device's tx
checksum offload, and the checksum errors the node's pods and host counted during the suite.

Causes are tried from the most fundamental down: an agent that is down explains everything
after it, a missing route explains a lost packet better than a firewall policy does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_interface
from typing import Any

from pyflannel_runtime.connectivity.firewall_facts import FirewallFacts
from pyflannel_runtime.connectivity.scenarios import BY_NAME, Kind, Row

# Where packets of each scenario are forwarded (and so meet the FORWARD chain): at the node
# that sends them ("source"), at the node that receives them ("target"), or both.
_FORWARDED_AT = {
    "pod-icmp-local": ("source",),  # bridged; br_netfilter hands it to FORWARD
    "pod-tcp-local": ("source",),
    "pod-udp-local": ("source",),
    "pod-icmp": ("source", "target"),
    "pod-tcp": ("source", "target"),
    "pod-udp": ("source", "target"),
    "mtu": ("source", "target"),
    "udp-checksum": ("source", "target"),
    "pod-host": ("source",),
    "host-pod": ("target",),
    "pod-outside": ("source",),
}
_MASQUERADED = ("pod-host", "pod-outside")
_SIZED = ("mtu", "pod-tcp", "pod-udp", "udp-checksum")


@dataclass(frozen=True)
class NodeView:
    name: str
    agent: str = ""  # ready, not ready, down, not checked ("" unknown)
    subnet: str = ""  # the node's lease, e.g. 10.244.1.0/24
    public_ip: str = ""
    flannel_mtu: int | None = None  # subnet.env's FLANNEL_MTU
    pod_mtu: int | None = None  # the probe pod's eth0
    device_mtu_problems: tuple[str, ...] = ()  # "flannel.1 has MTU 1400, expected 1450"
    missing: tuple[str, ...] = ()  # entries missing on the node and not repaired
    ip_masq: bool | None = None  # subnet.env's FLANNEL_IPMASQ
    forward_rules_setting: bool | None = None  # flannel_iptables_forward_rules
    firewall: FirewallFacts = field(default_factory=lambda: FirewallFacts(readable=False))
    offload_device: str = ""
    offload_enabled: bool | None = None
    offload_mode: str = ""
    csum_errors: Mapping[str, int] = field(default_factory=dict)  # "pod"/"host" -> count

    def missing_for(self, peer: NodeView) -> list[str]:
        """The entries this node lacks for the peer (naming its subnet or address)."""
        keys = [k for k in (_network_address(peer.subnet), peer.public_ip) if k]
        return [e for e in self.missing if any(f" {k}" in f" {e} " or f"{k}/" in e for k in keys)]


def _network_address(subnet: str) -> str:
    return subnet.split("/")[0] if subnet else ""


def likely_cause(row: Row, nodes: Mapping[str, NodeView]) -> str:
    """One line: what most likely made this row fail."""
    scenario = BY_NAME[row.scenario]
    source = nodes.get(row.source) or NodeView(row.source)
    target = nodes.get(row.target) if scenario.kind is Kind.PAIR else None
    ends = [node for node in (source, target) if node is not None]
    for find in (_agent, _missing_entries, _checksums, _forward_policy, _masquerade, _mtu):
        cause = find(row, source, target, ends)
        if cause:
            return cause
    return _unexplained(row)


def _agent(row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]) -> str:
    for node in ends:
        if node.agent in ("down", "not ready"):
            return f"the agent on {node.name} is {node.agent}"
    return ""


def _missing_entries(
    row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]
) -> str:
    if target is None:
        return ""
    for node, peer in ((source, target), (target, source)):
        entries = node.missing_for(peer)
        if entries:
            more = f" (and {len(entries) - 1} more)" if len(entries) > 1 else ""
            return (
                f"{node.name} lacks the route, neighbour or FDB entry for {peer.name}'s subnet "
                f"{peer.subnet}: {entries[0]}{more}"
            )
    return ""


def _checksums(
    row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]
) -> str:
    """Checksum errors at the receiving end of the row's datagrams: the burst's own count, else
    what either end's pods or host counted during the suite (at the target: the row's requests
    broke, so the source sent them; at the source: the replies broke)."""
    sender: NodeView | None = None
    if (
        row.data.get("pod_csum_errors")
        or row.data.get("host_csum_errors")
        or (target is not None and _counted(target))
    ):
        sender = source
    elif target is not None and _counted(source):
        sender = target
    elif target is None and _counted(source):
        sender = source
    if sender is None:
        return ""
    return (
        f"UDP from {sender.name} arrives with bad checksums (the receivers count "
        f"UdpInCsumErrors): {_offload_hint(sender)}"
    )


def _counted(node: NodeView) -> bool:
    return any(node.csum_errors.values())


def _offload_hint(sender: NodeView) -> str:
    if not sender.offload_device:
        return "something on the path damages the datagrams"
    state = {True: "on", False: "off", None: "in an unknown state"}[sender.offload_enabled]
    text = f"{sender.name}'s {sender.offload_device} sends with tx checksum offload {state}"
    if sender.offload_enabled is not False:
        return (
            f"{text}, the VXLAN checksum offload fault (flannel #1279): set "
            "flannel_vxlan_tx_checksum_offload: off (or auto)"
        )
    return f"{text}: something else on the path damages them"


def _forward_policy(
    row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]
) -> str:
    at = _FORWARDED_AT.get(row.scenario, ())
    for role, node in (("source", source), ("target", target)):
        if node is None or role not in at or not node.firewall.forward_drop:
            continue
        if node.firewall.forward_rules:
            continue
        chain = node.firewall.forward_drop[0]
        off = (
            " (flannel_iptables_forward_rules: false)"
            if node.forward_rules_setting is False
            else " (FLANNEL-FWD is missing)"
        )
        return (
            f"{node.name}: the FORWARD policy is DROP ({chain}) and flannel's forward rules "
            f"are off{off}"
        )
    return ""


def _masquerade(
    row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]
) -> str:
    if row.scenario not in _MASQUERADED:
        return ""
    if source.ip_masq is False:
        return (
            f"{source.name} does not masquerade pod traffic (FLANNEL_IPMASQ=false: flannel_ip_masq)"
        )
    if source.firewall.readable and not source.firewall.masquerade:
        return f"{source.name}'s masquerade rules are missing (FLANNEL-POSTRTG)"
    if row.data.get("unmasqueraded"):
        return f"{source.name} sent pod traffic out with the pod's address: not masqueraded"
    return ""


def _mtu(row: Row, source: NodeView, target: NodeView | None, ends: Sequence[NodeView]) -> str:
    if row.scenario not in _SIZED:
        return ""
    for node in ends:
        if node.device_mtu_problems:
            return f"{node.name}: {node.device_mtu_problems[0]} (the lease's MTU)"
        if node.pod_mtu and node.flannel_mtu and node.pod_mtu != node.flannel_mtu:
            return (
                f"{node.name}'s probe pod has MTU {node.pod_mtu}, the lease's FLANNEL_MTU is "
                f"{node.flannel_mtu}"
            )
    path = row.data.get("too_big")
    if path and source.pod_mtu and int(path) < source.pod_mtu:
        sender = row.data.get("too_big_from") or "the sending kernel"
        return (
            f"the path from {row.source} to {row.target} carries {path} bytes ({sender} said "
            f"so), less than the pod MTU {source.pod_mtu}: the underlay MTU is smaller than "
            "flannel assumes (flannel_mtu / flannel_node_mtu)"
        )
    if row.scenario == "mtu" and row.data.get("black_hole"):
        return (
            f"packets above {row.data['black_hole']} bytes vanish between {row.source} and "
            f"{row.target} without a frag needed: an MTU black hole on the underlay"
        )
    return ""


def _unexplained(row: Row) -> str:
    return "nothing the nodes can see explains it (agents ready, entries, firewall and MTU as expected)"


def view_of(
    name: str,
    routes: Mapping[str, Any] | None,
    setup: Mapping[str, Any] | None,
    run: Mapping[str, Any] | None,
    settings: Mapping[str, Any] | None,
) -> NodeView:
    """A node's view from what the verify role registered on it: the routes module's report,
    the suite's setup and run results, the cluster settings."""
    routes, setup, run, settings = routes or {}, setup or {}, run or {}, settings or {}
    env = routes.get("subnet_env") or {}
    offload = run.get("offload") or setup.get("offload") or {}
    return NodeView(
        name=name,
        agent=str((routes.get("agent") or {}).get("state", "")),
        subnet=_lease_subnet(env.get("FLANNEL_SUBNET", "")),
        public_ip=str(setup.get("host", {}).get("address") or ""),
        flannel_mtu=_int(env.get("FLANNEL_MTU")),
        pod_mtu=_int(setup.get("pod_mtu")),
        device_mtu_problems=tuple(
            f"{m['device']} has MTU {m['actual']}, expected {m['expected']}"
            for m in routes.get("mtus") or ()
            if m.get("expected") is not None and m.get("actual") != m.get("expected")
        ),
        missing=tuple(routes.get("missing") or ()) if not routes.get("writes") else (),
        ip_masq={"true": True, "false": False}.get(str(env.get("FLANNEL_IPMASQ", "")).lower()),
        forward_rules_setting=settings.get("flannel_iptables_forward_rules"),
        firewall=FirewallFacts.of(setup.get("firewall")),
        offload_device=str(offload.get("device") or ""),
        offload_enabled=offload.get("enabled"),
        offload_mode=str(offload.get("mode") or ""),
        csum_errors=dict(run.get("csum_errors") or {}),
    )


def _lease_subnet(flannel_subnet: str) -> str:
    """subnet.env's FLANNEL_SUBNET (the gateway, network+1) as the lease's network."""
    try:
        return str(ip_interface(flannel_subnet).network) if flannel_subnet else ""
    except ValueError:
        return ""


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
