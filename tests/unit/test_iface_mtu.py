"""FLANNEL_MTU per backend (spec §5, §12 item 9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.netdev import backend_mtu


@pytest.mark.parametrize(
    ("backend", "iface_mtu", "configured", "expected"),
    [
        ("vxlan", 1500, 0, 1450),
        ("vxlan", 9000, 0, 8950),
        ("vxlan", 1500, 1400, 1350),  # Backend.MTU replaces the interface MTU
        ("udp", 1500, 0, 1472),
        ("udp", 1500, 1400, 1472),  # udp has no MTU option
        ("host-gw", 1400, 0, 1400),
        ("host-gw", 1400, 9000, 1400),
        ("alloc", 1500, 0, 1500),
        ("ipip", 1500, 0, 1480),
        ("ipip", 1500, 1300, 1480),
        ("wireguard", 1500, 0, 1420),
        ("wireguard", 1500, 1380, 1300),
    ],
)
def test_backend_mtu(backend: str, iface_mtu: int, configured: int, expected: int) -> None:
    assert backend_mtu(backend, iface_mtu, configured) == expected


@pytest.mark.parametrize("backend", ["VXLAN", "extension", "ipsec", ""])
def test_unknown_backend(backend: str) -> None:
    with pytest.raises(ValueError, match="unknown backend type"):
        backend_mtu(backend, 1500)


@given(st.integers(68, 65535), st.integers(-1, 0))
def test_non_positive_configured_mtu_means_interface_mtu(iface_mtu: int, configured: int) -> None:
    assert backend_mtu("vxlan", iface_mtu, configured) == iface_mtu - 50
    assert backend_mtu("wireguard", iface_mtu, configured) == iface_mtu - 80
