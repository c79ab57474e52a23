"""Dialog state replicated to Redis each turn, read back by another node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from helpers.poll import until

from kefu.ai_bridge.dialog.state import DialogState
from kefu.cluster.dialog_store import DIALOG_PREFIX, ReplicatedSessionStore
from kefu.cluster.redis_link import RedisLink, stop_tasks
from loadtest.redis_peer import RedisPeer


async def _store(url: str) -> tuple[ReplicatedSessionStore, list[asyncio.Task[None]]]:
    link = RedisLink(url, interval_s=0.2)
    await link.connect(required=True)
    store = ReplicatedSessionStore(link, ttl_s=60)
    return store, [asyncio.create_task(link.watch()), asyncio.create_task(store.run_writer())]


@pytest.fixture
async def stores(
    redis_peer: RedisPeer,
) -> AsyncIterator[tuple[ReplicatedSessionStore, ReplicatedSessionStore]]:
    a, ta = await _store(redis_peer.url)
    b, tb = await _store(redis_peer.url)
    yield a, b
    await stop_tasks([*ta, *tb])
    await a.link.close()
    await b.link.close()


def _state(turns: int) -> DialogState:
    return DialogState(
        "room-lobby",
        turns=turns,
        last_intent="reset_password",
        slots=(("order_id", "A123"),),
        history=(("caller", "how do I reset my password"), ("bot", "Open settings.")),
    )


async def test_a_turn_written_on_one_node_is_read_on_another(
    stores: tuple[ReplicatedSessionStore, ReplicatedSessionStore],
) -> None:
    a, b = stores
    await a.put(_state(1))

    async def written() -> bool:
        return await a.link.client.exists(DIALOG_PREFIX + "room-lobby") == 1

    await until(written)
    got = await b.get("room-lobby")
    assert got == _state(1)
    assert b.describe()["restored"] == 1
    assert await b.get("room-lobby") == _state(1)  # now from memory
    assert b.describe()["restored"] == 1


async def test_an_ended_call_is_deleted_everywhere(
    stores: tuple[ReplicatedSessionStore, ReplicatedSessionStore],
) -> None:
    a, b = stores
    await a.put(_state(2))
    await a.delete("room-lobby")

    async def gone() -> bool:
        return a.describe()["pending"] == 0

    await until(gone)
    assert await b.get("room-lobby") is None


async def test_turns_go_on_while_redis_is_lost_and_are_written_when_it_returns(
    stores: tuple[ReplicatedSessionStore, ReplicatedSessionStore], redis_peer: RedisPeer
) -> None:
    a, b = stores
    redis_peer.stop()
    for turns in range(1, 4):
        await a.put(_state(turns))
        assert await a.get("room-lobby") == _state(turns)  # the call goes on from memory

    async def lost() -> bool:
        return not a.link.up

    await until(lost)
    assert a.describe()["pending"] == 1  # only the latest state of the call waits
    redis_peer.restart()

    async def synced() -> bool:
        return a.describe()["pending"] == 0 and b.link.up

    await until(synced, within=15)
    assert await b.get("room-lobby") == _state(3)
