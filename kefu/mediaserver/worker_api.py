"""What a room worker tells its front about the calls it hosts (worker side, relay key only).

A web caller's AI conversation (``room:<id>``, :mod:`.room_calls`) lives in the process that
hosts its room. Agents, supervisors and the workbench talk to the front only, so a worker
serves its front, on its private Unix socket and only with the relay key:

* ``GET /internal/events``: a WebSocket carrying every event of this worker's bus in its JSON
  form (:func:`~kefu.mediaserver.events.event_json`); the front republishes them on its own bus
  (``/api/events``). The subscription is bounded like any reader's: a front that stops reading
  loses the oldest events, never the worker's memory;
* ``GET /internal/calls``: this worker's live calls, as ``GET /api/calls`` lists them;
* ``POST /internal/calls/{call_id}/{action}``: ``listen``, ``takeover``, ``handback``,
  ``note`` (body ``{"who": ..., "text": ...}``) or ``assign`` (``{"who": ..., "to": ...,
  "supervisor": bool}``), answered like the public API: 200 with the result, 400
  ``bad_request``, 404 ``unknown_call``, 409 ``wrong_state`` (with ``state`` and ``owner``).

The front's half is :mod:`.worker_link`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import structlog
from aiohttp import WSMsgType, web

from kefu.errors import CallStateConflict
from kefu.mediaserver.events import event_json
from kefu.signaling.http import error_response, wrong_state
from kefu.signaling.ws import key_matches

if TYPE_CHECKING:
    from kefu.mediaserver.server import KefuServer

__all__ = ["CALL_ACTIONS", "EVENTS_PATH", "add_worker_routes", "calls_path"]

log = structlog.get_logger("kefu.room_worker")

EVENTS_PATH = "/internal/events"
CALLS_PATH = "/internal/calls"
CALL_ACTIONS = ("listen", "takeover", "handback", "note", "assign")
EVENT_QUEUE = 4096
"""Events queued for the front before the oldest are dropped (a burst of several calls)."""


def calls_path(call_id: str = "", action: str = "") -> str:
    """``/internal/calls`` or one call's action under it (the id quoted for a URL path)."""
    if not call_id:
        return CALLS_PATH
    return f"{CALLS_PATH}/{quote(call_id, safe='')}/{action}"


def add_worker_routes(app: web.Application, server: KefuServer, key: str) -> None:
    """Serve the front the worker's events, calls and call actions (relay key required)."""

    def guarded(
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def checked(request: web.Request) -> web.StreamResponse:
            if not key_matches(request, key):
                return error_response(403, "forbidden", "relay key required")
            return await handler(request)

        return checked

    async def events(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=10.0)
        await ws.prepare(request)
        sub = server.bus.subscribe(queue_size=EVENT_QUEUE)
        sender = _spawn_sender(ws, sub)
        try:
            async for message in ws:
                if message.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                    break
        finally:
            server.bus.unsubscribe(sub)
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
        return ws

    async def calls(_: web.Request) -> web.Response:
        return web.json_response({"calls": await server.control.list_calls()})

    async def action(request: web.Request) -> web.Response:
        call_id = request.match_info["call_id"]
        name = request.match_info["action"]
        if name not in CALL_ACTIONS:
            return error_response(404, "unknown_action", f"no action {name!r}")
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "bad_json", "body is not valid JSON")
        who = body.get("who") if isinstance(body, dict) else None
        if not isinstance(who, str):
            return error_response(400, "bad_request", 'expected {"who": "..."}')
        control = server.control
        try:
            result: dict[str, Any] = {}
            if name == "note":
                text = body.get("text")
                if not isinstance(text, str):
                    return error_response(400, "bad_request", 'a note needs {"text": "..."}')
                await control.note(call_id, who, text)
            elif name == "handback":
                result = await control.handback(
                    call_id, who, supervisor=body.get("supervisor") is True
                )
            elif name == "assign":
                to, boss = body.get("to"), body.get("supervisor")
                if not isinstance(to, str) or not isinstance(boss, bool):
                    return error_response(400, "bad_request", 'expected {"to": "...", ...}')
                result = await control.assign(call_id, who, to, supervisor=boss)
            else:
                result = await getattr(control, name)(call_id, who)
        except KeyError:
            return error_response(404, "unknown_call", "no such call")
        except CallStateConflict as exc:
            return wrong_state(exc)
        except ValueError as exc:
            return error_response(400, "bad_request", str(exc))
        return web.json_response(result or {})

    app.router.add_get(EVENTS_PATH, guarded(events))
    app.router.add_get(CALLS_PATH, guarded(calls))
    app.router.add_post(CALLS_PATH + "/{call_id}/{action}", guarded(action))


def _spawn_sender(ws: web.WebSocketResponse, sub: Any) -> asyncio.Task[None]:
    async def send() -> None:
        while True:
            event = await sub.queue.get()
            dropped = sub.take_dropped()
            if dropped:
                log.warning("front_events_dropped", count=dropped)
            try:
                text = json.dumps(event_json(event), separators=(",", ":"), default=str)
            except (KeyError, TypeError, ValueError):
                continue  # not an event with a wire form (the events endpoint skips it too)
            try:
                await ws.send_str(text)
            except (ConnectionError, RuntimeError):
                return

    return asyncio.create_task(send(), name="worker-events-to-front")
