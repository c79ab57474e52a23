"""Where a signaling socket belongs in a cluster (kefu.cluster.routing), against real Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from kefu.cluster.node import ClusterNode
from kefu.cluster.registry import NodeInfo
from kefu.cluster.routing import ClusterRouting
from kefu.cluster.settings import ClusterConfig, StateConfig
from kefu.mediaserver.bus import EventBus
from loadtest.redis_peer import RedisPeer


def _join(room: object) -> str:
    return json.dumps({"v": 1, "type": "join", "room": room})


def _info(node: str, **kw: object) -> NodeInfo:
    return NodeInfo(node, f"http://{node}:8080", f"{node}:5060", max_calls=100, max_rooms=10,
                    **kw)  # type: ignore[arg-type]  # fmt: skip


async def _node(url: str, node_id: str) -> ClusterNode:
    node = ClusterNode(StateConfig(redis_url=url), ClusterConfig(node_id=node_id), bus=EventBus())
    await node.connect()
    return node


@pytest.fixture
async def here(redis_peer: RedisPeer) -> AsyncIterator[ClusterRouting]:
    a = await _node(redis_peer.url, "a")
    b = await _node(redis_peer.url, "b")
    for node, info in ((a, _info("a", rooms=5)), (b, _info("b", rooms=1))):
        await node.registry.beat(info)
    a.nodes = {n.id: n for n in await a.registry.nodes()}
    yield ClusterRouting(a, key="k", pinned=frozenset({"sip-room"}))
    for node in (a, b):
        await node.link.close()


async def test_a_new_room_goes_to_the_least_loaded_node_and_stays_there(
    here: ClusterRouting,
) -> None:
    assert await here.node_for(_join("lobby")) == "http://b:8080"
    assert await here.node.registry.room_node("lobby") == "b"
    assert await here.node_for(_join("lobby")) == "http://b:8080"


async def test_a_room_hosted_here_is_served_here(here: ClusterRouting) -> None:
    await here.node.registry.claim_room("mine", "a")
    assert await here.node_for(_join("mine")) is None


async def test_an_agent_room_goes_to_the_node_of_its_call(here: ClusterRouting) -> None:
    await here.node.link.client.set("kefu:call:c-42", "b")
    assert await here.node_for(_join("call:c-42")) == "http://b:8080"
    assert await here.node_for(_join("call:unknown")) is None
    assert await here.node_for(_join("sip-room")) is None  # every node has its own


async def test_a_resume_goes_to_the_node_that_issued_the_session(here: ClusterRouting) -> None:
    await here.node.link.client.set("kefu:session:s-1", "b")
    resume = json.dumps({"v": 1, "type": "resume", "session": "s-1", "token": "t"})
    assert await here.node_for(resume) == "http://b:8080"
    gone = json.dumps({"v": 1, "type": "resume", "session": "s-2", "token": "t"})
    assert await here.node_for(gone) is None  # answered here: unknown_session


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '"join"', _join(7), _join(""), json.dumps({"type": "ping"}), "[" * 50_000],
)
async def test_anything_else_is_left_to_this_node_s_hub(here: ClusterRouting, text: str) -> None:
    assert await here.node_for(text) is None


async def test_with_redis_lost_every_socket_is_served_here(
    here: ClusterRouting, redis_peer: RedisPeer
) -> None:
    redis_peer.stop()
    assert await here.node_for(_join("elsewhere")) is None
    assert here.node.link.up is False
