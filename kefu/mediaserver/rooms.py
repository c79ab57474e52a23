"""Rooms as the media server sees them: the SFU plus kefu's own server-side participant.

Every room with a caller in it gets a server-side participant (``bot``) that hears the room's
mix and speaks into it: until the AI bridge is wired it echoes what it hears. A room whose
only members left are server-side participants is closed by :meth:`RoomService.sweep`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import av
import structlog
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from kefu.ai_bridge.avatar.stream import attach_room_avatar
from kefu.ai_bridge.events import BargeIn, HandoffRequested, Utterance
from kefu.mediaserver.agent_presence import AgentPresence, floor_for
from kefu.mediaserver.agent_room import agent_room_id
from kefu.mediaserver.bus import EventBus, Subscription
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.events import (
    CallAssigned,
    CallEnded,
    CallStarted,
    CallStateChanged,
    event_json,
)
from kefu.mediaserver.room_calls import ROOM_CALL_PREFIX, RoomCall, room_call_id
from kefu.sfu.api import LocalParticipant, Participant, Sfu

log = structlog.get_logger("kefu.rooms")

BotFactory = Callable[[str, MediaStreamTrack, Callable[[object], None]], Any]
BOT_ID = "kefu-bot"
ROOM_CHANNEL_EVENTS: tuple[type, ...] = (Utterance, BargeIn, HandoffRequested, CallStateChanged)
"""What a room's data channel carries of its call's events (the caller page's transcript and
states), in their JSON form; turn traces and the rest stay with staff readers."""
ROOM_CHANNEL_QUEUE = 64
"""Events waiting for a room's data channel; a stalled room loses its oldest."""


class DeferredTrack(MediaStreamTrack):
    """A track whose upstream is connected after it was handed out (the bot hears itself
    only once it has joined)."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._upstream: MediaStreamTrack | None = None
        self._ready = asyncio.Event()

    def connect(self, upstream: MediaStreamTrack) -> None:
        self._upstream = upstream
        self._ready.set()

    async def recv(self) -> av.AudioFrame:
        await self._ready.wait()
        if self._upstream is None or self.readyState != "live":
            raise MediaStreamError
        frame = await self._upstream.recv()
        assert isinstance(frame, av.AudioFrame)
        return frame

    def stop(self) -> None:
        super().stop()
        self._ready.set()


class RoomService:
    """What signaling talks to (the Sfu contract), plus kefu's server-side participants."""

    def __init__(
        self,
        sfu: Sfu,
        *,
        no_bot_rooms: frozenset[str] = frozenset(),
        bus: EventBus | None = None,
        agent_grace_s: float = 10.0,
    ) -> None:
        self.sfu = sfu
        self.bus = bus if bus is not None else EventBus()
        """A room with an AI agent is a call (``room:<id>``) on the bus; the room's data
        channel is one of the bus's readers (:data:`ROOM_CHANNEL_EVENTS`)."""
        self.no_bot_rooms = no_bot_rooms
        """Rooms where people talk to each other (e.g. the SIP room): no echoing bot."""
        self._bots: dict[str, LocalParticipant] = {}
        self._agents: dict[str, Any] = {}
        self._channels: dict[str, tuple[Subscription, asyncio.Task[None]]] = {}
        self.calls: dict[str, RoomCall] = {}
        """The AI conversations of this process's rooms, by call id (``room:<id>``)."""
        self.agent_grace_s = agent_grace_s
        self.bus.attach(self._floor_changed)
        self.make_bot: Callable[[str, MediaStreamTrack, Callable[[object], None]], Any] | None = (
            None
        )
        """Builds the AI agent for a room (hears the room's mix); None: the bot echoes."""

    async def join(
        self, room_id: str, participant_id: str, *, role: str, display: str = "", user: str = ""
    ) -> Participant:
        participant = await self.sfu.join(
            room_id, participant_id, role=role, display=display, user=user
        )
        if role == "customer" and room_id not in self._bots and room_id not in self.no_bot_rooms:
            await self._add_bot(room_id)
        return participant

    def room_exists(self, room_id: str) -> bool:
        return self.sfu.room_exists(room_id)

    async def _add_bot(self, room_id: str) -> None:
        speaks = DeferredTrack()
        # the AI recognises the caller: it hears each packet as it arrives (prompt mix)
        bot = await self.sfu.join_local(
            room_id, BOT_ID, "bot", speaks, display="kefu", prompt_mix=True
        )
        self._bots[room_id] = bot
        if self.make_bot is None:
            speaks.connect(bot.mixed_audio)
            log.info("room_bot_joined", room=room_id, mode="echo")
            return

        call_id = room_call_id(room_id)
        sub = self.bus.subscribe(
            lambda e: isinstance(e, ROOM_CHANNEL_EVENTS) and e.call_id == call_id,  # type: ignore[attr-defined]
            queue_size=ROOM_CHANNEL_QUEUE,
        )
        task = asyncio.create_task(_to_data_channel(sub, bot), name=f"room-channel:{room_id}")
        self._channels[room_id] = (sub, task)
        self.bus.publish(CallStarted(call_id, time.time(), "webrtc", room_id))
        agent = self.make_bot(room_id, bot.mixed_audio, self.bus.publish)
        self._agents[room_id] = agent
        # web rooms only: SIP calls have none
        attach_room_avatar(
            agent,
            bot.publish_binary,
            lambda fanout: self.sfu.publish_video(room_id, BOT_ID, fanout),
            owner_id=BOT_ID,
        )
        call = RoomCall(room_id, agent, self.bus.publish)
        call.presence = AgentPresence(
            self.sfu,
            room_id,
            held=lambda: call.state is CallState.HUMAN_ACTIVE,
            on_gone=call.agent_gone,
            grace_s=self.agent_grace_s,
            log=call.log,
        )
        bot.on_event = call.presence.on_room_event
        self.sfu.set_floor(room_id, floor_for(call))
        self.calls[call.id] = call
        speaks.connect(agent.outbound)
        await agent.start()
        log.info("room_bot_joined", room=room_id, mode="ai")

    def _floor_changed(self, event: object) -> None:
        """A bus sink: a call changed hands, so who may be heard in its room changes."""
        if isinstance(event, CallStateChanged | CallAssigned):
            call_id = event.call_id
            if call_id.startswith(ROOM_CALL_PREFIX):
                self.sfu.apply_floor(call_id[len(ROOM_CALL_PREFIX) :])
            else:
                self.sfu.apply_floor(agent_room_id(call_id))

    async def join_sip(
        self, room_id: str, call_id: str, caller_audio: MediaStreamTrack
    ) -> LocalParticipant:
        """A SIP call as a room participant: its audio published, the room's mix for it."""
        return await self.sfu.join_local(room_id, call_id, "sip", caller_audio, display="phone")

    def call(self, call_id: str) -> RoomCall:
        """The AI conversation ``room:<id>`` hosted here; KeyError if none."""
        if not call_id.startswith(ROOM_CALL_PREFIX):
            raise KeyError(call_id)
        return self.calls[call_id]

    async def sweep(self) -> None:
        await self.sfu.sweep()
        for info in self.sfu.rooms():
            room_id = info.room_id
            # The AI serves the room's callers: once the last one has left, the call is over
            # (agents still in the room, listening or not, do not keep it going).
            callers = [pid for pid, role in info.participants if role == "customer"]
            if not callers and room_id in self._bots:
                await self._remove_bot(room_id)
                log.info("room_bot_left", room=room_id)
        for room_id in [r for r in self._bots if not self.sfu.room_exists(r)]:
            await self._remove_bot(room_id)

    async def _remove_bot(self, room_id: str) -> None:
        call = self.calls.pop(room_call_id(room_id), None)
        if call is not None:
            call.close()
        agent = self._agents.pop(room_id, None)
        if agent is not None:
            await agent.close()
            self.bus.publish(CallEnded(room_call_id(room_id), time.time(), "room_closed", True))
        channel = self._channels.pop(room_id, None)
        if channel is not None:
            sub, task = channel
            self.bus.unsubscribe(sub)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        bot = self._bots.pop(room_id, None)
        if bot is not None:
            await bot.leave()
        log.info("room_bot_left", room=room_id)

    async def close(self) -> None:
        for room_id in list(self._bots):
            await self._remove_bot(room_id)
        await self.sfu.close()


async def _to_data_channel(sub: Subscription, bot: LocalParticipant) -> None:
    """Forward a room's call events to its data channel until cancelled; tells the page how
    many it lost when the channel fell behind."""
    async for event in sub:
        lost = sub.take_dropped()
        if lost:
            bot.publish_event({"v": 1, "type": "events.dropped", "count": lost})
        bot.publish_event(event_json(event))
