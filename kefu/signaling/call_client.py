"""The client side of ``POST /api/calls``: what ``kefu call`` uses to place a call on a
running server and follow it to its outcome over ``/api/events`` (docs/trunk.md).

The event stream is opened *before* the POST, filtered on nothing, so that no event of the
new call can be missed; once the POST names the call id only that call's events count:
``call.answered`` (answered), ``call.failed`` (not answered: the SIP status and reason),
``call.ended`` (ended before either, e.g. hung up through the API).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

__all__ = ["CallOutcome", "place_call"]


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """What became of one ``kefu call``."""

    result: str
    """``answered``, ``failed``, ``ended``, ``dialing`` (not waited for), ``timeout``,
    ``refused`` (the API said no: see ``http_status``/``error``), ``unreachable``."""
    http_status: int = 0
    """The POST's status (202 when the call was placed; 0 when the server was unreachable)."""
    call_id: str | None = None
    sip_status: int | None = None
    """A failed call's SIP status (``call.failed``)."""
    reason: str = ""
    error: dict[str, Any] = field(default_factory=dict)
    """The API's ``error`` object when it refused (``code``, ``message``)."""
    events: tuple[dict[str, Any], ...] = ()
    """The call's events as they arrived."""


_FINAL = {"call.answered": "answered", "call.failed": "failed", "call.ended": "ended"}


async def _post(
    session: aiohttp.ClientSession, server: str, token: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with session.post(
        f"{server}/api/calls", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        try:
            data = await resp.json(content_type=None)
        except ValueError:
            data = {}
        return resp.status, data if isinstance(data, dict) else {}


async def _follow(
    ws: aiohttp.ClientWebSocketResponse, call_id: str
) -> tuple[str, list[dict[str, Any]]]:
    """Read the stream (events that came during the POST wait in the socket) until the
    call's first final event."""
    seen: list[dict[str, Any]] = []
    while True:
        msg = await ws.receive()
        if msg.type is not aiohttp.WSMsgType.TEXT:
            return "ended", seen
        event = json.loads(msg.data)
        if event.get("call_id") != call_id:
            continue
        seen.append(event)
        result = _FINAL.get(str(event.get("type")))
        if result is not None:
            return result, seen


async def place_call(
    server: str,
    token: str,
    body: dict[str, Any],
    *,
    wait: bool = True,
    wait_s: float = 90.0,
) -> CallOutcome:
    """POST ``body`` to ``server``'s ``/api/calls``; with ``wait``, follow the call until
    it is answered or failed, at most ``wait_s`` seconds."""
    server = server.rstrip("/")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            ws: aiohttp.ClientWebSocketResponse | None = None
            if wait:
                ws = await session.ws_connect(
                    f"{server}/api/events", headers={"Authorization": f"Bearer {token}"}
                )
                hello = await ws.receive_json(timeout=10)
                if hello.get("type") != "events.subscribed":
                    await ws.close()
                    error = hello if hello.get("type") == "error" else {}
                    return CallOutcome("refused", 401, error=error)
            try:
                status, data = await _post(session, server, token, body)
                if status != 202:
                    error = data.get("error") if isinstance(data.get("error"), dict) else {}
                    return CallOutcome("refused", status, error=error or {})
                call_id = str(data.get("call_id"))
                if ws is None:
                    return CallOutcome("dialing", status, call_id)
                try:
                    result, seen = await asyncio.wait_for(_follow(ws, call_id), wait_s)
                except TimeoutError:
                    return CallOutcome("timeout", status, call_id)
            finally:
                if ws is not None:
                    with contextlib.suppress(Exception):
                        await ws.close()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return CallOutcome("unreachable", reason=str(exc) or type(exc).__name__)
    final = seen[-1]
    return CallOutcome(
        result,
        status,
        call_id,
        sip_status=final.get("status") if result == "failed" else None,
        reason=str(final.get("reason", "")),
        events=tuple(seen),
    )
