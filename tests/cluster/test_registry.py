"""The node and room registry against a real redis-server."""

from __future__ import annotations

import asyncio

from kefu.cluster.redis_link import RedisLink
from kefu.cluster.registry import NodeInfo, Registry
from loadtest.redis_peer import RedisPeer


async def _registry(peer: RedisPeer, node: str, ttl: float = 5.0) -> tuple[RedisLink, Registry]:
    link = RedisLink(peer.url)
    await link.connect(required=True)
    return link, Registry(link.client, node, node_ttl_s=ttl)


async def test_a_heartbeat_lists_the_node_until_it_expires(redis_peer: RedisPeer) -> None:
    link, reg = await _registry(redis_peer, "a", ttl=0.4)
    await reg.beat(NodeInfo("a", "http://127.0.0.1:1", "127.0.0.1:2", calls=3, rooms=1))
    [node] = await reg.nodes()
    assert (node.id, node.http, node.calls, node.rooms) == ("a", "http://127.0.0.1:1", 3, 1)
    await asyncio.sleep(0.6)
    assert await reg.nodes() == []
    await link.close()


async def test_of_many_claims_on_one_room_exactly_one_wins(redis_peer: RedisPeer) -> None:
    links, regs = zip(*[await _registry(redis_peer, n) for n in ("a", "b", "c")], strict=True)
    for reg in regs:
        await reg.beat(NodeInfo(reg.node_id, "http://x", "y"))
    claims = [reg.claim_room("lobby", reg.node_id) for reg in regs for _ in range(10)]
    winners = set(await asyncio.gather(*claims))
    assert len(winners) == 1
    [winner] = winners
    assert await regs[0].room_node("lobby") == winner
    assert await regs[1].rooms() == {"lobby": winner}
    for link in links:
        await link.close()


async def test_a_room_whose_node_is_gone_is_claimed_anew(redis_peer: RedisPeer) -> None:
    link_a, a = await _registry(redis_peer, "a", ttl=0.3)
    link_b, b = await _registry(redis_peer, "b", ttl=5.0)
    await a.beat(NodeInfo("a", "http://a", "a"))
    await b.beat(NodeInfo("b", "http://b", "b"))
    assert await b.claim_room("r1", "b") == "b"
    assert await a.claim_room("r2", "a") == "a"
    assert await b.claim_room("r2", "b") == "a"  # a lives: b cannot take its room
    await asyncio.sleep(0.5)  # a stops beating
    assert await b.room_node("r2") is None
    assert await b.rooms() == {"r1": "b"}
    assert await b.claim_room("r2", "b") == "b"
    await link_a.close()
    await link_b.close()


async def test_calls_and_sessions_point_at_live_nodes_only(redis_peer: RedisPeer) -> None:
    link, reg = await _registry(redis_peer, "a", ttl=0.3)
    await reg.beat(NodeInfo("a", "http://a", "a"))
    await reg.note_call("c1", live=True)
    await reg.note_session("s1")
    assert await reg.call_node("c1") == "a"
    assert await reg.session_node("s1") == "a"
    await reg.note_call("c1", live=False)
    assert await reg.call_node("c1") is None
    await asyncio.sleep(0.5)
    assert await reg.session_node("s1") is None
    await link.close()


def test_a_heartbeat_round_trips_as_json() -> None:
    info = NodeInfo("n", "http://h:1", "h:2", rtp="1-9", pid=7, calls=2, draining=True)
    assert NodeInfo.from_json(info.to_json()) == info
    assert NodeInfo.from_json("[1]") is None
    assert NodeInfo.from_json('{"id": "n", "unknown": 1}') is None
    assert NodeInfo.from_json("{") is None
