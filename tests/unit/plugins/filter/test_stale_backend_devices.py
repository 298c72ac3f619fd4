"""pyflannel.network.stale_backend_devices: the flannel devices the configured backend does
not use, from the preflight's cluster facts."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.pyflannel.network.plugins.filter.stale_backend_devices import (
    stale_backend_devices,
)

from pyflannel_controller.model.cluster import ClusterModel

LINKS = ["lo", "eth0", "cni0", "flannel.1", "flannel-v6.1", "flannel.7", "flannel0"]


def cluster(**settings: object) -> dict[str, object]:
    """The _flannel_cluster fact as the preflight action dumps it."""
    model = ClusterModel.model_validate({"flannel_network": "10.244.0.0/16", **settings})
    return model.model_dump(mode="json", exclude={"nodes"})


@pytest.mark.parametrize(
    ("settings", "stale"),
    [
        ({}, ["flannel.7", "flannel0"]),
        ({"flannel_vxlan_vni": 7}, ["flannel.1", "flannel-v6.1", "flannel0"]),
        (
            {"flannel_backend_type": "host-gw"},
            ["flannel.1", "flannel-v6.1", "flannel.7", "flannel0"],
        ),
        ({"flannel_backend_type": "udp"}, ["flannel.1", "flannel-v6.1", "flannel.7"]),
    ],
)
def test_the_devices_of_other_backends_and_vnis(
    settings: dict[str, object], stale: list[str]
) -> None:
    assert stale_backend_devices(LINKS, cluster(**settings)) == stale


def test_settings_that_are_not_a_cluster_fail_as_a_filter_error() -> None:
    with pytest.raises(AnsibleFilterError, match="flannel_backend_type"):
        stale_backend_devices(LINKS, {})
    with pytest.raises(AnsibleFilterError, match="unknown backend type"):
        stale_backend_devices(LINKS, {"flannel_backend_type": "wireguard"})


def test_with_no_cluster_every_flannel_device_is_stale() -> None:
    assert stale_backend_devices(LINKS, None) == [
        "flannel.1",
        "flannel-v6.1",
        "flannel.7",
        "flannel0",
    ]
