"""The unbounded, coalescing hand-off from the node watch to the lease consumer.

flannel's informer pushed every node event into a bounded channel and blocked (then spawned
re-senders) when it was full; at a few thousand nodes that deadlocked. Here a producer never
waits: only the newest state of each node is kept until the consumer takes it, and a full
re-list replaces whatever was still queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from pyflannel_runtime.subnet.kube.nodes import Node, ReadLease, UnreadableNode

NodeState = Node | UnreadableNode | ReadLease


@dataclass(frozen=True)
class NodeSnapshot:
    """A full listing: every node that exists, by name."""

    nodes: Mapping[str, NodeState]


NodeChanges = list[tuple[str, NodeState | None]]  # (name, newest state or None when deleted)


class NodeQueue:
    """Single consumer; producers call ``put``/``put_snapshot`` on the event loop's thread."""

    def __init__(self) -> None:
        self._pending: dict[str, NodeState | None] = {}
        self._snapshot: NodeSnapshot | None = None
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._pending) + (self._snapshot is not None)

    def put(self, name: str, node: NodeState | None) -> None:
        self.put_all([(name, node)])

    def put_all(self, changes: NodeChanges) -> None:
        """Changes in the order they happened (a later one of a node replaces an earlier)."""
        self._pending.update(changes)
        self._ready.set()

    def put_snapshot(self, nodes: Mapping[str, NodeState]) -> None:
        # Whatever was queued happened before the listing, which already reflects it.
        self._pending.clear()
        self._snapshot = NodeSnapshot(dict(nodes))
        self._ready.set()

    async def get(self) -> NodeSnapshot | NodeChanges:
        """The pending snapshot if there is one, else every pending change at once."""
        while self._snapshot is None and not self._pending:
            self._ready.clear()
            await self._ready.wait()
        if self._snapshot is not None:
            snapshot, self._snapshot = self._snapshot, None
            return snapshot
        changes = list(self._pending.items())
        self._pending.clear()
        return changes
