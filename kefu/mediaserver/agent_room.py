"""A phone call's media in a WebRTC room, where human agents listen in and take over.

``POST /api/calls/{id}/listen`` (or the first takeover) opens the room ``call:<call id>`` in
the front process's SFU with two in-process participants:

* ``phone`` publishes what the caller says (a tap of the SIP leg's decoded audio,
  :mod:`kefu.rtp.taps`); its mix (everyone else in the room) is what the caller hears while a
  human has the call;
* ``kefu`` publishes what the caller hears from the AI (a tap of the bot's track).

An agent's browser joins the room over signaling like any participant and hears both. While
the AI has the call, the SIP leg keeps playing the bot's track directly (the voice loop's
latency is untouched) and the agents' microphones reach nobody: listening is silent. A
takeover switches the SIP leg to the phone participant's mix — the agents' voices — and
pauses the AI (:meth:`kefu.mediaserver.call.Call.takeover`); a hand-back switches it back.
The taps never hold up the call: a stalled room loses its oldest frames.

If the people in the room all leave while a human holds the call (the agent's browser closed,
their network dropped), the call goes back to the AI after ``calls.agent_grace_s`` unless one
of them is back by then, and the AI tells the caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.mediaserver.call_state import CallState
from kefu.sfu.api import LocalParticipant, Sfu

if TYPE_CHECKING:
    from kefu.mediaserver.call import Call

log = structlog.get_logger("kefu.agent_room")

AGENT_ROOM_PREFIX = "call:"
"""Rooms named ``call:<call id>`` belong to a phone call and live in the front process."""
PHONE_ID = "phone"
BOT_ID = "kefu"
SERVER_ROLES = frozenset({"sip", "bot"})
AGENT_LOST = {
    "en": "Sorry, my colleague's connection dropped. I'm back with you: how can I help?",
    "zh": "抱歉，人工客服的连接中断了。我继续为您服务，请问有什么可以帮您？",
}
"""What the AI says when the call comes back to it because its agent vanished."""


def agent_room_id(call_id: str) -> str:
    return f"{AGENT_ROOM_PREFIX}{call_id}"


@dataclass(eq=False)
class AgentRoom:
    """The room of one phone call (see the module's doc); :meth:`open` builds it."""

    room_id: str
    phone: LocalParticipant
    """The caller in the room; ``phone.mixed_audio`` is what the caller hears from people."""
    bot: LocalParticipant | None
    """The AI's voice in the room (None for a call without an AI agent)."""
    sfu: Sfu
    call: Call
    grace_s: float = 10.0
    _grace: asyncio.TimerHandle | None = field(default=None, repr=False)

    @classmethod
    async def open(cls, sfu: Sfu, call: Call, *, grace_s: float = 10.0) -> AgentRoom:
        ep = call.endpoint
        if ep is None:
            raise ValueError(f"call {call.id} has no media yet")
        room_id = agent_room_id(call.id)
        caller: MediaStreamTrack = ep.inbound.taps.open()
        phone = await sfu.join_local(room_id, PHONE_ID, "sip", caller, display="phone")
        bot = None
        if call.agent is not None:
            voice: MediaStreamTrack = call.agent.outbound.taps.open()
            bot = await sfu.join_local(room_id, BOT_ID, "bot", voice, display="kefu")
        call.log.info("agent_room_opened", room=room_id)
        room = cls(room_id, phone, bot, sfu, call, grace_s)
        phone.on_event = room._on_room_event
        return room

    def humans(self) -> list[str]:
        """The participants who are people (agents, supervisors), not kefu's own."""
        for info in self.sfu.rooms():
            if info.room_id == self.room_id:
                return [pid for pid, role in info.participants if role not in SERVER_ROLES]
        return []

    def _on_room_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "participant_joined" and self._grace is not None and self.humans():
            self._grace.cancel()
            self._grace = None
            self.call.log.info("agent_back", room=self.room_id)
        elif kind == "participant_left" and self._grace is None and not self.humans():
            if self.call.state is CallState.HUMAN_ACTIVE:
                self.call.log.warning("agent_vanished", room=self.room_id, grace_s=self.grace_s)
                loop = asyncio.get_running_loop()
                self._grace = loop.call_later(self.grace_s, self._agent_gone)

    def _agent_gone(self) -> None:
        """The grace is over and nobody came back: the AI has the call again and says so."""
        self._grace = None
        call = self.call
        if call.state is not CallState.HUMAN_ACTIVE or self.humans():
            return
        call.handback("kefu: the agent's connection was lost")
        agent = call.agent
        if agent is not None:
            text = AGENT_LOST["zh" if agent.lang == "zh" else "en"]
            call.spawn(agent.responder.say(text, None), "agent-lost")

    @property
    def people(self) -> MediaStreamTrack:
        """What the caller hears from the room: every participant but the caller, mixed."""
        return self.phone.mixed_audio

    async def close(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        if self.bot is not None:
            await self.bot.leave()
        await self.phone.leave()
