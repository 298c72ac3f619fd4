"""When an existing flannel.<VNI> can be reused (flannel-io/flannel pkg/backend/vxlan/device.go:
vxlanLinksIncompat), and the VTEP MAC shape (pkg/mac/mac.go: NewHardwareAddr)."""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_address

import pytest

from pyflannel_runtime.backend.vxlan.device import (
    ExistingVxlan,
    VxlanDeviceSpec,
    incompatibility,
    random_vtep_mac,
)

SPEC = VxlanDeviceSpec("flannel.1", 1, "0a:58:0a:f4:01:00", 1450, 2, ip_address("192.0.2.11"))
SAME = ExistingVxlan("vxlan", 1, 2, ip_address("192.0.2.11"), None, False, 8472, False)


def test_compatible_ignores_mtu_mac_learning_and_unset_values() -> None:
    assert incompatibility(SAME, replace(SPEC, mtu=9000, mac="02:00:00:00:00:01")) is None
    assert incompatibility(replace(SAME, link_index=0, local=None), SPEC) is None
    assert incompatibility(SAME, replace(SPEC, port=0)) is None  # kernel port vs unset


@pytest.mark.parametrize(
    ("existing", "spec", "reason"),
    [
        (ExistingVxlan("veth"), SPEC, "link type"),
        (replace(SAME, vni=2), SPEC, "vni"),
        (replace(SAME, link_index=7), SPEC, "interface"),
        (replace(SAME, local=ip_address("192.0.2.99")), SPEC, "IP"),
        (replace(SAME, group=ip_address("239.1.1.1")), SPEC, "group"),
        (replace(SAME, l2miss=True), SPEC, "l2miss"),
        (SAME, replace(SPEC, port=4789), "port"),
        (SAME, replace(SPEC, gbp=True), "gbp"),
    ],
)
def test_incompatible(existing: ExistingVxlan, spec: VxlanDeviceSpec, reason: str) -> None:
    why = incompatibility(existing, spec)
    assert why is not None and reason in why


def test_random_mac_is_locally_administered_unicast() -> None:
    for _ in range(50):
        first = int(random_vtep_mac()[:2], 16)
        assert first & 0x02 and not first & 0x01
