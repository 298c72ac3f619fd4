"""pyflannel_controller/rolling.py: the agent role's batch size, taken as Ansible's serial takes it, and the
order of restarts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_controller.rolling import AgentState, BatchSizeError, batch_size, restart_batches


@pytest.mark.parametrize(
    ("value", "hosts", "size"),
    [
        (1, 3, 1),
        (2, 3, 2),
        (5, 3, 5),  # more than there are: one batch
        ("2", 3, 2),  # -e flannel_agent_restart_batch=2
        (" 3 ", 10, 3),
        ("25%", 10, 2),  # rounded down, as serial
        ("30%", 10, 3),
        ("67%", 3, 2),
        ("100%", 3, 3),
        ("1%", 3, 1),  # at least one host
        ("50%", 1, 1),
    ],
)
def test_a_number_of_hosts_or_a_percentage_of_them(value: object, hosts: int, size: int) -> None:
    assert batch_size(value, hosts) == size


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "at least one host"),
        ("0", "at least one host"),
        (-1, "at least one host"),
        ("0%", "1% to 100%"),
        ("101%", "1% to 100%"),
        ("abc", "expected a number of hosts"),
        ("2.5", "expected a number of hosts"),
        (2.0, "expected a number of hosts"),
        ("", "expected a number of hosts"),
        (None, "expected a number of hosts"),
        (True, "expected a number of hosts"),
        ([1], "expected a number of hosts"),
    ],
)
def test_anything_else_is_refused_saying_what_is_expected(value: object, says: str) -> None:
    with pytest.raises(BatchSizeError, match=says) as err:
        batch_size(value, 3)
    assert repr(value) in str(err.value)


DOWN, OUTDATED, CURRENT = AgentState.DOWN, AgentState.OUTDATED, AgentState.CURRENT


def test_down_agents_start_first_all_at_once_then_outdated_ones_in_turn() -> None:
    states = {"n1": OUTDATED, "n2": DOWN, "n3": CURRENT, "n4": OUTDATED, "n5": DOWN, "n6": OUTDATED}
    assert restart_batches(states, 1) == [["n2", "n5"], ["n1"], ["n4"], ["n6"]]
    assert restart_batches(states, 2) == [["n2", "n5"], ["n1", "n4"], ["n6"]]


def test_nothing_to_restart_is_no_batch() -> None:
    assert restart_batches({"n1": CURRENT, "n2": CURRENT}, 1) == []
    assert restart_batches({}, 1) == []


@given(
    st.dictionaries(st.text(min_size=1, max_size=4), st.sampled_from(list(AgentState))),
    st.integers(min_value=1, max_value=6),
)
def test_every_host_that_needs_it_restarts_once_in_order(
    states: dict[str, AgentState], size: int
) -> None:
    batches = restart_batches(states, size)
    restarted = [host for batch in batches for host in batch]
    assert restarted == sorted(
        (h for h, s in states.items() if s is not CURRENT),
        key=lambda h: (states[h] is not DOWN, list(states).index(h)),
    )
    rolling = batches[1:] if any(s is DOWN for s in states.values()) else batches
    assert all(1 <= len(batch) <= size for batch in rolling)
    assert all(states[h] is OUTDATED for batch in rolling for h in batch)
