"""How long a lease store waits before it tries again: "full jitter" (a delay drawn uniformly
between zero and a ceiling that doubles after each failure in a row, up to a cap).

Agents that lose their datastore at one moment (an etcd restart, an API server upgrade) come
back at scattered moments instead of all at the same instants: without the draw every agent
of a cluster would run the same schedule from the same moment, and the datastore would meet
them all at once as soon as it returns (docs/operating-faults.md).
"""

from __future__ import annotations

import random
from collections.abc import Callable

# The stores' requests and watches: retried after up to 0.1 s, doubling after each failure in
# a row up to 5 s.
FIRST_CEILING = 0.1
CAP = 5.0

# Where a delay's jitter comes from unless a Backoff is given a source: a number in [0, 1].
# bench/bench_etcd_fanout.py's lockstep agents replace it with one that always answers 1.0,
# so that every delay is its ceiling: the schedule without jitter, to compare against.
jitter_source: Callable[[], float] = random.random


def jittered(ceiling: float, draw: Callable[[], float] | None = None) -> float:
    """A delay in [0, ceiling]: `ceiling` times a draw from [0, 1]."""
    return ceiling * (draw or jitter_source)()


class Backoff:
    """The delays of one retry loop: after the n-th failure in a row, a delay in
    [0, min(cap, first * 2**n)]; `reset()` after a success starts again from `first`."""

    def __init__(
        self,
        first: float = FIRST_CEILING,
        cap: float = CAP,
        draw: Callable[[], float] | None = None,
    ) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"a backoff needs 0 < first <= cap, not {first} and {cap}")
        self._first = first
        self._cap = cap
        self._draw = draw or jitter_source
        self._ceiling = first

    @property
    def ceiling(self) -> float:
        """The longest the next delay can be."""
        return self._ceiling

    def next_delay(self) -> float:
        """The delay before the next attempt; the one after may be twice as long."""
        delay = jittered(self._ceiling, self._draw)
        self._ceiling = min(self._ceiling * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._ceiling = self._first
