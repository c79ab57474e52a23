"""The WebSocket route ``GET /ws?token=<JWT>`` on kefu's aiohttp app.

This module only adapts aiohttp to :class:`~kefu.signaling.hub.SignalingHub`: it accepts the
upgrade, hands the token to the hub (which rate limits and authenticates, closing with 4401 /
4429 when it refuses) and feeds every text message to the hub until the socket closes.
The protocol itself is in protocol.py and documented in docs/signaling.md.
"""

from __future__ import annotations

from aiohttp import WSMsgType, web

from kefu.signaling.hub import SignalingHub
from kefu.signaling.protocol import MAX_MESSAGE_BYTES, Error

HUB_KEY = web.AppKey("kefu_signaling_hub", SignalingHub)

# Messages between 64 KiB and this are answered with a too_large error and the socket stays
# open; bigger ones make aiohttp close the socket with 1009 before we read them into memory.
_READ_LIMIT = 4 * MAX_MESSAGE_BYTES


def add_signaling_routes(
    app: web.Application, hub: SignalingHub, *, path: str = "/ws", drive_timers: bool = True
) -> None:
    """Mount the signaling WebSocket at ``path``; start/stop the hub with the app.

    ``drive_timers=False`` leaves timers to the caller (tests call ``hub.handle_timer(now)``).
    """
    app[HUB_KEY] = hub

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=_READ_LIMIT, autoping=True)
        await ws.prepare(request)
        ip = request.remote or "unknown"
        conn = await hub.open(ws, ip, request.query.get("token", ""))
        if conn is None:
            return ws
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await hub.receive(conn, msg.data)
                elif msg.type is WSMsgType.BINARY:
                    conn.send(Error("bad_message", "binary frames are not part of protocol v1"))
        finally:
            await hub.disconnected(conn)
        return ws

    async def on_startup(_: web.Application) -> None:
        if drive_timers:
            hub.start()

    async def on_shutdown(_: web.Application) -> None:
        await hub.close()

    app.router.add_get(path, websocket)
    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
