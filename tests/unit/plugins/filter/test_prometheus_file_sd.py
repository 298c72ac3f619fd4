"""pyflannel.network.prometheus_file_sd: the agent role's file_sd document, one target group per
node, as Prometheus's file-based service discovery reads it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.pyflannel.network.plugins.filter.prometheus_file_sd import (
    prometheus_file_sd,
)


def test_one_group_per_node_in_order_labelled_with_its_name() -> None:
    nodes = {"node2": "198.51.100.12", "node1": "fd00::11", "node3": None, "node4": "[fd00::14]"}
    assert prometheus_file_sd(nodes, "8081", {"backend": "vxlan", "network": "10.244.0.0/16"}) == [
        {
            "targets": ["198.51.100.12:8081"],
            "labels": {"node": "node2", "backend": "vxlan", "network": "10.244.0.0/16"},
        },
        {
            "targets": ["[fd00::11]:8081"],
            "labels": {"node": "node1", "backend": "vxlan", "network": "10.244.0.0/16"},
        },
        {  # no address: its name
            "targets": ["node3:8081"],
            "labels": {"node": "node3", "backend": "vxlan", "network": "10.244.0.0/16"},
        },
        {
            "targets": ["[fd00::14]:8081"],
            "labels": {"node": "node4", "backend": "vxlan", "network": "10.244.0.0/16"},
        },
    ]


def test_no_nodes_no_targets() -> None:
    assert prometheus_file_sd({}, 8081) == []


@pytest.mark.parametrize("port", [0, 70000, "http"])
def test_a_port_prometheus_cannot_scrape_is_refused(port: object) -> None:
    with pytest.raises(AnsibleFilterError, match="prometheus_file_sd: port"):
        prometheus_file_sd({"node1": "198.51.100.11"}, port)
