"""A web caller's conversation with the AI as a call agents can take over (``room:<id>``).

A WebRTC room with a customer in it gets kefu's AI as a participant (:mod:`.rooms`); that
conversation is the call ``room:<room id>`` on the bus and in ``GET /api/calls``. An agent or
supervisor joins the customer's room over signaling like any participant (the SFU forwards
their voice to the caller and the caller's to them; the workbench keeps its microphone muted
while listening in). :meth:`RoomCall.takeover` silences and pauses the AI — it keeps
transcribing — and :meth:`RoomCall.handback` gives the call back to it, along the same state
table as a phone call (:mod:`.call_state`). Only one human holds a call: a second takeover is
a conflict naming the owner. An agent who vanishes gives the call back to the AI after the
grace period (:mod:`.agent_presence`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from kefu.errors import CallStateConflict
from kefu.mediaserver.agent_presence import AgentPresence, tell_caller_agent_lost
from kefu.mediaserver.call_state import CallInput, CallState, allowed, next_state
from kefu.mediaserver.events import CallStateChanged

ROOM_CALL_PREFIX = "room:"


def room_call_id(room_id: str) -> str:
    """The call id of a room's AI conversation (its agent's and its events' ``call_id``)."""
    return f"{ROOM_CALL_PREFIX}{room_id}"


@dataclass(eq=False)
class RoomCall:
    room_id: str
    agent: Any
    """The room's :class:`~kefu.ai_bridge.agent.CallAgent`."""
    publish: Callable[[object], None]
    created: float = field(default_factory=time.time)
    state: CallState = CallState.AI_ACTIVE
    owner: str | None = None
    presence: AgentPresence | None = None
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    log: Any = None

    def __post_init__(self) -> None:
        self.log = structlog.get_logger("kefu.room_call").bind(call_id=self.id)

    @property
    def id(self) -> str:
        return room_call_id(self.room_id)

    def _move(self, event: CallInput, reason: str) -> None:
        old = self.state
        self.state = next_state(old, event)
        self.log.info("call_state", old=old.value, new=self.state.value, reason=reason)
        self.publish(CallStateChanged(self.id, time.time(), old.value, self.state.value, reason))

    def takeover(self, who: str) -> None:
        if not allowed(self.state, CallInput.TAKEOVER):
            raise CallStateConflict(self.id, self.state.value, "take over", owner=self.owner)
        self.agent.pause()
        self.agent.outbound.flush()
        self.owner = who
        self._move(CallInput.TAKEOVER, f"taken over by {who}")

    def handback(self, who: str) -> None:
        if not allowed(self.state, CallInput.HANDBACK):
            raise CallStateConflict(self.id, self.state.value, "hand back", owner=self.owner)
        self.agent.resume()
        self.agent.outbound.flush()
        self.owner = None
        self._move(CallInput.HANDBACK, f"handed back by {who}")

    def agent_gone(self) -> None:
        self.handback("kefu: the agent's connection was lost")
        tell_caller_agent_lost(self.agent, self.spawn)

    def spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=f"{name}:{self.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def close(self) -> None:
        if self.presence is not None:
            self.presence.cancel()
        for task in list(self.tasks):
            task.cancel()

    def summary(self) -> dict[str, Any]:
        return {
            "call_id": self.id,
            "state": self.state.value,
            "source": self.room_id,
            "created": self.created,
            "answered": self.created,
            "channel": "webrtc",
            "caller": "",
            "room": self.room_id,
            "owner": self.owner,
            "codec": "opus",
            "rtp": None,
        }
