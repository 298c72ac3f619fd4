"""The backends pyflannel runs, one spec each: what the cluster model, ``config check``, the lease
stores and ``status`` ask about a backend. Its runtime side (building it, its per-peer entries,
reading a host's datapath) is `backend.registry`, beside the backends' own modules.

Adding a backend means its options class in `options`, one `BackendSpec` below, and its runtime
hooks in `backend.registry`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyflannel_runtime.backend_spec.options import (
    BackendOptions,
    HostGwOptions,
    UdpOptions,
    VxlanOptions,
)
from pyflannel_runtime.wire.netconf import ConfigError, NetworkConfig
from pyflannel_runtime.wire.vxlan_data import advertised_vtep_mac


@dataclass(frozen=True)
class BackendSpec:
    name: str  # net-conf's Backend.Type
    options: type[BackendOptions]  # option schema, decoding, MTU rule, device names
    dual_stack: bool  # carries IPv6 as well as IPv4 (flannel: vxlan, host-gw, wireguard)
    # The MAC a lease's backend data advertises ("" if none); None: the backend has no MAC.
    advertised_mac: Callable[[str | None], str] | None = None


_SPECS = (
    BackendSpec(
        name="vxlan", options=VxlanOptions, dual_stack=True, advertised_mac=advertised_vtep_mac
    ),
    BackendSpec(name="host-gw", options=HostGwOptions, dual_stack=True),
    BackendSpec(name="udp", options=UdpOptions, dual_stack=False),
)
BACKENDS: dict[str, BackendSpec] = {spec.name: spec for spec in _SPECS}


def names() -> tuple[str, ...]:
    return tuple(BACKENDS)


def find(backend_type: str) -> BackendSpec | None:
    return BACKENDS.get(backend_type)


def get(backend_type: str) -> BackendSpec:
    """The spec for net-conf's Backend.Type; ConfigError naming the supported ones."""
    spec = BACKENDS.get(backend_type)
    if spec is None:
        raise ConfigError(
            f"unknown backend type: {backend_type} (pyflannel supports {', '.join(BACKENDS)})"
        )
    return spec


def validate(config: NetworkConfig) -> BackendOptions:
    """The one check of net-conf's Backend: a known type and options it accepts. ConfigError
    otherwise, with flannel's message (for the agent: before anything is created)."""
    return get(config.backend_type).options.of(config)


def stale_devices(link_names: Iterable[str], backend: Mapping[str, Any]) -> list[str]:
    """The links a flannel backend creates that the one net-conf's `backend` object configures
    does not use. The agent creates its own device but never removes another's, so after a
    switch of backend (or of VNI) the old device stays, with its routes, neighbours and FDB
    entries; ConfigError for a backend that does not validate."""
    options = get(backend.get("Type", "")).options.decode(backend)
    return [name for name in flannel_devices(link_names) if not options.uses_device(name)]


def flannel_devices(link_names: Iterable[str]) -> list[str]:
    """The links that some backend creates under some options (flannel.<VNI>,
    flannel-v6.<VNI>, flannel<N>), in the order given."""
    families = [spec.options.DEVICES for spec in _SPECS if spec.options.DEVICES]
    return [name for name in link_names if any(re.fullmatch(f, name) for f in families)]
