"""Calls waiting for a human agent: in arrival order, with a wait limit.

When the AI hands a call off (the caller asked for a person, or a model failed) and at least
one agent or supervisor is signed in (reading ``/api/events``, as the workbench does), the
call waits for one of them: it is listed with ``waiting_since`` in ``GET /api/calls``, a
``call.agent_wait`` event announces it, and the AI keeps helping meanwhile. Any agent picks it
by taking it over. After ``calls.agent_wait_s`` without an agent the fallback runs (a REFER
to ``sip.transfer_target`` when one is configured; otherwise the AI keeps the call). With no
agent signed in the fallback runs at once. A web caller's call (``room:<id>``) queues the same
way; its fallback is the AI telling the caller that nobody is free and that it stays with them
(:data:`NO_AGENT`).

The queue is a reader of the event bus: a takeover (``human_active``) or the call's end take
the call out of it, whoever caused them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kefu.mediaserver.events import AgentWait, CallEnded, CallStateChanged

log = structlog.get_logger("kefu.agent_queue")

NO_AGENT = {
    "en": "All of my colleagues are busy right now, so I'll stay with you. "
    "You can keep asking me, or try again a little later.",
    "zh": "人工客服现在都在忙，我会继续为您服务。您可以继续问我，或者稍后再试。",
}
"""What the AI tells a web caller when no agent can take the call."""


class Call(Protocol):
    """What the queue needs of a call: a phone call (:class:`kefu.mediaserver.call.Call`)
    or a web caller's (:class:`kefu.mediaserver.room_calls.RoomCall`)."""

    @property
    def id(self) -> str: ...

    @property
    def log(self) -> Any: ...


@dataclass(eq=False)
class _Waiting:
    call: Call
    since: float
    reason: str
    timer: asyncio.TimerHandle


class AgentQueue:
    """See the module's doc. ``fallback(call)`` runs when nobody can take a call."""

    def __init__(
        self,
        publish: Callable[[object], None],
        *,
        agents_online: Callable[[], int],
        wait_s: float,
        fallback: Callable[[Call], None],
    ) -> None:
        self.publish = publish
        self.agents_online = agents_online
        self.wait_s = wait_s
        self.fallback = fallback
        self._waiting: dict[str, _Waiting] = {}

    def request(self, call: Call, reason: str) -> None:
        """The AI asked for a human for ``call``: queue it, or fall back if nobody can come."""
        if call.id in self._waiting:
            return
        online = self.agents_online()
        if online == 0 or self.wait_s <= 0:
            call.log.info("agent_wait_skipped", agents_online=online, reason=reason)
            self.fallback(call)
            return
        timer = asyncio.get_running_loop().call_later(self.wait_s, self._timed_out, call.id)
        self._waiting[call.id] = _Waiting(call, time.time(), reason, timer)
        position = len(self._waiting)
        call.log.info("agent_wait", reason=reason, position=position, agents_online=online)
        self.publish(AgentWait(call.id, time.time(), True, reason, position, ""))

    def since(self, call_id: str) -> float | None:
        """When ``call_id`` began waiting (None: it is not waiting)."""
        waiting = self._waiting.get(call_id)
        return waiting.since if waiting is not None else None

    def order(self) -> list[str]:
        """Waiting calls, oldest first."""
        return [w.call.id for w in sorted(self._waiting.values(), key=lambda w: w.since)]

    def read(self, event: object) -> None:
        """A bus sink: a takeover or the call's end ends its wait."""
        if isinstance(event, CallStateChanged) and event.new == "human_active":
            self._done(event.call_id, "taken")
        elif isinstance(event, CallEnded):
            self._done(event.call_id, "ended")

    def _done(self, call_id: str, outcome: str) -> None:
        waiting = self._waiting.pop(call_id, None)
        if waiting is None:
            return
        waiting.timer.cancel()
        waited = round(time.time() - waiting.since, 3)
        waiting.call.log.info("agent_wait_over", outcome=outcome, waited_s=waited)
        self.publish(AgentWait(call_id, time.time(), False, waiting.reason, 0, outcome))

    def _timed_out(self, call_id: str) -> None:
        waiting = self._waiting.get(call_id)
        if waiting is None:
            return
        self._done(call_id, "timeout")
        self.fallback(waiting.call)

    def close(self) -> None:
        for waiting in self._waiting.values():
            waiting.timer.cancel()
        self._waiting.clear()


def tell_caller_no_agent(agent: Any, spawn: Callable[[Any, str], Any]) -> None:
    """The AI (a CallAgent) tells a web caller nobody is free and it stays with them."""
    text = NO_AGENT["zh" if agent.lang == "zh" else "en"]
    spawn(agent.responder.say(text, None), "no-agent")
