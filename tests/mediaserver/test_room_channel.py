"""A room's data channel reads its call's events from the bus, in their documented JSON form."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiortc.mediastreams import AudioStreamTrack, MediaStreamTrack

from kefu.ai_bridge.events import BargeIn, Utterance
from kefu.ai_bridge.trace import TurnTrace
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import CallEnded, CallStarted, DtmfReceived
from kefu.mediaserver.room_calls import room_call_id
from kefu.mediaserver.rooms import ROOM_CHANNEL_QUEUE, RoomService
from kefu.sfu.api import PeerSettings, Sfu


class Agent:
    """Stands in for the AI agent: the test publishes what an agent would."""

    def __init__(self, publish: Callable[[object], None]) -> None:
        self.publish = publish
        self.outbound = AudioStreamTrack()
        self.closed = False

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def room_with_listener(bus: EventBus) -> tuple[RoomService, list[dict[str, Any]], Agent]:
    """A room with a customer (so kefu's AI joins) and an in-process member that records what
    the room's data channel broadcasts."""
    rooms = RoomService(Sfu(PeerSettings()), bus=bus)
    agents: list[Agent] = []

    def make_bot(room_id: str, hears: MediaStreamTrack, publish: Any) -> Agent:
        agents.append(Agent(publish))
        return agents[-1]

    rooms.make_bot = make_bot
    heard: list[dict[str, Any]] = []
    listener = await rooms.sfu.join_local("r1", "listener", "sip", AudioStreamTrack())
    listener.on_event = heard.append
    await rooms.join("r1", "alice", role="customer")
    return rooms, heard, agents[0]


async def test_the_data_channel_gets_its_calls_transcript_as_json_and_nothing_else() -> None:
    bus = EventBus()
    started: list[object] = []
    bus.attach(started.append)
    rooms, heard, agent = await room_with_listener(bus)
    call = room_call_id("r1")
    assert isinstance(started[0], CallStarted) and started[0].call_id == call
    agent.publish(Utterance(call, 1, "caller", "where is my parcel", "en", time.monotonic()))
    agent.publish(TurnTrace(call, 1, *([time.monotonic()] * 6), "where", "order", "kb", "x", False))
    bus.publish(Utterance("room:other", 1, "caller", "not this room", "en", time.monotonic()))
    bus.publish(DtmfReceived(call, time.time(), "5", "rfc4733"))
    agent.publish(Utterance(call, 1, "bot", "It ships in two days.", "en", time.monotonic()))
    agent.publish(BargeIn(call, 2, time.monotonic(), time.monotonic(), 120.0, 300.0))
    await until(lambda: len([e for e in heard if "v" in e]) >= 3)
    await asyncio.sleep(0.05)
    mine = [e for e in heard if "v" in e]
    assert [e["type"] for e in mine] == ["transcript.final", "transcript.final", "turn.barge_in"]
    assert [e["text"] for e in mine[:2]] == ["where is my parcel", "It ships in two days."]
    assert all(e["call_id"] == call and e["v"] == 1 for e in mine)
    assert mine[0]["speaker"] == "caller" and mine[0]["at"] > 1e9  # UNIX time, not loop time
    await rooms.close()
    assert agent.closed and bus.subscriber_count == 0
    ended = [e for e in started if isinstance(e, CallEnded)]
    assert [e.call_id for e in ended] == [call]


async def test_a_stalled_channel_loses_its_oldest_events_and_says_how_many() -> None:
    bus = EventBus()
    rooms, heard, agent = await room_with_listener(bus)
    call = room_call_id("r1")
    total = ROOM_CHANNEL_QUEUE + 36
    for n in range(total):  # no await in between: the forwarder cannot run
        agent.publish(Utterance(call, n, "caller", f"line {n}", "en", time.monotonic()))
    await until(lambda: any(e.get("text") == f"line {total - 1}" for e in heard))
    dropped = [e for e in heard if e.get("type") == "events.dropped"]
    lines = [e["turn_id"] for e in heard if e.get("type") == "transcript.final"]
    assert dropped == [{"v": 1, "type": "events.dropped", "count": 36}]
    assert lines == list(range(36, total))
    await rooms.close()


class FlushableTrack(AudioStreamTrack):
    def flush(self) -> int:
        return 0


class PausableAgent(Agent):
    """Also takes takeover and hand-back, and says the phrase it is asked to."""

    lang = "en"

    def __init__(self, publish: Callable[[object], None]) -> None:
        super().__init__(publish)
        self.outbound = FlushableTrack()
        self.floor: list[str] = []
        self.said: list[str] = []
        self.responder = self

    def pause(self) -> None:
        self.floor.append("pause")

    def resume(self) -> None:
        self.floor.append("resume")

    async def say(self, text: str, turn_id: int | None) -> None:
        self.said.append(text)


async def test_a_web_call_is_taken_over_handed_back_and_returns_when_the_agent_vanishes() -> None:
    from kefu.errors import CallStateConflict
    from kefu.mediaserver.events import CallStateChanged

    bus = EventBus()
    changes: list[object] = []
    bus.attach(lambda e: changes.append(e) if isinstance(e, CallStateChanged) else None)
    rooms = RoomService(Sfu(PeerSettings()), bus=bus, agent_grace_s=0.2)
    agents: list[PausableAgent] = []

    def make_bot(room_id: str, hears: MediaStreamTrack, publish: Any) -> PausableAgent:
        agents.append(PausableAgent(publish))
        return agents[-1]

    rooms.make_bot = make_bot
    await rooms.join("r1", "alice", role="customer")
    call = rooms.call("room:r1")
    assert call.summary()["channel"] == "webrtc" and call.summary()["state"] == "ai_active"
    ann = await rooms.sfu.join_local("r1", "ann", "agent", AudioStreamTrack(), display="Ann")
    call.takeover("ann")
    with pytest.raises(CallStateConflict) as info:
        call.takeover("bob")
    assert info.value.owner == "ann" and call.summary()["owner"] == "ann"
    call.handback("ann")
    call.takeover("ann")
    assert agents[0].floor == ["pause", "resume", "pause"]
    await ann.leave()  # the agent's browser vanished
    await asyncio.sleep(0.05)
    assert call.state.value == "human_active"  # within the grace
    await until(lambda: call.state.value == "ai_active", within=3.0)
    await asyncio.sleep(0.05)
    assert agents[0].floor[-1] == "resume" and "colleague" in agents[0].said[0]
    reasons = [(c.new, c.reason) for c in changes]  # type: ignore[attr-defined]
    assert reasons[-1] == ("ai_active", "handed back by kefu: the agent's connection was lost")
    with pytest.raises(KeyError):
        rooms.call("room:nope")
    await rooms.close()
    assert rooms.calls == {}
