"""FLANNEL_MTU per backend: the external interface MTU minus the encapsulation overhead."""

from __future__ import annotations

_OVERHEAD = {
    "vxlan": 50,  # also used for IPv6 underlays, as flannel does (the real v6 overhead is 70)
    "udp": 28,
    "host-gw": 0,
    "alloc": 0,
    "ipip": 20,
    "wireguard": 80,
}
# backends whose `Backend.MTU` option replaces the interface MTU as the base
_CONFIGURABLE_BASE = frozenset({"vxlan", "wireguard"})


def backend_mtu(backend_type: str, iface_mtu: int, configured_mtu: int = 0) -> int:
    try:
        overhead = _OVERHEAD[backend_type]
    except KeyError:
        raise ValueError(f"unknown backend type: {backend_type}") from None
    configured = backend_type in _CONFIGURABLE_BASE and configured_mtu > 0
    base = configured_mtu if configured else iface_mtu
    return base - overhead
