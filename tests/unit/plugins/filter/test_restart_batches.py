"""pyflannel.network.restart_batches: the agent role's batches, from each host's agent state,
and a bad batch size named by its variable."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.pyflannel.network.plugins.filter.restart_batches import (
    restart_batches,
)

STATES = {"node1": "current", "node2": "outdated", "node3": "outdated", "node4": "down"}


def test_down_hosts_first_then_the_outdated_ones_a_batch_at_a_time() -> None:
    assert restart_batches(STATES, 1, 4) == [["node4"], ["node2"], ["node3"]]
    assert restart_batches(STATES, "50%", 4) == [["node4"], ["node2", "node3"]]


def test_a_bad_batch_size_names_the_variable() -> None:
    with pytest.raises(AnsibleFilterError, match=r"^flannel_agent_restart_batch: '0%': a percent"):
        restart_batches(STATES, "0%", 4)


def test_an_unknown_state_is_a_filter_error() -> None:
    with pytest.raises(AnsibleFilterError, match="'stopped' is not a valid AgentState"):
        restart_batches({"node1": "stopped"}, 1, 1)
