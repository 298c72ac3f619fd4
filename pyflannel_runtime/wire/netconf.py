"""net-conf.json (and etcd's ``<prefix>/config``): decoding, validation and defaults.

Decoding follows Go's encoding/json as flannel uses it (flannel-io/flannel pkg/subnet/config.go:
ParseConfig); validation is flannel's CheckNetworkConfig (same file) with its messages
verbatim. Standard library only.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import GoJSONError, JSONObject, go_kind
from pyflannel_runtime.gojson.structs import (
    MISSING,
    fold_object,
    loads_pairs,
    to_plain,
)

_FIELDS = (
    "EnableIPv4",
    "EnableIPv6",
    "EnableNFTables",
    "Network",
    "IPv6Network",
    "SubnetMin",
    "SubnetMax",
    "IPv6SubnetMin",
    "IPv6SubnetMax",
    "SubnetLen",
    "IPv6SubnetLen",
    "Backend",
)
_UINT64_MAX = 2**64 - 1


class ConfigError(PyflannelError, ValueError):
    """A net-conf problem; ``str()`` is flannel's own message."""


@dataclass(frozen=True)
class NetworkConfig:
    enable_ipv4: bool = True
    enable_ipv6: bool = False
    enable_nftables: bool = False
    network: IPv4Network | None = None
    ipv6_network: IPv6Network | None = None
    subnet_len: int = 0
    subnet_min: IPv4Address | None = None
    subnet_max: IPv4Address | None = None
    ipv6_subnet_len: int = 0
    ipv6_subnet_min: IPv6Address | None = None
    ipv6_subnet_max: IPv6Address | None = None
    backend_type: str = "udp"
    backend: Mapping[str, Any] = field(default_factory=dict)

    @property
    def enabled_network(self) -> IPv4Network | None:
        """The IPv4 Network, or None when IPv4 is disabled."""
        return self.network if self.enable_ipv4 else None

    @property
    def enabled_ipv6_network(self) -> IPv6Network | None:
        """The IPv6 Network, or None when IPv6 is disabled."""
        return self.ipv6_network if self.enable_ipv6 else None

    @property
    def enabled_networks(self) -> tuple[IPv4Network | IPv6Network, ...]:
        """The cluster networks of the enabled families."""
        wanted = (self.enabled_network, self.enabled_ipv6_network)
        return tuple(n for n in wanted if n is not None)


# --- decoding --------------------------------------------------------------------------------


def _type_error(value: Any, fieldname: str, gotype: str) -> ConfigError:
    return ConfigError(
        f"json: cannot unmarshal {go_kind(value)} into Go struct field "
        f"Config.{fieldname} of type {gotype}"
    )


def _decode_bool(value: Any, fieldname: str) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _type_error(value, fieldname, "bool")
    return value


def _decode_uint(value: Any, fieldname: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _type_error(value, fieldname, "uint")
    # Go parses a uint field from the number's text: 24.0 and 2.4e1 are refused like 24.5.
    if isinstance(value, float) or not 0 <= value <= _UINT64_MAX:
        raise ConfigError(
            f"json: cannot unmarshal number {json.dumps(value)} into Go struct field "
            f"Config.{fieldname} of type uint"
        )
    return int(value)


def _raw_text(value: Any) -> str:
    """What a Go UnmarshalJSON sees once it trims the quotes off a JSON value."""
    if isinstance(value, str):
        return value
    return json.dumps(to_plain(value), separators=(",", ":"))


def _decode_cidr(value: Any, version: int) -> IPv4Network | IPv6Network:
    text = _raw_text(value)
    if "/" not in text:
        raise ConfigError(f"invalid CIDR address: {text}")
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ConfigError(f"invalid CIDR address: {text}") from None
    if net.version != version:
        raise ConfigError(f"invalid IPv{version} CIDR format")
    return net


def _decode_ipv4(value: Any) -> IPv4Address:
    try:
        addr = ipaddress.ip_address(_raw_text(value))
    except ValueError:
        raise ConfigError("invalid IPv4 address format") from None
    if isinstance(addr, IPv6Address):
        mapped = addr.ipv4_mapped
        if mapped is None:
            raise ConfigError("invalid IPv4 address format")
        return mapped
    return addr


def _decode_ipv6(value: Any) -> IPv6Address:
    try:
        addr = ipaddress.ip_address(_raw_text(value))
    except ValueError:
        raise ConfigError("invalid IPv6 address format") from None
    if isinstance(addr, IPv4Address):
        return IPv6Address(f"::ffff:{addr}")
    return addr


def _backend_type(raw: Any) -> str:
    if raw is MISSING:
        return "udp"
    if raw is None:
        return ""
    if not isinstance(raw, JSONObject):
        raise ConfigError(
            "error decoding Backend property of config: json: cannot unmarshal "
            f"{go_kind(raw)} into Go value of type struct {{ Type string }}"
        )
    folded = fold_object(raw, ["Type"], "struct { Type string }")
    kind = folded.get("Type")
    if kind is None:
        return ""
    if not isinstance(kind, str):
        raise ConfigError(
            "error decoding Backend property of config: json: cannot unmarshal "
            f"{go_kind(kind)} into Go struct field .Type of type string"
        )
    return kind.lower()


def parse_config(data: str | bytes) -> NetworkConfig:
    """flannel's ParseConfig: decode only, no defaults beyond EnableIPv4 and the backend type."""
    try:
        decoded = loads_pairs(data)
        folded = fold_object(decoded, _FIELDS, "subnet.Config")
    except GoJSONError as err:
        raise ConfigError(str(err)) from None

    values: dict[str, Any] = {}
    for name, attr in (
        ("EnableIPv4", "enable_ipv4"),
        ("EnableIPv6", "enable_ipv6"),
        ("EnableNFTables", "enable_nftables"),
    ):
        flag = _decode_bool(folded.get(name), name)
        if flag is not None:
            values[attr] = flag
    for name, attr in (("SubnetLen", "subnet_len"), ("IPv6SubnetLen", "ipv6_subnet_len")):
        length = _decode_uint(folded.get(name), name)
        if length is not None:
            values[attr] = length
    if "Network" in folded:
        values["network"] = _decode_cidr(folded["Network"], 4)
    if "IPv6Network" in folded:
        values["ipv6_network"] = _decode_cidr(folded["IPv6Network"], 6)
    for name, attr in (("SubnetMin", "subnet_min"), ("SubnetMax", "subnet_max")):
        if name in folded:
            values[attr] = _decode_ipv4(folded[name])
    for name, attr in (("IPv6SubnetMin", "ipv6_subnet_min"), ("IPv6SubnetMax", "ipv6_subnet_max")):
        if folded.get(name) is not None:
            values[attr] = _decode_ipv6(folded[name])

    raw_backend = folded.get("Backend", MISSING)
    values["backend_type"] = _backend_type(raw_backend)
    if isinstance(raw_backend, JSONObject):
        values["backend"] = to_plain(raw_backend)
    return NetworkConfig(**values)


# --- validation (CheckNetworkConfig) -----------------------------------------------------------


def _is_empty(net: IPv4Network | IPv6Network | None) -> bool:
    return net is None or (int(net.network_address) == 0 and net.prefixlen == 0)


def _default_subnet_len(prefix: int, small: int, default_at: int, default: int, msg: str) -> int:
    if prefix > small:
        raise ConfigError(msg)
    return default if prefix <= default_at else prefix + 2


def _check_v4(cfg: NetworkConfig) -> dict[str, Any]:
    net = cfg.network
    if net is None or _is_empty(net):
        raise ConfigError("please define a correct Network parameter in the flannel config")
    subnet_len = cfg.subnet_len
    if subnet_len > 0:
        if subnet_len > 30:
            raise ConfigError("SubnetLen must be less than /31")
        if subnet_len < net.prefixlen + 2:
            raise ConfigError("network must be able to accommodate at least four subnets")
    else:
        subnet_len = _default_subnet_len(
            net.prefixlen, 28, 22, 24, "network is too small. Minimum useful network prefix is /28"
        )
    size = 1 << (32 - subnet_len)
    base = int(net.network_address)
    lo, hi = cfg.subnet_min, cfg.subnet_max
    if lo is None or int(lo) == 0:
        lo = IPv4Address(base + size)
    elif lo not in net:
        raise ConfigError("SubnetMin is not in the range of the Network")
    if hi is None or int(hi) == 0:
        hi = IPv4Address(base + net.num_addresses - size)
    elif hi not in net:
        raise ConfigError("SubnetMax is not in the range of the Network")
    if int(lo) % size:
        raise ConfigError(f"SubnetMin is not on a SubnetLen boundary: {lo}")
    if int(hi) % size:
        raise ConfigError(f"SubnetMax is not on a SubnetLen boundary: {hi}")
    return {"subnet_len": subnet_len, "subnet_min": lo, "subnet_max": hi}


def _check_v6(cfg: NetworkConfig) -> dict[str, Any]:
    net = cfg.ipv6_network
    if net is None or _is_empty(net):
        raise ConfigError("please define a correct IPv6Network parameter in the flannel config")
    subnet_len = cfg.ipv6_subnet_len
    if subnet_len > 0:
        if subnet_len > 126:
            raise ConfigError("SubnetLen must be less than /127")
        if subnet_len < net.prefixlen + 2:
            raise ConfigError("network must be able to accommodate at least four subnets")
    else:
        subnet_len = _default_subnet_len(
            net.prefixlen,
            124,
            62,
            64,
            "IPv6Network is too small. Minimum useful network prefix is /124",
        )
    size = 1 << (128 - subnet_len)
    base = int(net.network_address)
    lo, hi = cfg.ipv6_subnet_min, cfg.ipv6_subnet_max
    if lo is None or int(lo) == 0:
        lo = IPv6Address(base + size)
    elif lo not in net:
        raise ConfigError("IPv6SubnetMin is not in the range of the IPv6Network")
    if hi is None or int(hi) == 0:
        hi = IPv6Address(base + net.num_addresses - size)
    elif hi not in net:
        raise ConfigError("IPv6SubnetMax is not in the range of the IPv6Network")
    if int(lo) % size:
        raise ConfigError(f"IPv6SubnetMin is not on a SubnetLen boundary: {lo}")
    if int(hi) % size:
        raise ConfigError(f"IPv6SubnetMax is not on a SubnetLen boundary: {hi}")
    return {"ipv6_subnet_len": subnet_len, "ipv6_subnet_min": lo, "ipv6_subnet_max": hi}


def check_network_config(cfg: NetworkConfig) -> NetworkConfig:
    """flannel's CheckNetworkConfig (etcd mode only): fills the defaults or raises."""
    updates: dict[str, Any] = {}
    if cfg.enable_ipv4:
        updates |= _check_v4(cfg)
    if cfg.enable_ipv6:
        updates |= _check_v6(cfg)
    return dataclasses.replace(cfg, **updates)


def ip_stack(cfg: NetworkConfig) -> tuple[bool, bool]:
    """(ipv4, ipv6) as flanneld derives it; neither is flannel's `none defined stack`."""
    if not cfg.enable_ipv4 and not cfg.enable_ipv6:
        raise ConfigError("none defined stack")
    return cfg.enable_ipv4, cfg.enable_ipv6


# --- encoding ---------------------------------------------------------------------------------


def config_to_dict(cfg: NetworkConfig) -> dict[str, Any]:
    """The config under Go's field names, in Go's struct order, leaving out what is unset."""
    out: dict[str, Any] = {
        "EnableIPv4": cfg.enable_ipv4,
        "EnableIPv6": cfg.enable_ipv6,
        "EnableNFTables": cfg.enable_nftables,
    }
    optional = {
        "Network": cfg.network,
        "IPv6Network": cfg.ipv6_network,
        "SubnetMin": cfg.subnet_min,
        "SubnetMax": cfg.subnet_max,
        "IPv6SubnetMin": cfg.ipv6_subnet_min,
        "IPv6SubnetMax": cfg.ipv6_subnet_max,
        "SubnetLen": cfg.subnet_len or None,
        "IPv6SubnetLen": cfg.ipv6_subnet_len or None,
    }
    for key, value in optional.items():
        if value is not None:
            out[key] = value if isinstance(value, int) else str(value)
    out["Backend"] = dict(cfg.backend) if cfg.backend else {"Type": cfg.backend_type}
    return out


def encode_config(cfg: NetworkConfig) -> str:
    return json.dumps(config_to_dict(cfg), indent=2) + "\n"
