"""Human agents and a web caller's call: a caller who asks for a person waits for an agent like
a phone caller, and is told when nobody can come (the AI stays with them); an agent who holds
the call passes it to a colleague over the HTTP API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiortc.mediastreams import AudioStreamTrack, MediaStreamTrack
from helpers.inproc import server_config

from kefu.ai_bridge.events import HandoffRequested
from kefu.mediaserver.agent_queue import NO_AGENT
from kefu.mediaserver.events import AgentWait, CallAssigned
from kefu.mediaserver.server import KefuServer
from kefu.signaling.tokens import mint_token
from tests.mediaserver.test_room_channel import PausableAgent, until

pytestmark = pytest.mark.netns

SECRET = "web-call-agents-test-secret-of-32-bytes+"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[KefuServer]:
    config = server_config(tmp_path, calls={"agent_wait_s": 0.5}, auth={"jwt_secret": SECRET})
    srv = KefuServer(config)
    await srv.start()
    yield srv
    await srv.stop()


async def web_call(server: KefuServer, room: str) -> PausableAgent:
    agents: list[PausableAgent] = []

    def make_bot(room_id: str, hears: MediaStreamTrack, publish: Any) -> PausableAgent:
        agents.append(PausableAgent(publish))
        return agents[-1]

    server.rooms.make_bot = make_bot
    await server.rooms.join(room, "carol", role="customer")
    return agents[0]


async def test_with_nobody_signed_in_the_ai_says_it_stays(server: KefuServer) -> None:
    waits = server.bus.subscribe(lambda e: isinstance(e, AgentWait))
    agent = await web_call(server, "help-1")
    server.bus.publish(HandoffRequested("room:help-1", "caller asked"))
    await until(lambda: bool(agent.said))
    assert agent.said == [NO_AGENT["en"]]
    assert waits.queue.empty()  # it never waited: there was nobody to wait for
    (listed,) = await server.list_calls()
    assert (listed["state"], listed["waiting_since"]) == ("ai_active", None)


async def test_a_waiting_web_call_is_picked_or_told_when_the_wait_runs_out(
    server: KefuServer,
) -> None:
    server.agent_queue.agents_online = lambda: 1
    waits = server.bus.subscribe(lambda e: isinstance(e, AgentWait))
    first = await web_call(server, "help-2")
    server.bus.publish(HandoffRequested("room:help-2", "caller asked"))
    wait = await asyncio.wait_for(waits.queue.get(), 3.0)
    assert isinstance(wait, AgentWait)
    assert (wait.call_id, wait.waiting, wait.position) == ("room:help-2", True, 1)
    (listed,) = await server.list_calls()
    assert listed["waiting_since"] is not None
    await server.takeover("room:help-2", "ann")  # an agent picks it: the wait is over
    done = await asyncio.wait_for(waits.queue.get(), 3.0)
    assert isinstance(done, AgentWait) and (done.waiting, done.outcome) == (False, "taken")
    assert first.said == [] and first.floor == ["pause"]

    second = await web_call(server, "help-3")
    server.bus.publish(HandoffRequested("room:help-3", "caller asked"))
    wait = await asyncio.wait_for(waits.queue.get(), 3.0)
    assert isinstance(wait, AgentWait) and wait.call_id == "room:help-3"
    done = await asyncio.wait_for(waits.queue.get(), 3.0)  # calls.agent_wait_s = 0.5
    assert isinstance(done, AgentWait) and (done.waiting, done.outcome) == (False, "timeout")
    await until(lambda: bool(second.said))
    assert second.said == [NO_AGENT["en"]]


async def test_an_agent_passes_a_web_call_to_a_colleague_who_then_joins_it(
    server: KefuServer,
) -> None:
    agent = await web_call(server, "pass-1")
    assigned = server.bus.subscribe(lambda e: isinstance(e, CallAssigned))
    host, port = server.http_address
    base = f"http://{host}:{port}/api/calls/room:pass-1"

    def auth(user: str, role: str = "agent") -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_token(SECRET, user, role, 600.0)}"}

    async with aiohttp.ClientSession() as http:

        async def post(path: str, who: str, role: str = "agent", **body: Any) -> Any:
            async with http.post(f"{base}/{path}", json=body, headers=auth(who, role)) as r:
                return r.status, await r.json()

        # Nobody holds it yet: there is nothing to pass on.
        status, answer = await post("transfer", "ann", agent="bob")
        assert (status, answer["error"]["state"]) == (409, "ai_active")
        assert (await post("takeover", "ann"))[0] == 200
        for bad in ("", " ", "x" * 200, "bo\nb", 5, None):
            status, answer = await post("transfer", "ann", agent=bad)
            assert (status, answer["error"]["code"]) == (400, "bad_request"), bad
        # Only its holder (or a supervisor) passes a call on.
        status, answer = await post("transfer", "sue", agent="sue")
        assert (status, answer["error"]["owner"]) == (409, "ann")
        assert await post("transfer", "ann", agent="bob") == (
            200,
            {"status": "assigned", "owner": "bob"},
        )
        event = await asyncio.wait_for(assigned.queue.get(), 3.0)
        assert isinstance(event, CallAssigned)
        assert (event.call_id, event.old, event.new, event.by) == (
            "room:pass-1",
            "ann",
            "bob",
            "ann",
        )
        # Bob takes it over: he joins the room; the AI stays paused (no second pause).
        assert await post("takeover", "bob") == (200, {"status": "human_active", "room": "pass-1"})
        status, answer = await post("takeover", "ann")
        assert (status, answer["error"]["owner"]) == (409, "bob")
        assert await post("transfer", "lee", "supervisor", agent="sue") == (
            200,
            {"status": "assigned", "owner": "sue"},
        )
        (listed,) = await server.list_calls()
        assert (listed["state"], listed["owner"]) == ("human_active", "sue")
    assert agent.floor == ["pause"]


async def test_the_call_ends_when_its_caller_leaves_even_with_agents_still_in_the_room(
    server: KefuServer,
) -> None:
    await web_call(server, "bye-1")
    ended = server.bus.subscribe(lambda e: getattr(e, "call_id", "") == "room:bye-1")
    sfu = server.rooms.sfu
    await sfu.join_local("bye-1", "s-1", "supervisor", AudioStreamTrack(), user="sue")
    customer = sfu.participant("bye-1", "carol")
    assert customer is not None
    await customer.leave()  # type: ignore[attr-defined]
    await server.rooms.sweep()
    event = await asyncio.wait_for(ended.queue.get(), 3.0)
    assert (type(event).__name__, getattr(event, "reason", "")) == ("CallEnded", "room_closed")
    assert server.rooms.calls == {} and await server.list_calls() == []


async def test_only_the_holder_or_a_supervisor_hands_a_call_back(server: KefuServer) -> None:
    agent = await web_call(server, "hold-1")
    host, port = server.http_address
    base = f"http://{host}:{port}/api/calls/room:hold-1"

    async with aiohttp.ClientSession() as http:

        async def post(path: str, who: str, role: str = "agent") -> tuple[int, Any]:
            token = mint_token(SECRET, who, role, 600.0)
            headers = {"Authorization": f"Bearer {token}"}
            async with http.post(f"{base}/{path}", headers=headers) as r:
                return r.status, await r.json()

        assert (await post("takeover", "ann"))[0] == 200
        status, answer = await post("handback", "bob")  # a colleague cannot
        assert (status, answer["error"]["owner"]) == (409, "ann")
        assert "hand back a call ann holds" in answer["error"]["message"]
        assert agent.floor == ["pause"]  # nothing changed
        assert await post("handback", "lee", "supervisor") == (200, {"status": "ai_active"})
        assert agent.floor == ["pause", "resume"]
