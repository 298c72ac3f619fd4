"""Leases: the etcd value (LeaseAttrs JSON), subnet keys, and lease events.

flannel-io/flannel pkg/lease/lease.go: Lease, LeaseAttrs, Event; pkg/subnet/subnet.go:
MakeSubnetKey, ParseSubnetKey. docs/compatibility.md, "etcd keys and lease JSON".
"""

from __future__ import annotations

import enum
import json
import re
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import Any

from pyflannel_runtime import PyflannelError
from pyflannel_runtime.gojson.core import MAX_DOCUMENT_BYTES, GoJSONError
from pyflannel_runtime.gojson.structs import compact, fold_object, loads_pairs


class LeaseError(PyflannelError, ValueError):
    pass


ZERO_IPV4 = IPv4Address("0.0.0.0")
# flannel's own encoding of LeaseAttrs, byte for byte. Backend data must be a flat object of
# integers and printable-ASCII strings holding nothing Go escapes (", backslash, <, >, &):
# then it is valid, compact JSON exactly as Go writes it (VNI/VtepMAC, PublicKey/Port).
_FLAT_MEMBER = r'"[A-Za-z0-9]+":(?:-?(?:0|[1-9][0-9]*)|"[ !#-%\'-;=?-\[\]-~]*")'
_FLAT_OBJECT = rf"\{{(?:{_FLAT_MEMBER}(?:,{_FLAT_MEMBER})*)?\}}"
_CANONICAL_ATTRS = re.compile(
    r'\{"PublicIP":"([0-9.]+)","PublicIPv6":(?:null|"([0-9a-fA-F:.]+)")'
    r'(?:,"BackendType":"([a-z0-9-]+)")?'
    rf'(?:,"BackendData":({_FLAT_OBJECT}))?'
    rf'(?:,"BackendV6Data":({_FLAT_OBJECT}))?\}}'
)
_GO_COMPACT_OBJECT = re.compile(_FLAT_OBJECT)
_ATTR_FIELDS = ("PublicIP", "PublicIPv6", "BackendType", "BackendData", "BackendV6Data")


def _raw_json(value: Any) -> str | None:
    """Go's json.RawMessage with omitempty: kept compact, dropped when absent or null."""
    if value is None:
        return None
    return compact(value)


@dataclass(frozen=True, slots=True)
class LeaseAttrs:
    public_ip: IPv4Address = ZERO_IPV4
    public_ipv6: IPv6Address | None = None
    backend_type: str = ""
    backend_data: str | None = None
    backend_v6_data: str | None = None

    def to_json(self) -> str:
        parts = [
            f'"PublicIP":"{self.public_ip}"',
            '"PublicIPv6":' + (f'"{self.public_ipv6}"' if self.public_ipv6 else "null"),
        ]
        if self.backend_type:
            parts.append(f'"BackendType":{json.dumps(self.backend_type)}')
        if self.backend_data:
            parts.append(f'"BackendData":{self.backend_data}')
        if self.backend_v6_data:
            parts.append(f'"BackendV6Data":{self.backend_v6_data}')
        return "{" + ",".join(parts) + "}"

    @classmethod
    def from_json(cls, data: str | bytes) -> LeaseAttrs:
        text = data.decode(errors="replace") if isinstance(data, bytes) else data
        # Over the size limit only the general path, which refuses it, may look at it.
        canonical = _CANONICAL_ATTRS.fullmatch(text) if len(text) <= MAX_DOCUMENT_BYTES else None
        if canonical is not None:
            # Exactly the layout to_json (and flanneld) writes: no decoding needed, and the
            # backend data is already compact. Thousands of these are read at start-up.
            ip, ipv6, backend_type, data4, data6 = canonical.groups()
            try:
                return cls(
                    parse_ipv4(ip),
                    None if ipv6 is None else IPv6Address(ipv6),
                    backend_type or "",
                    data4,
                    data6,
                )
            except ValueError as err:
                raise LeaseError(f"invalid public IP in lease: {err}") from None
        try:
            folded = fold_object(loads_pairs(data), _ATTR_FIELDS, "lease.LeaseAttrs")
        except GoJSONError as err:
            raise LeaseError(str(err)) from None
        public_ip = ZERO_IPV4
        public_ipv6 = None
        try:
            if folded.get("PublicIP") is not None:
                public_ip = parse_ipv4(_as_str(folded["PublicIP"]))
            if folded.get("PublicIPv6") is not None:
                public_ipv6 = IPv6Address(_as_str(folded["PublicIPv6"]))
        except ValueError as err:
            raise LeaseError(f"invalid public IP in lease: {err}") from None
        backend_type = folded.get("BackendType") or ""
        if not isinstance(backend_type, str):
            raise LeaseError(
                "json: cannot unmarshal into Go struct field BackendType of type string"
            )
        return cls(
            public_ip=public_ip,
            public_ipv6=public_ipv6,
            backend_type=backend_type,
            backend_data=_raw_json(folded.get("BackendData")),
            backend_v6_data=_raw_json(folded.get("BackendV6Data")),
        )


def is_go_compact_object(text: str) -> bool:
    """True when `text` is a flat JSON object as Go writes one (the backend data flannel puts
    in leases and annotations), so that Go's json.Marshal of it as a RawMessage gives it back
    unchanged: it needs no decoding to be kept. Within the decoder's size limit only."""
    return len(text) <= MAX_DOCUMENT_BYTES and _GO_COMPACT_OBJECT.fullmatch(text) is not None


def parse_ipv4(text: str) -> IPv4Address:
    return IPv4Address(ipv4_int(text))


def ipv4_network(address: int, prefixlen: int) -> IPv4Network:
    """The network of `address` with its host bits masked off (Go's ParseCIDR). An int that is
    already a network address costs IPv4Network the least: given an IPv4Address, it formats
    and parses the address again. Raises ValueError for a length over 32."""
    return IPv4Network((address & (0xFFFFFFFF << (32 - prefixlen)) & 0xFFFFFFFF, prefixlen))


def ipv4_int(text: str) -> int:
    """A dotted quad, through the C parser first: thousands of leases are read at start-up.
    inet_pton is as strict as ipaddress (no leading zeros, exactly four octets)."""
    try:
        return int.from_bytes(socket.inet_pton(socket.AF_INET, text), "big")
    except OSError:
        return int(IPv4Address(text))  # raises ValueError with ipaddress's reason


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    return value


@dataclass(frozen=True, slots=True)
class Lease:
    subnet: IPv4Network | None
    ipv6_subnet: IPv6Network | None
    attrs: LeaseAttrs
    enable_ipv4: bool = True
    enable_ipv6: bool = False
    # Unix time; None: no expiry (an etcd reservation); math.inf: held by an etcd lease whose
    # TTL was not looked up (peers from the watch, where only the datapath needs them).
    expiration: float | None = None
    asof: int = 0

    def key(self) -> str:
        return make_subnet_key(self.subnet, self.ipv6_subnet)


def same_lease(a: Lease, b: Lease) -> bool:
    """Equal in everything a backend programs: subnets and attributes; expiry and revision do
    not count."""
    return a.subnet == b.subnet and a.ipv6_subnet == b.ipv6_subnet and a.attrs == b.attrs


class EventType(enum.IntEnum):
    ADDED = 0
    REMOVED = 1


@dataclass(frozen=True, slots=True)
class LeaseEvent:
    type: EventType
    lease: Lease


# --- subnet keys: "10.5.52.0-24" or "10.12.13.0-24&fd00:12:13::-56" ---------------------------

# flannel's pattern (pkg/subnet/subnet.go, subnetRegex), with possessive quantifiers: Go's regexp runs in
# linear time, Python's backtracks, and a crafted key of a few thousand digits would take it
# minutes. A dotted quad ends its digit runs at the dots, so the keys it accepts are the same.
_KEY_RE = re.compile(r"(\d++\.\d++.\d++.\d++)-(\d++)(?:&([a-f\d:]++)-(\d++))?$")
# The longest key flannel writes, "255.255.255.255-32&" plus a full IPv6 address and "-128",
# is 62 characters; a last path segment over this cannot be one.
_MAX_KEY_SEGMENT = 128


def make_subnet_key(subnet: IPv4Network | None, ipv6_subnet: IPv6Network | None) -> str:
    v4 = subnet or IPv4Network("0.0.0.0/0")
    key = f"{v4.network_address}-{v4.prefixlen}"
    if ipv6_subnet is not None:
        key += f"&{ipv6_subnet.network_address}-{ipv6_subnet.prefixlen}"
    return key


def parse_subnet_key(key: str) -> tuple[IPv4Network, IPv6Network | None]:
    """Parse a subnet key or a full etcd path ending in one (the match is suffix-anchored)."""
    segment = key[key.rfind("/") + 1 :]
    match = _KEY_RE.search(segment) if len(segment) <= _MAX_KEY_SEGMENT else None
    if match is None:
        raise LeaseError(f"invalid subnet key: {_shown_key(key)}")
    ip4, len4, ip6, len6 = match.groups()
    try:
        # Go parses the lengths as uint with 5 (v4) and 7 (v6) bits.
        if int(len4) >= 1 << 5:
            raise ValueError(len4)
        prefixlen = int(len4)
        subnet = ipv4_network(ipv4_int(ip4), prefixlen)
        ipv6_subnet = None
        if ip6 is not None:
            if int(len6) >= 1 << 7:
                raise ValueError(len6)
            ipv6_subnet = IPv6Network(f"{IPv6Address(ip6)}/{len6}", strict=False)
    except ValueError:
        raise LeaseError(f"invalid subnet key: {_shown_key(key)}") from None
    return subnet, ipv6_subnet


def _shown_key(key: str) -> str:
    """A key as error messages show it: a long one is cut, so one bad key is not a huge log line."""
    if len(key) <= 2 * _MAX_KEY_SEGMENT:
        return key
    return f"{key[:_MAX_KEY_SEGMENT]}... ({len(key)} characters)"
