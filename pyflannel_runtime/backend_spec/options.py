"""net-conf's Backend options, one typed set per backend: decoded and range-checked in one place.

Decoding is Go's encoding/json into the backend's anonymous config struct, as flannel's
backends do it (`pkg/backend/vxlan/vxlan.go` and `pkg/backend/udp/udp_amd64.go`,
``RegisterNetwork``): keys match case-insensitively, unknown keys and nulls are ignored, and a
value of the wrong JSON type is Go's own unmarshal error. Beyond flannel, every number is
checked against the range the kernel and the backend accept, so that a bad option stops
``pyflannel config check``, the cluster model and the agent alike, before the agent creates or
deletes anything (flannel deletes an incompatible ``flannel.1`` first and fails after).

Each options class also knows the backend's MTU rule, which the backend module and the cluster
model both use. Pure: the standard library and the Go-JSON helpers only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pyflannel_runtime.gojson.core import go_kind
from pyflannel_runtime.gojson.structs import match_field
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig

# Go decodes these options into `int`, which is 64 bits on every platform flannel ships for.
_GO_INT = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Option:
    """One field of a backend's config struct."""

    name: str  # the Go field name; JSON keys match it case-insensitively
    attr: str  # the attribute of the options class
    kind: type[int] | type[bool]
    minimum: int = 0
    maximum: int = 0
    # A default that 0 stands for when 0 lies outside minimum..maximum ("" when it does not).
    zero_means: str = ""

    def allowed(self) -> str:
        span = f"between {self.minimum} and {self.maximum}"
        return f"0 ({self.zero_means}) or {span}" if self.zero_means else span

    def in_range(self, value: int) -> bool:
        return (value == 0 and bool(self.zero_means)) or self.minimum <= value <= self.maximum


@dataclass(frozen=True)
class BackendOptions:
    """The options every backend shares: none. Subclasses add fields and their `OPTIONS`."""

    LABEL: ClassVar[str]  # the backend's name in flannel's messages ("VXLAN")
    OPTIONS: ClassVar[tuple[Option, ...]] = ()
    # Encapsulation bytes per packet: FLANNEL_MTU is the underlay MTU less this.
    MTU_OVERHEAD: ClassVar[int] = 0
    # The names of the devices the backend creates under any options (a regular expression).
    DEVICES: ClassVar[str | None] = None

    @classmethod
    def option(cls, name: str) -> Option:
        return next(option for option in cls.OPTIONS if option.name == name)

    @classmethod
    def decode(cls, backend: Mapping[str, Any]) -> Self:
        """The options in net-conf's Backend object; raises ConfigError with flannel's
        message for a wrong type and ours for a value out of range."""
        names = [option.name for option in cls.OPTIONS]
        values: dict[str, Any] = {}
        for key, value in backend.items():
            name = match_field(key, names)
            if name is None or value is None:
                continue
            option = cls.option(name)
            values[option.attr] = cls._checked(option, value)
        return cls(**values)

    @classmethod
    def of(cls, config: NetworkConfig) -> Self:
        return cls.decode(config.backend)

    @classmethod
    def _checked(cls, option: Option, value: Any) -> int | bool:
        prefix = f"error decoding {cls.LABEL} backend config: "
        if option.kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(prefix + _unmarshal_error(go_kind(value), option, "bool"))
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(prefix + _unmarshal_error(go_kind(value), option, "int"))
        if isinstance(value, float) or not _GO_INT[0] <= value <= _GO_INT[1]:
            number = f"number {json.dumps(value)}"
            raise ConfigError(prefix + _unmarshal_error(number, option, "int"))
        if not option.in_range(value):
            raise ConfigError(f"{prefix}{option.name} must be {option.allowed()}, got {value}")
        return value

    def device_mtu(self, interface_mtu: int) -> int:
        """FLANNEL_MTU on an external interface of this MTU."""
        return interface_mtu - self.MTU_OVERHEAD

    def uses_device(self, name: str) -> bool:
        """Whether the backend, with these options, runs on a device of this name."""
        return False


def _unmarshal_error(what: str, option: Option, go_type: str) -> str:
    return f"json: cannot unmarshal {what} into Go struct field .{option.name} of type {go_type}"


# IANA reserves none of these; the kernel's IFLA_VXLAN_ID is 24 bits and IFLA_VXLAN_PORT 16.
_VNI_MAX = 2**24 - 1
_PORT_MAX = 65535
# ETH_MIN_MTU: the smallest MTU the kernel gives a vxlan device; the option is the underlay's.
_MIN_DEVICE_MTU = 68


@dataclass(frozen=True)
class VxlanOptions(BackendOptions):
    LABEL = "VXLAN"
    # Also used for IPv6 underlays, as flannel does (the real IPv6 overhead is 70).
    MTU_OVERHEAD = 50
    DEVICES = r"flannel(-v6)?\.\d+"
    OPTIONS = (
        Option("VNI", "vni", int, 0, _VNI_MAX),
        Option("Port", "port", int, 0, _PORT_MAX),  # 0: the kernel's default, 8472
        Option("MTU", "mtu", int, _MIN_DEVICE_MTU + 50, _PORT_MAX, "the interface's MTU"),
        Option("GBP", "gbp", bool),
        Option("Learning", "learning", bool),
        Option("DirectRouting", "direct_routing", bool),
    )

    vni: int = 1
    port: int = 0
    mtu: int = 0  # the underlay MTU the device is sized from; 0: the external interface's
    gbp: bool = False
    learning: bool = False
    direct_routing: bool = False

    def device_mtu(self, interface_mtu: int) -> int:
        return (self.mtu or interface_mtu) - self.MTU_OVERHEAD

    def device_name(self, version: int) -> str:
        """flannel.<VNI> for IPv4, flannel-v6.<VNI> for IPv6 (flannel's vxlan.go)."""
        return f"flannel.{self.vni}" if version == 4 else f"flannel-v6.{self.vni}"

    def uses_device(self, name: str) -> bool:
        return name in (self.device_name(4), self.device_name(6))


@dataclass(frozen=True)
class HostGwOptions(BackendOptions):
    LABEL = "host-gw"


# The kernel's limit on the queues of one TUN device (MAX_TAP_QUEUES).
_MAX_TUN_QUEUES = 256


@dataclass(frozen=True)
class UdpOptions(BackendOptions):
    LABEL = "UDP"
    MTU_OVERHEAD = 28  # the outer IPv4 and UDP headers
    DEVICES = r"flannel\d+"  # the kernel numbers the TUN device (flannel0 unless taken)
    OPTIONS = (
        # Every node sends to the port it listens on itself, so 0 (any port) cannot work.
        Option("Port", "port", int, 1, _PORT_MAX),
        Option("Queues", "queues", int, 1, _MAX_TUN_QUEUES),  # pyflannel's: flannel0's queues
        # pyflannel's: offer TCP super-packets whole to pyflannel peers (backend/udp/superpacket.py)
        Option("SuperPackets", "super_packets", bool),
    )

    port: int = 8285
    queues: int = 1
    super_packets: bool = False

    def uses_device(self, name: str) -> bool:
        return re.fullmatch(self.DEVICES, name) is not None
