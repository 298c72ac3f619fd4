"""Retry delays with full jitter (pyflannel_runtime/subnet/backoff.py), and the retry loops that
use them: the etcd store's requests and the agent's first request, against an endpoint that
refuses every connection, their sleeps recorded."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyflannel_runtime.agent.flags import parse_flags
from pyflannel_runtime.agent.main import CONFIG_RETRY_SECONDS, Agent
from pyflannel_runtime.subnet import backoff
from pyflannel_runtime.subnet.backoff import Backoff, jittered
from pyflannel_runtime.subnet.etcd.etcd import EtcdSettings, EtcdSubnetManager

draws = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40)
bounds = st.tuples(st.floats(1e-3, 10.0), st.floats(1.0, 1000.0)).map(
    lambda b: (b[0], b[0] * b[1])  # first <= cap
)


def scripted(values: list[float]) -> Callable[[], float]:
    """A jitter source answering `values` in turn."""
    answers = iter(values)
    return lambda: next(answers)


def ceilings(first: float, cap: float, count: int) -> list[float]:
    return [min(cap, first * 2**n) for n in range(count)]


@given(bounds, draws)
def test_every_delay_is_the_ceiling_times_the_draw_within_zero_and_the_cap(
    bound: tuple[float, float], values: list[float]
) -> None:
    first, cap = bound
    schedule = Backoff(first, cap, scripted(values))
    delays = [schedule.next_delay() for _ in values]
    assert all(0.0 <= delay <= cap for delay in delays)
    expected = ceilings(first, cap, len(values))
    assert delays == [ceiling * draw for ceiling, draw in zip(expected, values, strict=True)]


@given(bounds, st.integers(0, 40))
def test_the_ceiling_doubles_after_each_failure_up_to_the_cap(
    bound: tuple[float, float], failures: int
) -> None:
    first, cap = bound
    schedule = Backoff(first, cap, lambda: 0.5)
    seen = []
    for _ in range(failures + 1):
        seen.append(schedule.ceiling)
        schedule.next_delay()
    assert seen == ceilings(first, cap, failures + 1)


@given(bounds, st.integers(0, 20), draws)
def test_a_success_starts_the_schedule_again(
    bound: tuple[float, float], failures: int, values: list[float]
) -> None:
    first, cap = bound
    schedule = Backoff(first, cap, scripted([1.0] * failures + values))
    for _ in range(failures):
        schedule.next_delay()
    schedule.reset()
    assert schedule.ceiling == first
    fresh = Backoff(first, cap, scripted(values))
    assert [schedule.next_delay() for _ in values] == [fresh.next_delay() for _ in values]


@pytest.mark.parametrize(("first", "cap"), [(0.0, 5.0), (-1.0, 5.0), (6.0, 5.0)])
def test_a_schedule_needs_a_positive_first_ceiling_under_the_cap(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="0 < first <= cap"):
        Backoff(first, cap)


def test_agents_that_fail_together_retry_apart() -> None:
    """Fifty schedules started at one moment (one etcd restart seen by fifty agents): their
    delays differ, where without the draw they would all be the ceiling."""
    rng = random.Random(36)
    schedules = [Backoff(0.1, 5.0, rng.random) for _ in range(50)]
    for step in range(8):
        delays = [schedule.next_delay() for schedule in schedules]
        assert len(set(delays)) == 50
        assert max(delays) <= min(5.0, 0.1 * 2**step)


@given(st.floats(0.0, 1e6), st.floats(0.0, 1.0))
def test_one_jittered_wait_lies_between_zero_and_its_ceiling(ceiling: float, draw: float) -> None:
    assert jittered(ceiling, lambda: draw) == ceiling * draw
    assert 0.0 <= jittered(ceiling) <= ceiling


def test_without_a_source_the_module_source_is_drawn_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one place jitter comes from (the bench's lockstep agents answer 1.0 there: every
    delay its ceiling, the schedule without jitter)."""
    monkeypatch.setattr(backoff, "jitter_source", lambda: 1.0)
    schedule = Backoff(0.1, 5.0)
    assert [schedule.next_delay() for _ in range(8)] == ceilings(0.1, 5.0, 8)
    assert jittered(60.0) == 60.0


# --- the loops ---------------------------------------------------------------------------------


class Stop(Exception):
    """Ends a retry loop from inside its sleep."""


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    """An http:// endpoint on a port nothing listens on: every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield f"http://127.0.0.1:{port}"


DRAWS = [0.5, 1.0, 0.25, 0.75, 0.125, 1.0, 0.0625, 0.5, 0.9]


def logged_delays(caplog: pytest.LogCaptureFixture, pattern: str) -> list[str]:
    return [m.group(1) for r in caplog.records if (m := re.search(pattern, r.getMessage()))]


def test_etcd_requests_are_retried_after_jittered_delays(
    refusing_endpoint: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(backoff, "jitter_source", scripted(DRAWS))
    slept: list[float] = []

    async def sleep(delay: float, *args: Any) -> None:
        slept.append(delay)
        if len(slept) == len(DRAWS):
            raise Stop()

    async def watch() -> None:
        manager = EtcdSubnetManager(EtcdSettings(endpoints=(refusing_endpoint,)))
        try:
            with monkeypatch.context() as patch:
                patch.setattr(asyncio, "sleep", sleep)
                await anext(manager.watch_leases())  # its listing first, retried
        finally:
            await manager.close()

    with caplog.at_level(logging.WARNING), pytest.raises(Stop):
        asyncio.run(watch())
    expected = [c * d for c, d in zip(ceilings(0.1, 5.0, len(DRAWS)), DRAWS, strict=True)]
    assert slept == expected
    shown = logged_delays(caplog, r"etcd request failed, retrying in (\d+\.\d)s")
    assert shown == [f"{delay:.1f}" for delay in expected]


def test_the_network_config_is_asked_for_again_after_jittered_waits(
    refusing_endpoint: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's first request: until the datastore answers, each wait is drawn from
    [0, 2 s], and a stop ends the waiting."""
    agent = Agent(parse_flags([f"--etcd-endpoints={refusing_endpoint}"], environ={}))
    waits: list[float] = []

    def draw() -> float:
        if len(waits) == len(DRAWS) - 1:
            agent._stop.set()  # a signal while waiting: no more attempts
        return DRAWS[len(waits)]

    monkeypatch.setattr(backoff, "jitter_source", draw)
    real_wait_for = asyncio.wait_for

    async def wait_for(awaitable: Any, timeout: float) -> Any:
        waits.append(timeout)
        return await real_wait_for(awaitable, 0)

    async def first_request() -> object:
        manager = EtcdSubnetManager(EtcdSettings(endpoints=(refusing_endpoint,)))
        try:
            with monkeypatch.context() as patch:
                patch.setattr(asyncio, "wait_for", wait_for)
                return await agent._get_config(manager)
        finally:
            await manager.close()

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(first_request()) is None
    assert waits == [2 * CONFIG_RETRY_SECONDS * draw for draw in DRAWS]
    assert caplog.text.count("Couldn't fetch network config") == len(DRAWS)
