"""The delegate configuration flannel hands to bridge (or another plugin): pure functions.

A delegate field is filled only when missing, except ``name``, ``cniVersion`` and ``ipam``,
which flannel always sets. ``ipam.routes`` entries are Go ``types.Route`` structs, so they
serialise in field order with zero values left out, while every map has sorted keys.
"""

from __future__ import annotations

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import fold_fields, go_kind
from pyflannel_runtime.gojson.encode import GoStruct, marshal

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ipaddress
    from typing import Any

    from pyflannel_runtime.cni.plugin_config import FlannelNetConf
    from pyflannel_runtime.wire.subnet_env import CniSubnetEnv


class DelegateError(PyflannelError, ValueError):
    pass


def check_delegate(delegate: dict[str, Any]) -> None:
    if "type" in delegate and not isinstance(delegate["type"], str):
        raise DelegateError("'delegate' dictionary, if present, must have (string) 'type' field")
    if "name" in delegate:
        raise DelegateError(
            "'delegate' dictionary must not have 'name' field, it'll be set by flannel"
        )
    if "ipam" in delegate:
        raise DelegateError(
            "'delegate' dictionary must not have 'ipam' field, it'll be set by flannel"
        )


# --- ipam.routes: a round trip through Go's types.Route -----------------------------------

_ROUTE_INTS = ("mtu", "advmss", "priority")
_ROUTE_INT_POINTERS = ("table", "scope")
_ROUTE_FIELDS = ("dst", "gw", *_ROUTE_INTS, *_ROUTE_INT_POINTERS)


def _ip_text(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Go prints IPv4-mapped IPv6 addresses in dotted form."""
    mapped = address.ipv4_mapped if address.version == 6 else None
    return str(address if mapped is None else mapped)


def _route_dst(value: Any) -> str:
    """types.IPNet: net.ParseCIDR keeps the address unmasked, then prints it back. Go prints an
    IPv4-mapped network as IPv4 with the last 32 bits of its mask (net.IPNet.String)."""
    if value is None:
        return "<nil>"
    if not isinstance(value, str):
        raise DelegateError(f"json: cannot unmarshal {go_kind(value)} into Go value of type string")
    import ipaddress  # only input routes need it: kept off the start-up path

    try:
        # ipaddress checks the length as Go does (decimal digits only); Go needs the slash.
        interface = ipaddress.ip_interface(value) if "/" in value else None
    except ValueError:
        interface = None
    if interface is None:
        raise DelegateError(f"invalid CIDR address: {value}")
    prefix = interface.network.prefixlen
    if interface.version == 6 and interface.ip.ipv4_mapped is not None:
        prefix = max(prefix - 96, 0)
    return f"{_ip_text(interface.ip)}/{prefix}"


def _route_gw(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise DelegateError(
            f"json: cannot unmarshal {go_kind(value)} into Go struct field route.gw of type net.IP"
        )
    import ipaddress

    try:
        return _ip_text(ipaddress.ip_address(value))
    except ValueError:
        raise DelegateError(f"invalid IP address: {value}") from None


def _route_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    where = f"Go struct field route.{field} of type int"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DelegateError(f"json: cannot unmarshal {go_kind(value)} into {where}")
    if (isinstance(value, float) and not value.is_integer()) or abs(value) >= 2**63:
        number = marshal(value).decode()
        raise DelegateError(f"json: cannot unmarshal number {number} into {where}")
    return int(value)


def _route(value: Any) -> GoStruct:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise DelegateError(
            f"json: cannot unmarshal {go_kind(value)} into Go value of type types.route"
        )
    fields = fold_fields(value.items(), _ROUTE_FIELDS)
    route = GoStruct([("dst", _route_dst(fields.get("dst")))])
    gateway = _route_gw(fields.get("gw"))
    if gateway is not None:
        route.append(("gw", gateway))
    for name in _ROUTE_INTS:
        number = _route_int(fields.get(name), name)
        if number:
            route.append((name, number))
    for name in _ROUTE_INT_POINTERS:
        number = _route_int(fields.get(name), name)
        if number is not None:
            route.append((name, number))
    return route


def _input_routes(ipam: dict[str, Any]) -> list[GoStruct]:
    routes = ipam.get("routes")
    if routes is None:
        return []
    if not isinstance(routes, list):
        raise DelegateError(
            f"json: cannot unmarshal {go_kind(routes)} into Go value of type []types.Route"
        )
    return [_route(item) for item in routes]


def _delegate_ipam(ipam_in: dict[str, Any] | None, env: CniSubnetEnv) -> dict[str, Any]:
    ipam = dict(ipam_in or {})
    ipam.setdefault("type", "host-local")
    ranges: list[list[dict[str, Any]]] = []
    if env.subnet is not None:
        ranges.append([{"subnet": str(env.subnet)}])
    if env.ipv6_subnet is not None:
        ranges.append([{"subnet": str(env.ipv6_subnet)}])
    ipam["ranges"] = ranges
    try:
        routes = _input_routes(ipam)
    except DelegateError as err:
        raise DelegateError(
            f"failed to assemble Delegate IPAM: failed to read IPAM routes:"
            f" failed to parse ipam.routes: {err}"
        ) from None
    for network in (*env.networks, *env.ipv6_networks):
        routes.append(GoStruct([("dst", str(network))]))
    ipam["routes"] = routes
    return ipam


def build_delegate(conf: FlannelNetConf, env: CniSubnetEnv) -> dict[str, Any]:
    """flannel's doCmdAdd: the delegate map, from an already checked ``conf.delegate``."""
    delegate = dict(conf.delegate or {})
    if conf.runtime_config is not None:
        delegate["runtimeConfig"] = conf.runtime_config
    delegate["name"] = conf.name
    delegate.setdefault("type", "bridge")
    # flannel masquerades pod traffic itself when FLANNEL_IPMASQ is true, so the bridge must not
    delegate.setdefault("ipMasq", not env.ipmasq)
    delegate.setdefault("mtu", env.mtu)
    if delegate["type"] == "bridge":
        delegate.setdefault("isGateway", True)
    if conf.cni_version:
        delegate["cniVersion"] = conf.cni_version
    delegate["ipam"] = _delegate_ipam(conf.ipam, env)
    return delegate


def encode_delegate(delegate: dict[str, Any]) -> bytes:
    """The bytes flannel saves and sends: Go's json.Marshal of the map (sorted, compact)."""
    return marshal(delegate)
