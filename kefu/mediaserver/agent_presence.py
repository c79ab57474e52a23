"""Is a human agent still there? The grace period when the one holding a call vanishes.

A human holds a call through a WebRTC room (a phone call's agent room, or a web caller's own
room). When every staff participant (agent, supervisor, admin) has left that room while the
call is ``human_active`` (the browser closed, the network dropped and signaling's own resume
grace ran out), :class:`AgentPresence` waits ``grace_s`` more; if nobody is back by then the
call goes back to the AI, which tells the caller (:data:`AGENT_LOST`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kefu.mediaserver.assign import HeldCall, holds
from kefu.sfu.api import Sfu

STAFF_ROLES = frozenset({"agent", "supervisor", "admin"})
AGENT_LOST = {
    "en": "Sorry, my colleague's connection dropped. I'm back with you: how can I help?",
    "zh": "抱歉，人工客服的连接中断了。我继续为您服务，请问有什么可以帮您？",
}
"""What the AI says when the call comes back to it because its agent vanished."""


class AgentPresence:
    """Watches one room's events (feed :meth:`on_room_event` from a participant's
    ``on_event``); ``held()`` says whether a human holds the call, ``on_gone()`` gives it back."""

    def __init__(
        self,
        sfu: Sfu,
        room_id: str,
        *,
        held: Callable[[], bool],
        on_gone: Callable[[], None],
        grace_s: float,
        log: Any,
    ) -> None:
        self.sfu = sfu
        self.room_id = room_id
        self.held = held
        self.on_gone = on_gone
        self.grace_s = grace_s
        self.log = log
        self._grace: asyncio.TimerHandle | None = None

    def staff(self) -> list[str]:
        """The staff participants in the room now."""
        for info in self.sfu.rooms():
            if info.room_id == self.room_id:
                return [pid for pid, role in info.participants if role in STAFF_ROLES]
        return []

    def on_room_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "participant_joined" and self._grace is not None and self.staff():
            self.cancel()
            self.log.info("agent_back", room=self.room_id)
        elif kind == "participant_left" and self._grace is None and not self.staff():
            if self.held():
                self.log.warning("agent_vanished", room=self.room_id, grace_s=self.grace_s)
                loop = asyncio.get_running_loop()
                self._grace = loop.call_later(self.grace_s, self._expired)

    def _expired(self) -> None:
        self._grace = None
        if self.held() and not self.staff():
            self.on_gone()

    def cancel(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None


def tell_caller_agent_lost(agent: Any, spawn: Callable[[Any, str], Any]) -> None:
    """The AI (a CallAgent) tells the caller it has the call again."""
    text = AGENT_LOST["zh" if agent.lang == "zh" else "en"]
    spawn(agent.responder.say(text, None), "agent-lost")


def floor_for(call: HeldCall) -> Callable[[Any], bool]:
    """Who may be heard in ``call``'s room (:meth:`kefu.sfu.api.Sfu.set_floor`): the caller
    and kefu always; agents and supervisors only while they hold the call. Listening in is
    silent on the server, whatever the listener's browser sends."""

    def floor(member: Any) -> bool:
        return member.role not in STAFF_ROLES or holds(call, member.user)

    return floor
