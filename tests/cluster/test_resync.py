"""A Redis that restarts empty: each node writes back its rooms, calls and dialog states."""

from __future__ import annotations

import asyncio

from helpers.poll import until

from kefu.ai_bridge.dialog.state import DialogState
from kefu.cluster.node import ClusterNode, Hosted
from kefu.cluster.redis_link import REDIS_ERRORS
from kefu.cluster.settings import ClusterConfig, StateConfig
from kefu.mediaserver.bus import EventBus
from loadtest.redis_peer import RedisPeer


async def test_a_node_writes_back_what_it_hosts_when_an_empty_redis_returns(
    redis_peer: RedisPeer,
) -> None:
    node = ClusterNode(
        StateConfig(redis_url=redis_peer.url),
        ClusterConfig(node_id="a", heartbeat_s=0.2, node_ttl_s=2.0),
        bus=EventBus(),
        hosted=lambda: Hosted(["lobby"], ["room:lobby", "sip-call-1"]),
    )
    await node.connect()
    await node.start(http="http://a:8080", sip="a:5060")
    try:
        await node.store.put(DialogState("room:lobby", turns=2, last_intent="returns"))
        registry = node.registry
        await until(lambda: node.store.describe()["pending"] == 0)
        redis_peer.restart()  # empty: no rooms, calls, dialogs or heartbeats any more

        async def back() -> bool:
            try:  # the first command after the restart may meet a dead pooled connection
                rooms = await registry.rooms()
                calls = [await registry.call_node(c) for c in ("room:lobby", "sip-call-1")]
                raw = await node.link.client.get("kefu:dialog:room:lobby")
            except REDIS_ERRORS:
                return False
            return rooms == {"lobby": "a"} and calls == ["a", "a"] and raw is not None

        await until(back, within=15)
        raw = await node.link.client.get("kefu:dialog:room:lobby")
        assert DialogState.from_json(raw).turns == 2
    finally:
        await node.stop()
        await asyncio.sleep(0)
