"""A phone call's media in a WebRTC room, where human agents listen in and take over.

``POST /api/calls/{id}/listen`` (or the first takeover) opens the room ``call:<call id>`` in
the front process's SFU with two in-process participants:

* ``phone`` publishes what the caller says (a tap of the SIP leg's decoded audio,
  :mod:`kefu.rtp.taps`); its mix (everyone else in the room) is what the caller hears while a
  human has the call;
* ``kefu`` publishes what the caller hears from the AI (a tap of the bot's track).

An agent's browser joins the room over signaling like any participant and hears both. While
the AI has the call, the SIP leg keeps playing the bot's track directly (the voice loop's
latency is untouched) and the agents' microphones reach nobody: listening is silent, held
back by the SFU itself (:func:`~kefu.mediaserver.agent_presence.floor_for`: only the agent
holding the call is heard, never a supervisor listening in, whatever their browser sends). A
takeover switches the SIP leg to the phone participant's mix — the agents' voices — and
pauses the AI (:meth:`kefu.mediaserver.call.Call.takeover`); a hand-back switches it back.
The taps never hold up the call: a stalled room loses its oldest frames.

If the people in the room all leave while a human holds the call, the call goes back to the
AI after ``calls.agent_grace_s`` (:mod:`.agent_presence`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.mediaserver.agent_presence import AgentPresence, floor_for, tell_caller_agent_lost
from kefu.mediaserver.call_state import CallState
from kefu.sfu.api import LocalParticipant, Sfu
from kefu.sfu.mixer import AudioMixer

if TYPE_CHECKING:
    from kefu.mediaserver.call import Call

log = structlog.get_logger("kefu.agent_room")

AGENT_ROOM_PREFIX = "call:"
"""Rooms named ``call:<call id>`` belong to a phone call and live in the front process."""
PHONE_ID = "phone"
BOT_ID = "kefu"


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
    presence: AgentPresence

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
        call_ref = call

        def gone() -> None:
            call_ref.handback("kefu: the agent's connection was lost")
            if call_ref.agent is not None:
                tell_caller_agent_lost(call_ref.agent, call_ref.spawn)

        presence = AgentPresence(
            sfu,
            room_id,
            held=lambda: call_ref.state is CallState.HUMAN_ACTIVE,
            on_gone=gone,
            grace_s=grace_s,
            log=call.log,
        )
        phone.on_event = presence.on_room_event
        sfu.set_floor(room_id, floor_for(call))
        return cls(room_id, phone, bot, presence)

    @property
    def people(self) -> AudioMixer:
        """What the caller hears from the room: every participant but the caller, mixed."""
        return self.phone.mixed_audio

    async def close(self) -> None:
        self.presence.cancel()
        if self.bot is not None:
            await self.bot.leave()
        await self.phone.leave()
