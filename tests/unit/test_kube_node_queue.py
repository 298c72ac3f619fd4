"""The coalescing node hand-off between the watch thread and the lease consumer."""

from __future__ import annotations

import asyncio

from pyflannel_runtime.subnet.kube.node_queue import NodeQueue, NodeSnapshot


def test_only_the_newest_state_of_each_node_waits() -> None:
    async def scenario() -> object:
        queue = NodeQueue()
        for version in range(1000):
            queue.put("a", {"v": version})
        queue.put("b", {"v": 0})
        queue.put("a", None)
        assert len(queue) == 2
        return await queue.get()

    assert asyncio.run(scenario()) == [("a", None), ("b", {"v": 0})]


def test_a_snapshot_supersedes_earlier_changes_and_precedes_later_ones() -> None:
    async def scenario() -> list[object]:
        queue = NodeQueue()
        queue.put("old", {"v": 1})
        queue.put_snapshot({"a": {"v": 2}})
        queue.put("b", {"v": 3})
        return [await queue.get(), await queue.get()]

    first, second = asyncio.run(scenario())
    assert first == NodeSnapshot({"a": {"v": 2}})
    assert second == [("b", {"v": 3})]


def test_get_waits_for_a_producer_on_another_thread() -> None:
    async def scenario() -> object:
        queue = NodeQueue()
        loop = asyncio.get_running_loop()
        waiter = asyncio.create_task(queue.get())
        await asyncio.sleep(0)
        assert not waiter.done()
        await asyncio.to_thread(lambda: loop.call_soon_threadsafe(queue.put, "a", {"v": 1}))
        return await waiter

    assert asyncio.run(scenario()) == [("a", {"v": 1})]
