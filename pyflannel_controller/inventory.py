"""An Ansible inventory's flannel variables, checked through the cluster model before any host
changes.

Each flannel node brings its own effective ``flannel_*`` variables (group_vars, host_vars, extra
vars and the role's defaults, as Ansible resolves them for that host). Cluster-wide settings
must be equal on every node; the per-node ones (interface, public IPs, a pinned subnet, the
underlay MTU) become the model's ``nodes`` entries. Every problem names the host and the
inventory variable, never the model's internal path.

With the nodes' facts (``pyflannel.network.node_facts``), the agent's own interface selection
runs here on the controller, so a missing interface fails with flanneld's message before the
agent is even installed; so do a backend the kernel cannot create and host-gw nodes that do
not share an L2 segment.

With the Kubernetes datastore the agent needs a kubeconfig on every node (a systemd service has
no pod service account): either a file the node already has (kubelet's), checked in the facts,
or ``flannel_kubeconfig_src``, a file on the controller the agent role copies there, read here
through the caller's ``read_source`` and checked to be a kubeconfig the agent can use.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import (
    IPv4Address,
    IPv4Interface,
    IPv4Network,
    IPv6Address,
    IPv6Interface,
    IPv6Network,
    ip_address,
    ip_interface,
)
from typing import Any

from pydantic import SecretStr

from pyflannel_controller.model.cluster import ClusterModel, ClusterModelError, load_model
from pyflannel_controller.model.cluster_plan import ClusterPlan, NodePlan, plan_cluster
from pyflannel_controller.model.model_file import ModelFileError, parse_model_text
from pyflannel_controller.rolling import VARIABLE as RESTART_BATCH
from pyflannel_controller.rolling import BatchSizeError, batch_size
from pyflannel_runtime import PyflannelError
from pyflannel_runtime.netdev.selection import select_on_view
from pyflannel_runtime.netdev.types import (
    ExternalInterface,
    IfAddr,
    InterfaceError,
    IpStack,
    Link,
    RouteHop,
)

# Inventory variable -> the model's per-node field. The first five are also cluster-wide
# settings in the model; here a host's own value always wins, so they are taken per node.
NODE_VARIABLES = {
    "flannel_interface": "interface",
    "flannel_interface_regexp": "interface_regexp",
    "flannel_interface_can_reach": "interface_can_reach",
    "flannel_public_ip": "public_ip",
    "flannel_public_ipv6": "public_ipv6",
    "flannel_node_subnet": "subnet",
    "flannel_node_ipv6_subnet": "ipv6_subnet",
    "flannel_node_mtu": "mtu",
}
_FIELD_VARIABLES = {field: variable for variable, field in NODE_VARIABLES.items()}
CLUSTER_VARIABLES = tuple(
    name for name in ClusterModel.model_fields if name != "nodes" and name not in NODE_VARIABLES
)
# A controller-side kubeconfig the agent role copies to flannel_kubeconfig_file (per host: nodes
# may have credentials of their own). Not a cluster model setting: the model sees only the copy.
KUBECONFIG_SOURCE = "flannel_kubeconfig_src"
# Kubeconfigs are a few KiB; one with embedded certificates well under this.
KUBECONFIG_LIMIT = 1024 * 1024
# A controller path as the roles resolve it -> its bytes (at most KUBECONFIG_LIMIT); OSError.
ReadSource = Callable[[str], bytes]
# Variables the roles once took, with what replaced them (kubespray's removed-variables guard).
REMOVED_VARIABLES = {
    "flannel_reset_flush_iptables": (
        "removed: reset.yml removes flannel's own iptables chains and the jumps into them, "
        "and flushes no table"
    ),
}
_VARIABLE_PREFIX = "flannel_"
_NODE_PATH = re.compile(r"\bnodes\.([A-Za-z0-9._-]+?)(?:\.([a-z_0-9]+))?(?=: | |$|,)")


class InventoryError(PyflannelError, ValueError):
    """The inventory cannot be deployed; ``problems`` holds ``<host>: <variable>: <why>`` lines."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class NodeFacts:
    """What ``pyflannel.network.node_facts`` reported about one host."""

    links: tuple[Link, ...]
    # Each link's addresses with their prefix lengths (Link keeps only address and flags).
    addresses: Mapping[int, tuple[IPv4Interface | IPv6Interface, ...]]
    default_route: Mapping[int, int | None]
    routes: Mapping[str, RouteHop | None]
    backends: Mapping[str, tuple[bool, str]]
    # path -> a regular file on the node (the paths the preflight asked about)
    files: Mapping[str, bool] = field(default_factory=dict)

    @classmethod
    def from_fact(cls, fact: Mapping[str, Any]) -> NodeFacts:
        links = tuple(
            Link(
                name=str(link["name"]),
                index=int(link["index"]),
                mtu=int(link["mtu"]),
                addrs=tuple(
                    IfAddr(ip_address(a["ip"]), int(a.get("flags", 0))) for a in link["addrs"]
                ),
            )
            for link in fact.get("links", ())
        )
        addresses = {
            int(link["index"]): tuple(
                ip_interface(f"{a['ip']}/{a['prefixlen']}") for a in link["addrs"]
            )
            for link in fact.get("links", ())
        }
        routes = {
            str(dst): None if hop is None else RouteHop(int(hop["oif"]), _optional_ip(hop["src"]))
            for dst, hop in (fact.get("routes") or {}).items()
        }
        defaults = fact.get("default_route") or {}
        return cls(
            links=links,
            addresses=addresses,
            default_route={int(v): defaults.get(str(v), defaults.get(v)) for v in (4, 6)},
            routes=routes,
            backends={
                str(name): (bool(probe["supported"]), str(probe.get("reason", "")))
                for name, probe in (fact.get("backends") or {}).items()
            },
            files={str(path): bool(ok) for path, ok in (fact.get("files") or {}).items()},
        )


@dataclass(frozen=True)
class FactsNetView:
    """The NetView protocol (netdev.types) answered from a node's facts."""

    facts: NodeFacts

    def links(self) -> Sequence[Link]:
        return self.facts.links

    def default_route_oif(self, version: int) -> int | None:
        return self.facts.default_route.get(version)

    def route_get(self, ip: IPv4Address | IPv6Address) -> RouteHop | None:
        return self.facts.routes.get(str(ip))


def _optional_ip(text: Any) -> IPv4Address | IPv6Address | None:
    return None if text in (None, "") else ip_address(text)


@dataclass(frozen=True)
class NodeNetwork:
    """The interface flanneld will pick on a node and the network that interface is on."""

    interface: ExternalInterface
    network: IPv4Network | None


@dataclass(frozen=True)
class InventoryPlan:
    model: ClusterModel
    plan: ClusterPlan
    networks: Mapping[str, NodeNetwork]  # only for hosts whose facts were given

    def node(self, host: str) -> NodePlan:
        return self.plan.node(host)


# --- variables -> model -----------------------------------------------------------------------


def _default(name: str) -> Any:
    return ClusterModel.model_fields[name].get_default(call_default_factory=True)


def _is_default(name: str, value: Any) -> bool:
    """A value equal to the model's default is no choice of the user's (role defaults mirror
    the model), so options tied to another setting do not count it as set."""
    default = _default(name)
    if value is None or value == default:
        return True
    if isinstance(default, SecretStr):
        return False
    scalar = (IPv4Address, IPv6Address, IPv4Network, IPv6Network)
    return isinstance(default, scalar) and str(value) == str(default)


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _unknown_problems(
    hosts: Sequence[str], settings: Mapping[str, Mapping[str, Any]], known: Iterable[str]
) -> list[str]:
    accepted = {*CLUSTER_VARIABLES, *NODE_VARIABLES, KUBECONFIG_SOURCE, *known}
    problems = []
    for host in hosts:
        for name in sorted(settings[host]):
            if not name.startswith(_VARIABLE_PREFIX) or name in accepted:
                continue
            if name in REMOVED_VARIABLES:
                problems.append(f"{host}: {name}: {REMOVED_VARIABLES[name]}")
                continue
            message = f"{host}: {name}: unknown variable"
            close = difflib.get_close_matches(name, sorted(accepted), n=1)
            if close:
                message += f" (did you mean {close[0]}?)"
            problems.append(message)
    return problems


def _restart_batch_problems(
    hosts: Sequence[str], settings: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The agent role's batch size where the inventory sets it: a valid one, and the same for
    every host (the roll is one sequence of batches for the play, as ``serial`` is)."""
    problems = []
    for host in hosts:
        if RESTART_BATCH in settings[host]:
            try:
                batch_size(settings[host][RESTART_BATCH], len(hosts))
            except BatchSizeError as err:
                problems.append(f"{host}: {RESTART_BATCH}: {err}")
    if problems:
        return problems
    # -e and INI inventories give strings: 2 and "2" are one value; unset is the default.
    written = {
        host: repr(str(settings[host][RESTART_BATCH]).strip())
        if RESTART_BATCH in settings[host]
        else "the default"
        for host in hosts
    }
    common = Counter(written.values()).most_common(1)[0][0]
    agreeing = ", ".join(h for h in hosts if written[h] == common)
    return [
        f"{host}: {RESTART_BATCH}: {ours} here but {common} on {agreeing}; it must be one value"
        " for every flannel node"
        for host, ours in written.items()
        if ours != common
    ]


def _cluster_settings(
    hosts: Sequence[str], settings: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, Any], list[str]]:
    """The cluster-wide settings every host agrees on; each host that differs is a problem."""
    cluster: dict[str, Any] = {}
    problems: list[str] = []
    for name in CLUSTER_VARIABLES:
        values = {}
        for host in hosts:
            value = settings[host].get(name)
            values[host] = None if _is_default(name, value) else value
        counts = Counter(repr(v) for v in values.values())
        common = counts.most_common(1)[0][0]
        reference = next(v for v in values.values() if repr(v) == common)
        agreeing = [h for h, v in values.items() if repr(v) == common]
        for host, value in values.items():
            if repr(value) != common:
                theirs = "the default" if reference is None else _shown(reference)
                ours = "the default" if value is None else _shown(value)
                problems.append(
                    f"{host}: {name}: {ours} here but {theirs} on {', '.join(agreeing)}; "
                    "cluster-wide settings must be equal on every flannel node"
                )
        if reference is not None:
            cluster[name] = reference
    return cluster, problems


def _node_overrides(settings: Mapping[str, Any], facts: NodeNetwork | None) -> dict[str, Any]:
    overrides = {
        field: settings[name]
        for name, field in NODE_VARIABLES.items()
        if settings.get(name) not in (None, "")
    }
    if "mtu" not in overrides and facts is not None and 576 <= facts.interface.mtu <= 65535:
        overrides["mtu"] = facts.interface.mtu
    return overrides


def _variable_for(field: str | None) -> str:
    if field is None:
        return ""
    return _FIELD_VARIABLES.get(field, field)


def _rewrite_paths(text: str) -> str:
    """``nodes.h1.subnet`` -> ``h1's flannel_node_subnet`` inside a message."""

    def replace(match: re.Match[str]) -> str:
        host, field = match.group(1), match.group(2)
        return f"{host}'s {_variable_for(field)}" if field else host

    return _NODE_PATH.sub(replace, text)


def _attributed(problem: str, hosts: Sequence[str]) -> list[str]:
    """A model problem as ``<host>: <variable>: <why>`` lines (one per host when cluster-wide)."""
    path, sep, message = problem.partition(": ")
    if not sep:
        return [f"{host}: {problem}" for host in hosts]
    parts = path.split(".")
    if parts[0] == "nodes" and len(parts) >= 2:
        host = parts[1]
        variable = _variable_for(parts[2] if len(parts) > 2 else None)
        where = f"{host}: {variable}: " if variable else f"{host}: "
        return [where + _rewrite_paths(message)]
    return [f"{host}: {path}: {_rewrite_paths(message)}" for host in hosts]


# --- facts checks -----------------------------------------------------------------------------


def _stack(model: ClusterModel) -> IpStack:
    return IpStack.from_flags(model.flannel_enable_ipv4, model.flannel_enable_ipv6)


def _select(
    host: str, settings: Mapping[str, Any], facts: NodeFacts, stack: IpStack
) -> tuple[NodeNetwork | None, list[str]]:
    def text(name: str) -> str:
        value = settings.get(name)
        return "" if value in (None, "") else str(value)

    interface, regexp = text("flannel_interface"), text("flannel_interface_regexp")
    variable = (
        "flannel_interface"
        if interface
        else "flannel_interface_regexp"
        if regexp
        else "flannel_interface_can_reach"
        if text("flannel_interface_can_reach")
        else "flannel_public_ip"
        if text("flannel_public_ip")
        else "flannel_interface"
    )
    try:
        chosen = select_on_view(
            FactsNetView(facts),
            [interface] if interface else [],
            [regexp] if regexp else [],
            text("flannel_interface_can_reach"),
            text("flannel_public_ip"),
            text("flannel_public_ipv6"),
            stack,
        )
    except InterfaceError as err:
        names = ", ".join(link.name for link in facts.links) or "none"
        value = text(variable)
        shown = f"{value!r}: " if value else ""
        return None, [f"{host}: {variable}: {shown}{err} (interfaces on {host}: {names})"]
    return NodeNetwork(chosen, _connected_network(facts, chosen)), []


def _connected_network(facts: NodeFacts, chosen: ExternalInterface) -> IPv4Network | None:
    for address in facts.addresses.get(chosen.index, ()):
        if isinstance(address, IPv4Interface) and address.ip == chosen.iface_addr:
            return address.network
    return None


def _backend_problems(host: str, model: ClusterModel, facts: NodeFacts) -> list[str]:
    backend = model.flannel_backend_type
    supported, reason = facts.backends.get(backend, (True, ""))
    if supported:
        return []
    why = f" ({reason})" if reason else ""
    return [
        f"{host}: flannel_backend_type: the kernel of {host} cannot create {backend} devices{why}"
    ]


def _l2_problems(networks: Mapping[str, NodeNetwork]) -> list[str]:
    """host-gw routes each pod subnet via the owner's address: every node must be on-link."""
    problems = []
    for host, mine in sorted(networks.items()):
        address = mine.interface.ext_addr or mine.interface.iface_addr
        for other, theirs in sorted(networks.items()):
            if other == host or address is None or theirs.network is None:
                continue
            if address not in theirs.network:
                problems.append(
                    f"{host}: flannel_backend_type: host-gw needs every node on one L2 segment, "
                    f"but {address} ({host}) is not on {other}'s {theirs.interface.name} "
                    f"network {theirs.network}"
                )
    return problems


# --- the Kubernetes datastore's kubeconfig --------------------------------------------------


def kubeconfig_problem(data: bytes) -> str | None:
    """Why a kubeconfig cannot serve the agent (which uses its current context), or None."""
    try:
        # Bounded as a model file is: the controller reads this file from anywhere.
        config = parse_model_text(data.decode("utf-8"), is_json=False)
    except UnicodeDecodeError:
        return "not a kubeconfig: not UTF-8 text"
    except ModelFileError as err:
        return f"not a kubeconfig: {str(err).splitlines()[0]}"
    if not isinstance(config, Mapping):
        return "not a kubeconfig (not a YAML mapping)"

    def entry(section: str, name: Any) -> Any:
        for item in config.get(section) or ():
            if isinstance(item, Mapping) and item.get("name") == name:
                return item.get(section.removesuffix("s"))
        return None

    current = config.get("current-context")
    context = entry("contexts", current) if current else None
    if not isinstance(context, Mapping):
        named = (
            f"current-context {current!r} is not in contexts" if current else "no current-context"
        )
        return f"not a kubeconfig the agent can use: {named}"
    cluster = entry("clusters", context.get("cluster"))
    if not isinstance(cluster, Mapping) or not cluster.get("server"):
        return (
            f"not a kubeconfig the agent can use: context {current!r} names cluster "
            f"{context.get('cluster')!r}, which is not in clusters or has no server"
        )
    return None


def _source_problem(source: str, read_source: ReadSource) -> str | None:
    try:
        problem = kubeconfig_problem(read_source(source))
    except OSError as err:
        return f"{source!r} cannot be read on the controller: {err}"
    return None if problem is None else f"{source!r}: {problem}"


def _kubeconfig_problems(
    hosts: Sequence[str],
    settings: Mapping[str, Mapping[str, Any]],
    model: ClusterModel,
    facts: Mapping[str, NodeFacts],
    read_source: ReadSource | None,
) -> list[str]:
    problems: list[str] = []
    target = model.flannel_kubeconfig_file
    for host in hosts:
        source = settings[host].get(KUBECONFIG_SOURCE) or None
        if model.flannel_datastore != "kubernetes":
            if source is not None:
                problems.append(
                    f"{host}: {KUBECONFIG_SOURCE}: only used with flannel_datastore kubernetes"
                )
        elif target is None and source is not None:
            problems.append(
                f"{host}: flannel_kubeconfig_file: required when {KUBECONFIG_SOURCE} is set "
                "(where on each node the agent role puts the copy)"
            )
        elif target is None:
            problems.append(
                f"{host}: flannel_kubeconfig_file: required with flannel_datastore kubernetes "
                "(a systemd service has no pod service account): a kubeconfig on each node, "
                f"e.g. kubelet's, or also set {KUBECONFIG_SOURCE} to have one copied there"
            )
        elif source is not None:
            problem = _source_problem(str(source), read_source) if read_source else None
            if problem is not None:
                problems.append(f"{host}: {KUBECONFIG_SOURCE}: {problem}")
        elif host in facts and not facts[host].files.get(target):
            problems.append(
                f"{host}: flannel_kubeconfig_file: {target} is not a file on {host} "
                f"(put one there, or set {KUBECONFIG_SOURCE} to have the agent role copy one)"
            )
    return problems


# --- the whole check --------------------------------------------------------------------------


def check_inventory(
    settings: Mapping[str, Mapping[str, Any]],
    facts: Mapping[str, Mapping[str, Any]] | None = None,
    known_variables: Iterable[str] = (),
    read_source: ReadSource | None = None,
) -> InventoryPlan:
    """Validate every flannel node's variables (and facts, when given) as one cluster.

    ``settings`` maps each host to its ``flannel_*`` variables and ``facts`` the hosts whose
    facts are known (a node that could not be reached has none, so its interface is not
    checked); ``known_variables`` are other ``flannel_*`` names the roles accept (anything
    else is a typo); ``read_source`` reads the controller's files (``flannel_kubeconfig_src``),
    which are not checked without it. Raises InventoryError.
    """
    hosts = sorted(settings)
    if not hosts:
        raise InventoryError(["the flannel nodes group has no hosts"])
    problems = _unknown_problems(hosts, settings, known_variables)
    problems += _restart_batch_problems(hosts, settings)
    cluster, differences = _cluster_settings(hosts, settings)
    problems += differences
    if problems:
        raise InventoryError(problems)

    try:
        model = load_model(cluster)
    except ClusterModelError as err:
        raise InventoryError(
            [line for p in err.problems for line in _attributed(p, hosts)]
        ) from None

    networks: dict[str, NodeNetwork] = {}
    known_facts = {h: NodeFacts.from_fact(facts[h]) for h in hosts if h in facts} if facts else {}
    stack = _stack(model)
    for host, node_facts in known_facts.items():
        problems += _backend_problems(host, model, node_facts)
        network, selection_problems = _select(host, settings[host], node_facts, stack)
        problems += selection_problems
        if network is not None:
            networks[host] = network
    if known_facts and model.flannel_backend_type == "host-gw" and not problems:
        problems += _l2_problems(networks)
    problems += _kubeconfig_problems(hosts, settings, model, known_facts, read_source)

    nodes = {host: _node_overrides(settings[host], networks.get(host)) for host in hosts}
    try:
        model = load_model({**cluster, "nodes": nodes})
        cluster_plan = plan_cluster(model)
    except ClusterModelError as err:
        problems += [line for p in err.problems for line in _attributed(p, hosts)]
    if problems:
        raise InventoryError(problems)
    return InventoryPlan(model, cluster_plan, networks)
