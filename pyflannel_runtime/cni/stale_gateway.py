"""A bridge that still holds the gateway of the node's previous subnet.

The bridge plugin refuses an ADD while its bridge holds another IPv4 address, or an
overlapping IPv6 one (containernetworking/plugins plugins/main/bridge/bridge.go: ensureAddr,
"%q already has an IP address different from %v"), unless the delegate sets forceAddress.
flannel's plugin passes that error on, so after a node's subnet changes (a new SubnetLen, a
switch of datastore, a lease that ran out and was taken) every new pod on the node fails until
an operator deletes cni0 by hand. This plugin removes the bridge's addresses that lie inside
the flannel Network but are not the new subnet's gateway, and runs the delegate once more.
Addresses outside the Network are the operator's and are never touched.

Imported only when that error comes back. The plugin runs with only its own package
importable (`cni.install`), so the addresses are read and removed by iproute2's `ip`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Interface, IPv6Interface, ip_interface, ip_network

from pyflannel_runtime.cni.skel import CniError
from pyflannel_runtime.wire.subnet_env import first_host

IPInterface = IPv4Interface | IPv6Interface

# The bridge plugin's own words (see the module docstring).
ERROR_TEXT = "already has an IP address different from"


def is_stale_gateway_error(error: CniError) -> bool:
    return ERROR_TEXT in error.msg


def stale_addresses(
    held: Iterable[IPInterface], networks: Sequence[str], subnets: Sequence[str]
) -> list[IPInterface]:
    """The bridge addresses to remove: inside one of flannel's `networks`, and not the gateway
    (first address) of this node's `subnets` now."""
    inside = [ip_network(n) for n in networks]
    gateways = {ip_interface(first_host(ip_network(s))) for s in subnets}
    return [
        address
        for address in held
        if address not in gateways
        and any(address.version == n.version and address.ip in n for n in inside)
    ]


def remove_stale_gateways(
    bridge: str, networks: Sequence[str], subnets: Sequence[str]
) -> list[str]:
    """Remove the stale addresses from `bridge` (in this network namespace); returns them as
    text, empty when there were none (or no such bridge)."""
    shown = _ip("-j", "addr", "show", "dev", bridge)
    if shown is None:
        return []
    held = [
        ip_interface(f"{info['local']}/{info['prefixlen']}")
        for link in json.loads(shown)
        for info in link.get("addr_info", ())
        if info.get("family") in ("inet", "inet6")
    ]
    stale = stale_addresses(held, networks, subnets)
    for address in stale:
        _ip("addr", "del", str(address), "dev", bridge, check=True)
    return [str(a) for a in stale]


def _ip(*args: str, check: bool = False) -> str | None:
    """iproute2's `ip` (no shell); None when it fails and `check` is off."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if check:
            raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")
        return None
    return done.stdout
