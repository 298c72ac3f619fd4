"""The host-gw datapath as a host's kernel holds it: the interface its routes leave through
(for verify and `pyflannel status`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyflannel_runtime.backend.host import HostDatapath, link_names
from pyflannel_runtime.wire.lease import Lease
from pyflannel_runtime.wire.netconf import NetworkConfig


def inspect_hostgw(
    ipr: Any, config: NetworkConfig, own: Lease, leases: Sequence[Lease]
) -> HostDatapath:
    """The interface holding the own lease's public IP: host-gw's routes leave through it."""
    names = link_names(ipr)
    public = own.attrs.public_ip if config.enable_ipv4 else own.attrs.public_ipv6
    ext_index = -1
    problems = []
    found = ipr.get_addr(address=str(public)) if public is not None else []
    if found:
        ext_index = found[0]["index"]
    else:
        problems.append(f"no interface holds the public IP {public} of this host's lease")
        names[-1] = f"<interface of {public}>"
    return HostDatapath(
        backend_type=config.backend_type,
        ext_index=ext_index,
        ipv4=config.enable_ipv4,
        ipv6=config.enable_ipv6,
        networks=config.enabled_networks,
        names=names,
        problems=tuple(problems),
    )
