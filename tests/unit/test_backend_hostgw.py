"""host-gw refuses a public IP that differs from the interface IP (flannel's NAT message)."""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Address, IPv4Network

import pytest

from pyflannel_runtime.backend import registry
from pyflannel_runtime.backend.base import BackendError
from pyflannel_runtime.netdev.types import ExternalInterface
from pyflannel_runtime.wire.lease import Lease, LeaseAttrs
from pyflannel_runtime.wire.netconf import NetworkConfig

CONFIG = NetworkConfig(network=IPv4Network("10.244.0.0/16"), subnet_len=24, backend_type="host-gw")


def test_nat_is_refused_with_flannels_message() -> None:
    ext = ExternalInterface("eth0", 2, 1500, IPv4Address("192.0.2.11"), None,
                            IPv4Address("203.0.113.5"), None)  # fmt: skip

    async def acquire(attrs: LeaseAttrs) -> Lease:
        raise AssertionError("no lease may be asked for")

    with pytest.raises(BackendError) as err:
        asyncio.run(registry.create("host-gw").register_network(CONFIG, ext, acquire))
    assert str(err.value) == (
        "your PublicIP differs from interface IP, meaning that probably you're on a NAT, "
        "which is not supported by host-gw backend"
    )
