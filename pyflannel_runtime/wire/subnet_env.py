"""subnet.env: flanneld's writer, flanneld's lenient reader and the CNI plugin's strict reader.

The CNI plugin imports this module on every pod start, so it keeps to cheap imports: its value
types are small slotted classes (importing dataclasses alone costs ~15 ms there), and its CIDR
parsing uses the C socket functions rather than ipaddress (~8 ms), which only flanneld's own
reader, in the agent, loads.
"""

from __future__ import annotations

from _socket import AF_INET, AF_INET6, inet_ntop, inet_pton

from pyflannel_runtime import PyflannelError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ipaddress import IPv4Network, IPv6Network

_MAX_UINT32 = 2**32 - 1


class _Record:
    """Frozen, comparable and printable, by the names in ``__slots__``."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _init(self, **values: object) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, values[name])

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"


def first_host(network: IPv4Network | IPv6Network) -> str:
    """flannel writes the lease's network address plus one, keeping the prefix length."""
    return f"{network.network_address + 1}/{network.prefixlen}"


class SubnetEnv(_Record):
    """What flanneld writes to subnet.env; ``subnet`` is the lease network, not the gateway."""

    __slots__ = ("ipmasq", "ipv6_network", "ipv6_subnet", "mtu", "network", "subnet")
    network: IPv4Network | None
    subnet: IPv4Network | None
    ipv6_network: IPv6Network | None
    ipv6_subnet: IPv6Network | None
    mtu: int
    ipmasq: bool

    def __init__(
        self,
        network: IPv4Network | None,
        subnet: IPv4Network | None,
        ipv6_network: IPv6Network | None,
        ipv6_subnet: IPv6Network | None,
        mtu: int,
        ipmasq: bool,
    ) -> None:
        self._init(
            network=network,
            subnet=subnet,
            ipv6_network=ipv6_network,
            ipv6_subnet=ipv6_subnet,
            mtu=mtu,
            ipmasq=ipmasq,
        )

    def render(self) -> str:
        lines: list[str] = []
        if self.network is not None and self.subnet is not None:
            lines.append(f"FLANNEL_NETWORK={self.network}")
            lines.append(f"FLANNEL_SUBNET={first_host(self.subnet)}")
        if self.ipv6_network is not None and self.ipv6_subnet is not None:
            lines.append(f"FLANNEL_IPV6_NETWORK={self.ipv6_network}")
            lines.append(f"FLANNEL_IPV6_SUBNET={first_host(self.ipv6_subnet)}")
        lines.append(f"FLANNEL_MTU={self.mtu}")
        lines.append(f"FLANNEL_IPMASQ={'true' if self.ipmasq else 'false'}")
        return "".join(line + "\n" for line in lines)


# --- flanneld's reader (godotenv): lenient about quotes, comments and `export` -------------


class PreviousSubnets(_Record):
    """The networks a previous flanneld run recorded; each masked, None when unusable."""

    __slots__ = ("ipv6_network", "ipv6_subnet", "network", "subnet")
    network: IPv4Network | None
    subnet: IPv4Network | None
    ipv6_network: IPv6Network | None
    ipv6_subnet: IPv6Network | None

    def __init__(
        self,
        network: IPv4Network | None = None,
        subnet: IPv4Network | None = None,
        ipv6_network: IPv6Network | None = None,
        ipv6_subnet: IPv6Network | None = None,
    ) -> None:
        self._init(
            network=network, subnet=subnet, ipv6_network=ipv6_network, ipv6_subnet=ipv6_subnet
        )


# godotenv's isSpace: blanks that do not end a line.
_DOTENV_BLANKS = "\t\v\f\r \x85\xa0"


def _dotenv_value(value: str) -> str | None:
    """godotenv's extractVarValue for the text after ``=``: a quoted value ends at the first
    unescaped closing quote; an unquoted one at the last ``#`` that follows a blank, so
    ``a # b # c`` keeps ``a # b``. None for an unterminated quote (godotenv fails there)."""
    quote = value[:1]
    if quote in ("'", '"'):
        for i in range(1, len(value)):
            if value[i] == quote and value[i - 1] != "\\":
                return value[:i].strip(quote)
        return None
    for i in range(len(value) - 1, 0, -1):
        if value[i] == "#" and value[i - 1] in _DOTENV_BLANKS:
            value = value[:i]
            break
    return value.strip(_DOTENV_BLANKS)


_EXPORT_PREFIXES = tuple(f"export{blank}" for blank in _DOTENV_BLANKS)


def parse_dotenv(text: str) -> dict[str, str]:
    """A godotenv-compatible subset: `export`, comments, single/double quotes, `=` or `:`;
    no escapes or ``$`` expansion inside double quotes (flanneld writes neither).

    As in godotenv's parser: lines end at LF or CR; a statement may start after any Unicode
    space, its key is right-trimmed of Unicode spaces, its value trimmed of blanks only. A
    comment line yields only keys that start with ``#``, which nobody reads.
    """
    values: dict[str, str] = {}
    for raw in text.replace("\r", "\n").split("\n"):  # CRLF leaves an empty line: harmless
        line = raw.lstrip()
        if line.startswith(_EXPORT_PREFIXES):
            line = line[len("export") :].lstrip(_DOTENV_BLANKS)
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            continue
        value = _dotenv_value(line[sep + 1 :].lstrip(_DOTENV_BLANKS))
        if value is not None:
            values[line[:sep].rstrip()] = value
    return values


def _single_cidr(value: str | None, version: int) -> str | None:
    """flannel keeps the value only when exactly one comma-separated element parses."""
    if not value:
        return None
    parsed = []
    for element in value.split(","):
        try:
            found, cidr = masked_cidr(element.strip())
        except SubnetEnvError:
            continue
        if found == version:
            parsed.append(cidr)
    return parsed[0] if len(parsed) == 1 else None


def read_previous_subnets(text: str) -> PreviousSubnets:
    from ipaddress import IPv4Network, IPv6Network

    def v4(name: str) -> IPv4Network | None:
        cidr = _single_cidr(values.get(name), 4)
        return None if cidr is None else IPv4Network(cidr)

    def v6(name: str) -> IPv6Network | None:
        cidr = _single_cidr(values.get(name), 6)
        return None if cidr is None else IPv6Network(cidr)

    values = parse_dotenv(text)
    return PreviousSubnets(
        v4("FLANNEL_NETWORK"),
        v4("FLANNEL_SUBNET"),
        v6("FLANNEL_IPV6_NETWORK"),
        v6("FLANNEL_IPV6_SUBNET"),
    )


# --- the CNI plugin's reader: strict KEY=VALUE, nothing else ----------------------------------


class SubnetEnvError(PyflannelError, ValueError):
    pass


class CniSubnetEnv(_Record):
    """What the CNI plugin reads; networks and subnets are masked CIDR text, as Go prints them."""

    __slots__ = ("ipmasq", "ipv6_networks", "ipv6_subnet", "mtu", "networks", "subnet")
    networks: list[str]
    subnet: str | None
    ipv6_networks: list[str]
    ipv6_subnet: str | None
    mtu: int
    ipmasq: bool

    def __init__(
        self,
        networks: list[str],
        subnet: str | None,
        ipv6_networks: list[str],
        ipv6_subnet: str | None,
        mtu: int,
        ipmasq: bool,
    ) -> None:
        self._init(
            networks=networks,
            subnet=subnet,
            ipv6_networks=ipv6_networks,
            ipv6_subnet=ipv6_subnet,
            mtu=mtu,
            ipmasq=ipmasq,
        )


def masked_cidr(value: str) -> tuple[int, str]:
    """Go's net.ParseCIDR then IPNet.String(): (IP version, the network with host bits cleared,
    IPv6 in RFC 5952 form). Errors carry Go's text."""
    address, slash, length = value.partition("/")
    family, bits = (AF_INET6, 128) if ":" in address else (AF_INET, 32)
    try:
        if not slash or not length.isascii() or not length.isdigit() or int(length) > bits:
            raise ValueError(length)
        packed = inet_pton(family, address)
    except (OSError, ValueError):
        raise SubnetEnvError(f"invalid CIDR address: {value}") from None
    prefix = int(length)
    mask = ((1 << prefix) - 1) << (bits - prefix)
    network = (int.from_bytes(packed, "big") & mask).to_bytes(bits // 8, "big")
    if network.startswith(_IPV4_MAPPED):  # IPv6 only (an IPv4 network has 4 bytes)
        # Go prints an IPv4-mapped network as the IPv4 one it holds, with the mask's last 32
        # bits (net.IPNet.String, networkNumberAndMask: IP.To4 and Mask[12:]); the prefix is
        # 96 or longer, or the mapped prefix would have been masked away.
        return 6, f"{inet_ntop(AF_INET, network[12:])}/{prefix - 96}"
    text = inet_ntop(family, network)
    if family == AF_INET6 and "." in text:
        text = _ipv6_hex(network)
    return (6 if family == AF_INET6 else 4), f"{text}/{prefix}"


_IPV4_MAPPED = bytes(10) + b"\xff\xff"


def _ipv6_hex(packed: bytes) -> str:
    """Go's text of an IPv6 address (netip's string6: RFC 5952, the first longest run of two
    or more zero groups as ``::``). glibc's inet_ntop agrees except for ``::a.b.c.d``, which it
    prints in the deprecated IPv4-compatible form."""
    groups = [int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2)]
    start = end = 0
    for i in range(8):
        j = i
        while j < 8 and groups[j] == 0:
            j += 1
        if j - i >= 2 and j - i > end - start:
            start, end = i, j
    hexes = [f"{g:x}" for g in groups]
    if end == start:
        return ":".join(hexes)
    return ":".join(hexes[:start]) + "::" + ":".join(hexes[end:])


def _cidr_list(value: str, version: int) -> list[str]:
    networks: list[str] = []
    for element in value.split(","):
        found, cidr = masked_cidr(element)
        if found == version and cidr not in networks:
            networks.append(cidr)
    return networks


def _cidr_of(value: str, version: int) -> str | None:
    found, cidr = masked_cidr(value)
    return cidr if found == version else None


def parse_cni_subnet_env(text: str, path: str) -> CniSubnetEnv:
    networks: list[str] = []
    ipv6_networks: list[str] = []
    subnet: str | None = None
    ipv6_subnet: str | None = None
    mtu: int | None = None
    ipmasq: bool | None = None
    # Go's line scanner splits on "\n" only (dropping one "\r"), unlike str.splitlines().
    for raw in text.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "FLANNEL_NETWORK":
            networks = _cidr_list(value, 4)
        elif key == "FLANNEL_IPV6_NETWORK":
            ipv6_networks = _cidr_list(value, 6)
        elif key == "FLANNEL_SUBNET":
            subnet = _cidr_of(value, 4)
        elif key == "FLANNEL_IPV6_SUBNET":
            ipv6_subnet = _cidr_of(value, 6)
        elif key == "FLANNEL_MTU":
            if not value or not value.isascii() or not value.isdigit():
                raise SubnetEnvError(f'strconv.ParseUint: parsing "{value}": invalid syntax')
            if len(value.lstrip("0")) > len(str(_MAX_UINT32)) or int(value) > _MAX_UINT32:
                raise SubnetEnvError(f'strconv.ParseUint: parsing "{value}": value out of range')
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
