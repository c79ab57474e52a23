"""Rooms as the media server sees them: the SFU plus kefu's own server-side participant.

Every room with a caller in it gets a server-side participant (``bot``) that hears the room's
mix and speaks into it: until the AI bridge is wired it echoes what it hears. A room whose
only members left are server-side participants is closed by :meth:`RoomService.sweep`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import av
import structlog
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from kefu.mediaserver.events import CallEnded, CallStarted
from kefu.sfu.api import LocalParticipant, Participant, Sfu

log = structlog.get_logger("kefu.rooms")

BotFactory = Callable[[str, MediaStreamTrack, Callable[[object], None]], Any]
SERVER_ROLES = frozenset({"bot", "sip"})
BOT_ID = "kefu-bot"


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
        publish: Callable[[object], None] | None = None,
    ) -> None:
        self.sfu = sfu
        self.publish = publish
        """The event bus: a room with an AI agent is a call (``room:<id>``) on it, and the
        agent's events (transcripts, turns, barge-ins, handoffs) go there as well as to the
        room's data channel."""
        self.no_bot_rooms = no_bot_rooms
        """Rooms where people talk to each other (e.g. the SIP room): no echoing bot."""
        self._bots: dict[str, LocalParticipant] = {}
        self._agents: dict[str, Any] = {}
        self.make_bot: Callable[[str, MediaStreamTrack, Callable[[object], None]], Any] | None = (
            None
        )
        """Builds the AI agent for a room (hears the room's mix); None: the bot echoes."""

    async def join(
        self, room_id: str, participant_id: str, *, role: str, display: str = ""
    ) -> Participant:
        participant = await self.sfu.join(room_id, participant_id, role=role, display=display)
        if role == "customer" and room_id not in self._bots and room_id not in self.no_bot_rooms:
            await self._add_bot(room_id)
        return participant

    def room_exists(self, room_id: str) -> bool:
        return self.sfu.room_exists(room_id)

    async def _add_bot(self, room_id: str) -> None:
        speaks = DeferredTrack()
        bot = await self.sfu.join_local(room_id, BOT_ID, "bot", speaks, display="kefu")
        self._bots[room_id] = bot
        if self.make_bot is None:
            speaks.connect(bot.mixed_audio)
            log.info("room_bot_joined", room=room_id, mode="echo")
            return

        bus = self.publish

        def publish(event: object) -> None:
            if dataclasses.is_dataclass(event):
                bot.publish_event({"type": type(event).__name__, **_fields(event)})
            if bus is not None:
                bus(event)

        if bus is not None:
            bus(CallStarted(room_call_id(room_id), time.time(), "webrtc", room_id))
        agent = self.make_bot(room_id, bot.mixed_audio, publish)
        self._agents[room_id] = agent
        speaks.connect(agent.outbound)
        await agent.start()
        log.info("room_bot_joined", room=room_id, mode="ai")

    async def join_sip(
        self, room_id: str, call_id: str, caller_audio: MediaStreamTrack
    ) -> LocalParticipant:
        """A SIP call as a room participant: its audio published, the room's mix for it."""
        return await self.sfu.join_local(room_id, call_id, "sip", caller_audio, display="phone")

    async def sweep(self) -> None:
        await self.sfu.sweep()
        for info in self.sfu.rooms():
            room_id = info.room_id
            humans = [pid for pid, role in info.participants if role not in SERVER_ROLES]
            if not humans and room_id in self._bots:
                await self._remove_bot(room_id)
                log.info("room_bot_left", room=room_id)
        for room_id in [r for r in self._bots if not self.sfu.room_exists(r)]:
            await self._remove_bot(room_id)

    async def _remove_bot(self, room_id: str) -> None:
        agent = self._agents.pop(room_id, None)
        if agent is not None:
            await agent.close()
            if self.publish is not None:
                self.publish(CallEnded(room_call_id(room_id), time.time(), "room_closed", True))
        bot = self._bots.pop(room_id, None)
        if bot is not None:
            await bot.leave()
        log.info("room_bot_left", room=room_id)

    async def close(self) -> None:
        for room_id in list(self._bots):
            await self._remove_bot(room_id)
        await self.sfu.close()


def room_call_id(room_id: str) -> str:
    """The call id of a room's AI conversation (its agent's and its events' ``call_id``)."""
    return f"room:{room_id}"


def _fields(event: object) -> dict[str, Any]:
    """A JSON-friendly copy of an event dataclass for the room's data channel."""
    out = {}
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        if isinstance(value, str | int | float | bool) or value is None:
            out[f.name] = value
    return out
