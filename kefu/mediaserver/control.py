"""The HTTP control surface: what ``kefu.signaling.http`` asks the media server.

:class:`CallControl` is the :class:`kefu.signaling.http.Control` of a running server:
readiness (``/readyz``), metrics (``/metrics``), the live calls (``GET /api/calls``) and the
control operations on one call. Each operation goes through the call controller
(:class:`kefu.mediaserver.call.Call`): an unknown call is KeyError (404), a request the call's
state does not allow is :class:`~kefu.errors.CallStateConflict` (409 ``wrong_state`` with the
current state), and nothing changes unless the action succeeded.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kefu.ai_bridge.avatar.render_pool import head_wire
from kefu.errors import CallStateConflict, ResourceExhausted
from kefu.mediaserver.assign import HeldCall, assign, holds, require_holder
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.events import AgentNote, event_json
from kefu.mediaserver.room_calls import ROOM_CALL_PREFIX
from kefu.mediaserver.worker_link import WorkerLink
from kefu.signaling.api_access import TransferAllowList
from kefu.signaling.client_address import CLIENT_ADDRESS_KEY, ClientAddress
from kefu.signaling.dial_request import DialRequest
from kefu.signaling.events_ws import EventStream, add_event_routes
from kefu.signaling.http import build_app
from kefu.signaling.shards import FRONT

if TYPE_CHECKING:
    from kefu.mediaserver.server import KefuServer


class CallControl:
    """Readiness, metrics and call control over one :class:`KefuServer`."""

    def __init__(self, server: KefuServer) -> None:
        self.server = server
        self.events: EventStream | None = None
        self.front_agents = 0
        """In a room worker: the agents signed in at the front (told on each status poll)."""

    def ready(self) -> tuple[bool, dict[str, Any]]:
        s = self.server
        detail: dict[str, Any] = {
            "draining": s.draining,
            "active_calls": len(s.calls),
            "max_calls": s.config.calls.max_concurrent,
            "rtp_ports_free": s.ports.capacity - s.ports.in_use,
            "media_mode": s.config.calls.media_mode,
        }
        listening = s.worker is not None or s.sip_address is not None
        ai_loading = s.media.ai_loading
        ok = not s.draining and listening and not ai_loading
        if s.room_workers is not None:
            detail["room_workers"] = s.room_workers.describe()
            ok = ok and s.room_workers.all_ready
        if ai_loading:
            detail["ai"] = "loading"
        if s.media.ai is not None:
            detail["ai"] = s.media.ai.readiness()
            # A broken model does not stop kefu: calls get an apology and a transfer.
            detail["ai_ready"] = s.media.ai.ready
        if s.cluster is not None:
            # Redis lost: calls go on from local state; the node says so but stays ready.
            detail["cluster"] = s.cluster.describe()
            detail["degraded"] = not s.cluster.link.up
        return ok, detail

    def metrics_text(self) -> bytes:
        return self.server.metrics.render()

    def sfu_stats(self) -> dict[str, int]:
        """The SFU counters of this process and of every room worker, summed."""
        s = self.server
        stats = s.rooms.sfu.stats()
        if s.room_workers is not None:
            for name, value in s.room_workers.sfu_stats().items():
                stats[name] = stats.get(name, 0) + value
        return stats

    def http_app(self) -> web.Application:
        """/healthz, /metrics, /api/* (tokens checked as the signaling does), GET /api/events."""
        s = self.server
        allow = TransferAllowList(
            s.config.calls.transfer_allow, default=s.config.sip.transfer_target
        )
        app = build_app(
            self,
            auth=s.signaling.auth,
            transfer_allow=allow,
            max_context_bytes=s.config.trunk.max_context_bytes,
        )
        app[CLIENT_ADDRESS_KEY] = ClientAddress(s.config.http.trusted_proxies)
        self.events = add_event_routes(app, s.bus, event_json, s.signaling.auth)
        app.router.add_get("/avatar/head.bin", self.avatar_head)
        return app

    async def avatar_head(self, _: web.Request) -> web.Response:
        """The avatar's head for the caller page's canvas (docs/avatar-mesh.md): the mesh the
        server renders, so weights drawn by the page and the video show the same face."""
        ai = self.server.config.ai
        if ai.avatar == "off":
            return web.json_response(
                {"error": "avatar_off", "message": "ai.avatar is off"}, status=404
            )
        pool = self.server.media.ai.avatar if self.server.media.ai is not None else None
        if pool is not None:
            body = pool.wire()
        else:
            loop = asyncio.get_running_loop()
            body = await loop.run_in_executor(None, head_wire, ai.avatar_model)
        return web.Response(
            body=body,
            content_type="application/octet-stream",
            headers={"Cache-Control": "public, max-age=3600"},
        )

    def agents_online(self) -> int:
        """Agents and supervisors with a workbench open (reading ``/api/events``) here, or,
        in a room worker, at its front."""
        here = self.events.agents_online() if self.events is not None else 0
        cluster = self.server.cluster
        elsewhere = cluster.agents_online() if cluster is not None else 0
        return here + self.front_agents + elsewhere

    @property
    def _link(self) -> WorkerLink:
        link = self.server.worker_link
        assert link is not None
        return link

    # --- calls -------------------------------------------------------------------------------

    async def list_calls(self) -> list[dict[str, Any]]:
        """This process's calls, and those its room workers host."""
        queue = self.server.agent_queue
        calls = [call.summary() for call in self.server.calls.values()]
        calls += [call.summary() for call in self.server.rooms.calls.values()]
        calls = [{**c, "waiting_since": queue.since(c["call_id"])} for c in calls]
        link = self.server.worker_link
        return calls + (await link.calls() if link is not None else [])

    def _remote(self, call_id: str) -> bool:
        """``call_id`` is a web call one of this front's room workers hosts."""
        link = self.server.worker_link
        return link is not None and link.shard_for(call_id) != FRONT

    def transfer(
        self, call_id: str, target: str | None, who: str = "api", *, supervisor: bool = True
    ) -> None:
        """REFER the call (ValueError: bad target; CallStateConflict: wrong state, or another
        agent holds it and ``who`` is no supervisor)."""
        call = self.server.lifecycle.by_id(call_id)
        require_holder(call, who, "transfer", supervisor=supervisor)
        self.server.dispatch.transfer(call, target)

    async def dial(self, request: DialRequest, who: str = "api") -> dict[str, Any]:
        """Place an outbound call (kefu.mediaserver.outbound): its id, ``dialing``.
        ResourceExhausted: cannot take a call now; ValueError: cannot route ``request.to``."""
        if self.server.worker is not None or self.server.sip_address is None:
            raise ResourceExhausted("this process has no SIP transport")
        call = await self.server.dispatch.dialer.place(request, who)
        return {"call_id": call.id, "state": "dialing", "to": call.callee_uri}

    def hangup(self, call_id: str, who: str = "api", *, supervisor: bool = True) -> None:
        call = self.server.lifecycle.by_id(call_id)
        require_holder(call, who, "hang up", supervisor=supervisor)
        self.server.lifecycle.hangup(call, "api")

    async def listen(self, call_id: str, who: str = "api") -> dict[str, Any]:
        """Open the call's agent room (idempotent) so agents can join it and listen in; a
        web caller's call is its own room."""
        if self._remote(call_id):
            return await self._link.act(call_id, "listen", who)
        if call_id.startswith(ROOM_CALL_PREFIX):
            room_call = self.server.rooms.call(call_id)
            if room_call.state not in (CallState.AI_ACTIVE, CallState.HUMAN_ACTIVE):
                raise CallStateConflict(call_id, room_call.state.value, "listen in")
            return {"room": room_call.room_id}
        call = self.server.lifecycle.by_id(call_id)
        room = await call.open_agent_room(
            self.server.rooms.sfu, grace_s=self.server.config.calls.agent_grace_s
        )
        return {"room": room.room_id}

    async def takeover(self, call_id: str, who: str = "api") -> dict[str, Any]:
        """A human takes the call from the AI (CallStateConflict unless ``ai_active``): the
        caller hears the agent room from now on."""
        if self._remote(call_id):
            return await self._link.act(call_id, "takeover", who)
        if call_id.startswith(ROOM_CALL_PREFIX):
            room_call = self.server.rooms.call(call_id)
            if not holds(room_call, who):  # an agent a call was passed to: just join it
                room_call.takeover(who)
            return {"room": room_call.room_id}
        call = self.server.lifecycle.by_id(call_id)
        if holds(call, who):
            room = await call.open_agent_room(
                self.server.rooms.sfu, grace_s=self.server.config.calls.agent_grace_s
            )
            return {"room": room.room_id}
        if call.state is not CallState.AI_ACTIVE:  # refuse before opening anything
            call.takeover(who)
        room = await call.open_agent_room(
            self.server.rooms.sfu, grace_s=self.server.config.calls.agent_grace_s
        )
        call.takeover(who)  # the state is checked again: of two agents exactly one wins
        return {"room": room.room_id}

    async def note(self, call_id: str, who: str, text: str) -> None:
        """An agent's note about a live call: on the bus of the process hosting the call
        (workbenches, interaction log)."""
        if self._remote(call_id):
            await self._link.act(call_id, "note", who, text=text)
            return
        s = self.server
        if call_id not in s.rooms.calls and not any(c.id == call_id for c in s.calls.values()):
            raise KeyError(call_id)
        s.bus.publish(AgentNote(call_id, time.time(), who, text))

    async def assign(
        self, call_id: str, who: str, to: str, *, supervisor: bool = False
    ) -> dict[str, Any]:
        """Pass a call a human holds to the agent ``to`` (:mod:`.assign`): ValueError for a
        bad name, CallStateConflict unless ``who`` holds it (or is a supervisor)."""
        if self._remote(call_id):
            return await self._link.act(call_id, "assign", who, to=to, supervisor=supervisor)
        call: HeldCall
        if call_id.startswith(ROOM_CALL_PREFIX):
            call = self.server.rooms.call(call_id)
        else:
            call = self.server.lifecycle.by_id(call_id)
        event = assign(call, who, to, supervisor=supervisor)
        self.server.bus.publish(event)
        return {"owner": event.new}

    async def handback(
        self, call_id: str, who: str = "api", *, supervisor: bool = True
    ) -> dict[str, Any]:
        """The human gives the call back to the AI (CallStateConflict unless ``human_active``
        and ``who`` holds it or is a supervisor)."""
        if self._remote(call_id):
            return await self._link.act(call_id, "handback", who, supervisor=supervisor)
        call: HeldCall
        if call_id.startswith(ROOM_CALL_PREFIX):
            call = self.server.rooms.call(call_id)
        else:
            call = self.server.lifecycle.by_id(call_id)
        require_holder(call, who, "hand back", supervisor=supervisor)
        call.handback(who)
        return {}
