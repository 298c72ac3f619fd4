"""subnet.env: flanneld's writer, flanneld's lenient reader and the CNI plugin's strict reader.

Standard library only: the CNI plugin imports this module on every pod start.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

_MAX_UINT32 = 2**32 - 1


def _first_host(network: IPv4Network | IPv6Network) -> str:
    """flannel writes the lease's network address plus one, keeping the prefix length."""
    return f"{network.network_address + 1}/{network.prefixlen}"


@dataclass(frozen=True)
class SubnetEnv:
    """What flanneld writes to subnet.env; ``subnet`` is the lease network, not the gateway."""

    network: IPv4Network | None
    subnet: IPv4Network | None
    ipv6_network: IPv6Network | None
    ipv6_subnet: IPv6Network | None
    mtu: int
    ipmasq: bool

    def render(self) -> str:
        lines: list[str] = []
        if self.network is not None and self.subnet is not None:
            lines.append(f"FLANNEL_NETWORK={self.network}")
            lines.append(f"FLANNEL_SUBNET={_first_host(self.subnet)}")
        if self.ipv6_network is not None and self.ipv6_subnet is not None:
            lines.append(f"FLANNEL_IPV6_NETWORK={self.ipv6_network}")
            lines.append(f"FLANNEL_IPV6_SUBNET={_first_host(self.ipv6_subnet)}")
        lines.append(f"FLANNEL_MTU={self.mtu}")
        lines.append(f"FLANNEL_IPMASQ={'true' if self.ipmasq else 'false'}")
        return "".join(line + "\n" for line in lines)


# --- flanneld's reader (godotenv): lenient about quotes, comments and `export` -------------


@dataclass(frozen=True)
class PreviousSubnets:
    """The networks a previous flanneld run recorded; each masked, None when unusable."""

    network: IPv4Network | None = None
    subnet: IPv4Network | None = None
    ipv6_network: IPv6Network | None = None
    ipv6_subnet: IPv6Network | None = None


def parse_dotenv(text: str) -> dict[str, str]:
    """A godotenv-compatible subset: `export`, comments, single/double quotes, `=` or `:`."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            continue
        key, value = line[:sep].strip(), line[sep + 1 :].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif "#" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def _single_cidr(value: str | None, version: int) -> IPv4Network | IPv6Network | None:
    """flannel keeps the value only when exactly one comma-separated element parses."""
    if not value:
        return None
    parsed = []
    for element in value.split(","):
        try:
            net = _go_parse_cidr(element.strip())
        except SubnetEnvError:
            continue
        if net.version == version:
            parsed.append(net)
    return parsed[0] if len(parsed) == 1 else None


def read_previous_subnets(text: str) -> PreviousSubnets:
    values = parse_dotenv(text)
    network = _single_cidr(values.get("FLANNEL_NETWORK"), 4)
    subnet = _single_cidr(values.get("FLANNEL_SUBNET"), 4)
    ipv6_network = _single_cidr(values.get("FLANNEL_IPV6_NETWORK"), 6)
    ipv6_subnet = _single_cidr(values.get("FLANNEL_IPV6_SUBNET"), 6)
    assert network is None or isinstance(network, IPv4Network)
    assert subnet is None or isinstance(subnet, IPv4Network)
    assert ipv6_network is None or isinstance(ipv6_network, IPv6Network)
    assert ipv6_subnet is None or isinstance(ipv6_subnet, IPv6Network)
    return PreviousSubnets(network, subnet, ipv6_network, ipv6_subnet)


# --- the CNI plugin's reader: strict KEY=VALUE, nothing else ----------------------------------


class SubnetEnvError(ValueError):
    pass


@dataclass(frozen=True)
class CniSubnetEnv:
    networks: list[IPv4Network]
    subnet: IPv4Network | None
    ipv6_networks: list[IPv6Network]
    ipv6_subnet: IPv6Network | None
    mtu: int
    ipmasq: bool


def _go_parse_cidr(value: str) -> IPv4Network | IPv6Network:
    """Go's net.ParseCIDR: address/prefix required, host bits masked, error text kept."""
    if "/" not in value:
        raise SubnetEnvError(f"invalid CIDR address: {value}")
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise SubnetEnvError(f"invalid CIDR address: {value}") from None


def _cidr_list(value: str) -> list[IPv4Network | IPv6Network]:
    networks: list[IPv4Network | IPv6Network] = []
    for element in value.split(","):
        net = _go_parse_cidr(element)
        if net not in networks:
            networks.append(net)
    return networks


def parse_cni_subnet_env(text: str, path: str) -> CniSubnetEnv:
    networks: list[IPv4Network] = []
    ipv6_networks: list[IPv6Network] = []
    subnet: IPv4Network | None = None
    ipv6_subnet: IPv6Network | None = None
    mtu: int | None = None
    ipmasq: bool | None = None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "FLANNEL_NETWORK":
            networks = [n for n in _cidr_list(value) if isinstance(n, IPv4Network)]
        elif key == "FLANNEL_IPV6_NETWORK":
            ipv6_networks = [n for n in _cidr_list(value) if isinstance(n, IPv6Network)]
        elif key == "FLANNEL_SUBNET":
            net = _go_parse_cidr(value)
            subnet = net if isinstance(net, IPv4Network) else None
        elif key == "FLANNEL_IPV6_SUBNET":
            net6 = _go_parse_cidr(value)
            ipv6_subnet = net6 if isinstance(net6, IPv6Network) else None
        elif key == "FLANNEL_MTU":
            if not value.isdigit() or int(value) > _MAX_UINT32:
                raise SubnetEnvError(f'strconv.ParseUint: parsing "{value}": invalid syntax')
            mtu = int(value)
        elif key == "FLANNEL_IPMASQ":
            ipmasq = value == "true"

    missing = []
    if not networks and not ipv6_networks:
        missing += ["FLANNEL_NETWORK", "FLANNEL_IPV6_NETWORK"]
    if subnet is None and ipv6_subnet is None:
        missing += ["FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET"]
    if mtu is None:
        missing.append("FLANNEL_MTU")
    if ipmasq is None:
        missing.append("FLANNEL_IPMASQ")
    if missing:
        raise SubnetEnvError(f"{path} is missing {', '.join(missing)}")
    assert mtu is not None and ipmasq is not None
    return CniSubnetEnv(networks, subnet, ipv6_networks, ipv6_subnet, mtu, ipmasq)
