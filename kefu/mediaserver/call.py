"""A call and its controller: its legs, its room, its AI agent, its state machine.

A :class:`Call` owns what it is made of — the caller's signalling leg (:class:`Leg`; SIP today,
WebRTC later), the RTP endpoint carrying its media, the AI agent or the room it talks to — and
moves through the table in :mod:`kefu.mediaserver.call_state` only through its operations
(:meth:`Call.transfer`, :meth:`Call.takeover`, :meth:`Call.handback`, ...). Each operation
checks the table first (a request the current state does not allow raises
:class:`~kefu.errors.CallStateConflict` and changes nothing), then performs its action, and
applies the transition only once the action succeeded. Tearing a call down (ports, tasks,
tracks, metrics) is the call lifecycle's job: :mod:`kefu.mediaserver.calls`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from kefu.ai_bridge.agent import CallAgent
from kefu.errors import CallStateConflict
from kefu.mediaserver.agent_room import AgentRoom
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call_state import (
    TRANSFER_FAILED,
    CallInput,
    CallState,
    allowed,
    next_state,
)
from kefu.mediaserver.events import CallStateChanged
from kefu.mediaserver.media import Silence
from kefu.rtp.aio import RtpEndpoint
from kefu.sip.offer_answer import Negotiated


class Leg(Protocol):
    """The caller's signalling leg, as the controller acts on it (SIP: :class:`SipLeg`)."""

    def refer(self, target: str) -> None:
        """Ask the caller's side to call ``target`` instead; raises if it cannot be sent."""

    def hangup(self) -> None:
        """End the leg (BYE, or CANCEL/487 before answer)."""


@dataclass(eq=False)
class Call:
    leg: str
    """The SIP user agent's handle for this call's dialog."""
    bus: EventBus
    source: str
    """Where the trunk sent the INVITE from (host:port)."""
    caller_uri: str = ""
    """The INVITE's From URI (who is calling, as the trunk says)."""
    language: str = "auto"
    """The AI's language mode for the call (``en``, ``zh``, ``auto``; see
    :func:`kefu.ai_bridge.listen.asr.language.call_language`)."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    state: CallState = CallState.RINGING
    created: float = field(default_factory=time.time)
    received_monotonic: float = field(default_factory=time.monotonic)
    answered: float | None = None
    caller: Leg | None = None
    """Acts on the caller's signalling leg (REFER, hang-up); None only in tests."""
    endpoint: RtpEndpoint | None = None
    negotiated: Negotiated | None = None
    transfer_target: str | None = None
    transfer_from: CallState | None = None
    """The state the transfer in progress started from (where a failed one returns)."""
    agent: CallAgent | None = None
    """The AI agent serving the call (media mode ``ai``)."""
    room: Any = None
    """The WebRTC room participant when the call was put into a room (``calls.sip_room``)."""
    agent_room: AgentRoom | None = None
    """The room where human agents listen in and take over (:mod:`.agent_room`)."""
    owner: str | None = None
    """The human who holds the call while ``human_active``."""
    recording: Any = None
    """Its :class:`~kefu.mediaserver.recording.CallRecording` (``calls.record``,
    ``calls.record_trunks``), or None."""
    trunk_host: str = ""
    """The trunk's IP address: where an incoming INVITE came from; an outbound call's proxy,
    or its called URI's host (``calls.record_trunks`` is matched against it)."""
    direction: str = "inbound"
    """``inbound`` (the trunk called kefu) or ``outbound`` (kefu called: POST /api/calls)."""
    callee_uri: str = ""
    """An outbound call's called URI."""
    media_mode: str | None = None
    """This call's media mode (an outbound call's ``media_mode``); None: ``calls.media_mode``."""
    context: dict[str, Any] = field(default_factory=dict)
    """An outbound call's ``context`` object, as the API was given it."""
    _agent_room_opening: asyncio.Future[AgentRoom] | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    end_reason: str | None = None
    log: Any = None
    _held: Silence | None = None
    """What the caller hears while the AI's voice is held (human_active)."""

    def __post_init__(self) -> None:
        self.log = structlog.get_logger("kefu.call").bind(call_id=self.id, leg=self.leg)

    # --- the state machine ------------------------------------------------------------------

    def apply(self, event: CallInput, reason: str = "") -> CallState:
        """Move along the table (InvalidTransition if it has no such move) and publish it."""
        old = self.state
        self.state = next_state(old, event)
        if self.state is CallState.AI_ACTIVE and self.answered is None:
            self.answered = time.time()
        self.log.info("call_state", old=old.value, new=self.state.value, reason=reason)
        self.bus.publish(
            CallStateChanged(self.id, time.time(), old.value, self.state.value, reason)
        )
        return self.state

    def require(self, event: CallInput, action: str) -> None:
        """CallStateConflict (carrying the current state) unless the table allows ``event``."""
        if not allowed(self.state, event):
            raise CallStateConflict(self.id, self.state.value, action)

    # --- control operations: check, act, then apply ----------------------------------------

    def transfer(self, target: str) -> None:
        """REFER the caller to ``target`` (already validated); ``transferring`` once sent."""
        self.require(CallInput.TRANSFER, "transfer")
        if self.caller is None:
            raise ValueError("call has no leg to transfer")
        self.caller.refer(target)  # raises: nothing changed
        self.transfer_target = target
        self.transfer_from = self.state
        self.apply(CallInput.TRANSFER, f"REFER to {target}")

    def transfer_failed(self, status: int) -> None:
        """The REFER or the new call failed: back to the state the transfer started from."""
        origin = self.transfer_from or CallState.AI_ACTIVE
        self.transfer_from = None
        self.apply(TRANSFER_FAILED[origin], f"transfer failed: {status}")

    def takeover(self, who: str) -> None:
        """A human takes the call: the AI's voice is held, the caller hears the agent room's
        people (silence without a room), ``human_active``. Exactly one human holds a call: a
        second takeover is a conflict naming the owner."""
        if not allowed(self.state, CallInput.TAKEOVER):
            raise CallStateConflict(self.id, self.state.value, "take over", owner=self.owner)
        self._hold_ai(True, who)
        self.owner = who
        self.apply(CallInput.TAKEOVER, f"taken over by {who}")

    def handback(self, who: str) -> None:
        """The human gives the call back to the AI: its voice resumes, ``ai_active``."""
        self.require(CallInput.HANDBACK, "hand back")
        self._hold_ai(False, who)
        self.owner = None
        self.apply(CallInput.HANDBACK, f"handed back by {who}")

    async def open_agent_room(self, sfu: Any, *, grace_s: float = 10.0) -> AgentRoom:
        """The call's agent room, opened once however many agents ask at the same time.

        CallStateConflict unless a human or the AI has the call.
        """
        if self.state not in (CallState.AI_ACTIVE, CallState.HUMAN_ACTIVE):
            raise CallStateConflict(self.id, self.state.value, "listen in", owner=self.owner)
        if self.agent_room is not None:
            return self.agent_room
        if self._agent_room_opening is None:
            coro = AgentRoom.open(sfu, self, grace_s=grace_s)
            self._agent_room_opening = asyncio.ensure_future(coro)
        try:
            room = await asyncio.shield(self._agent_room_opening)
        except Exception:
            self._agent_room_opening = None
            raise
        if self.end_reason is not None:  # the call ended while the room opened
            self._agent_room_opening = None
            await room.close()
            raise CallStateConflict(self.id, self.state.value, "listen in")
        self.agent_room = room
        return room

    def _hold_ai(self, held: bool, who: str) -> None:
        """Hold (or release) the AI agent towards the caller.

        The agent pauses (stops answering, drops what it had queued, keeps transcribing the
        caller) or resumes; the caller's leg plays silence instead of the agent's track (the
        agent pauses its own track for barge-in, so holding it there would not last).
        """
        agent = self.agent
        if agent is None:
            return
        if held:
            agent.pause()
        else:
            agent.resume()
        agent.outbound.flush()
        if self.endpoint is None or self.room is not None:
            return
        if held and self.agent_room is not None:
            self.endpoint.play(self.agent_room.people)
            # What the caller hears from people is transcribed as the agent's side.
            agent.hear_agent(self.agent_room.people.taps.open(), who)
        elif held:
            self._held = Silence()
            self.endpoint.play(self._held)
        else:
            agent.stop_hearing_agent()
            self.endpoint.play(agent.outbound)
            if self._held is not None:
                self._held.stop()
                self._held = None

    # --- ownership --------------------------------------------------------------------------

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        """Run a task owned by this call; it is cancelled when the call ends."""
        task = asyncio.create_task(coro, name=f"{name}:{self.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def summary(self) -> dict[str, Any]:
        n = self.negotiated
        stats = self.endpoint.stats if self.endpoint else None
        return {
            "call_id": self.id,
            "state": self.state.value,
            "source": self.source,
            "created": self.created,
            "answered": self.answered,
            "channel": "sip",
            "direction": self.direction,
            "caller": self.caller_uri,
            **({"callee": self.callee_uri, "context": self.context} if self.callee_uri else {}),
            "room": self.agent_room.room_id if self.agent_room is not None else None,
            "owner": self.owner,
            "codec": n.codec if n else None,
            "rtp": (
                {
                    "received": stats.packets_received,
                    "sent": stats.packets_sent,
                    "lost": stats.packets_lost,
                    "jitter_ms": round(stats.jitter_ms, 2),
                    "srtp": n.srtp.suite if n and n.srtp else None,
                    "srtp_dropped": self.endpoint.srtp_dropped if self.endpoint else 0,
                }
                if stats
                else None
            ),
        }
