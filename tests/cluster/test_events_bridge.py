"""The event bus across nodes over a real redis-server, including Redis lost and back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from helpers.poll import until

from kefu.cluster.events_bridge import EventsBridge
from kefu.cluster.redis_link import RedisLink, stop_tasks
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import CallStarted, RelayedEvent
from loadtest.redis_peer import RedisPeer


class _Node:
    def __init__(self, url: str, node_id: str) -> None:
        self.bus = EventBus()
        self.link = RedisLink(url, interval_s=0.2)
        self.bridge = EventsBridge(self.link, self.bus, node_id, buffer=50)
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.link.connect(required=True)
        await self.bridge.start_reading()
        self.bus.attach(self.bridge.read)
        for coro in (self.link.watch(), self.bridge.run_writer(), self.bridge.run_reader()):
            self.tasks.append(asyncio.create_task(coro))

    async def close(self) -> None:
        await stop_tasks(self.tasks)
        await self.bridge.close()
        await self.link.close()


@pytest.fixture
async def two_nodes(redis_peer: RedisPeer) -> AsyncIterator[tuple[_Node, _Node]]:
    a, b = _Node(redis_peer.url, "node-a"), _Node(redis_peer.url, "node-b")
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


async def _take(queue: asyncio.Queue[object], n: int, within: float = 5.0) -> list[object]:
    out = []
    async with asyncio.timeout(within):
        while len(out) < n:
            out.append(await queue.get())
    return out


async def test_an_event_on_one_node_reaches_the_other_once(
    two_nodes: tuple[_Node, _Node],
) -> None:
    a, b = two_nodes
    seen_a, seen_b = a.bus.subscribe(), b.bus.subscribe()
    a.bus.publish(CallStarted("c-1", time.time(), "sip", "+8613800000000"))
    [got] = await _take(seen_b.queue, 1)
    assert isinstance(got, RelayedEvent)
    assert (got.call_id, got.node) == ("c-1", "node-a")
    assert got.body["type"] == "call.started" and got.body["node"] == "node-a"
    assert got.body["source"] == "+8613800000000"
    # a sees its own event once (from its bus), never echoed back from Redis.
    [own] = await _take(seen_a.queue, 1)
    assert isinstance(own, CallStarted)
    await asyncio.sleep(0.5)
    assert seen_a.queue.empty() and seen_b.queue.empty()


async def test_events_written_while_redis_is_away_arrive_when_it_returns(
    two_nodes: tuple[_Node, _Node], redis_peer: RedisPeer
) -> None:
    a, b = two_nodes
    seen_b = b.bus.subscribe()
    a.bus.publish(CallStarted("before", time.time(), "sip", "1"))
    await _take(seen_b.queue, 1)
    redis_peer.stop()
    for i in range(5):
        a.bus.publish(CallStarted(f"during-{i}", time.time(), "sip", "1"))
    await until(lambda: not a.link.up)
    assert a.bridge.describe()["buffered"] == 5
    redis_peer.restart()
    got = await _take(seen_b.queue, 5, within=15)
    assert [e.call_id for e in got] == [f"during-{i}" for i in range(5)]  # type: ignore[attr-defined]
    assert a.bridge.describe()["buffered"] == 0


async def test_a_full_buffer_drops_the_oldest_and_counts_them(redis_peer: RedisPeer) -> None:
    node = _Node(redis_peer.url, "n")
    await node.link.connect(required=True)
    node.bus.attach(node.bridge.read)  # no writer running: everything stays buffered
    for i in range(60):
        node.bus.publish(CallStarted(f"c{i}", time.time(), "sip", "1"))
    assert node.bridge.describe() == {"sent": 0, "received": 0, "buffered": 50, "dropped": 10}
    with contextlib.suppress(Exception):
        await node.close()
