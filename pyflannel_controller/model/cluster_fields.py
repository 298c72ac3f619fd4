"""The cluster model's field types: each setting's parsing and bounds (``cluster``)."""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import posixpath
import re
from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    JsonValue,
    StrictInt,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from pyflannel_runtime.backend_spec import specs, tx_offload
from pyflannel_runtime.backend_spec.options import Option, UdpOptions, VxlanOptions

_SAFE_PATH = re.compile(r"/[A-Za-z0-9._@+/-]*")


def single_line(value: str) -> str:
    # These strings end up in KEY=VALUE files and unit files, where a line break would inject.
    if any(ch in value for ch in "\n\r\0"):
        raise ValueError("must be a single line of text")
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _absolute_path(value: str) -> str:
    single_line(value)
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
    single_line(value)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or "," in value:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value


def _regexp(value: str) -> str:
    single_line(value)
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


Text = Annotated[str, AfterValidator(single_line)]
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
    if not isinstance(value, str) or value not in specs.BACKENDS:
        known = [repr(name) for name in specs.names()]
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
    WithJsonSchema({"type": "string", "enum": list(specs.names())}),
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
