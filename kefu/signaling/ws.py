"""The WebSocket route ``GET /ws?token=<JWT>`` on kefu's aiohttp app.

This module only adapts aiohttp to :class:`~kefu.signaling.hub.SignalingHub`: it accepts the
upgrade, hands the token to the hub (which rate limits and authenticates, closing with 4401 /
4429 when it refuses) and feeds every text message to the hub until the socket closes.
The protocol itself is in protocol.py and documented in docs/signaling.md.

With room sharding (``relay``), the socket's first join or resume picks the process hosting
the room; sockets for rooms elsewhere are handed to :class:`~kefu.signaling.relay.ShardRelay`
and leave this hub. A room worker (``relay_key``) takes the client address from the
front's header when the shared key matches.

In a cluster (``cluster``) the first join or resume may belong to another node: the socket is
relayed there (:mod:`kefu.cluster.routing`), and a socket relayed here from another node
(``X-Kefu-Cluster-Hop`` with the cluster's key) is served by this node.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from aiohttp import WSMessage, WSMsgType, web

from kefu.signaling.client_address import client_ip as forwarded_client_ip
from kefu.signaling.hub import SignalingHub
from kefu.signaling.protocol import MAX_MESSAGE_BYTES, Error
from kefu.signaling.relay import CLIENT_IP_HEADER, HOP_HEADER, RELAY_KEY_HEADER, ShardRelay
from kefu.signaling.session import Connection
from kefu.signaling.shards import FRONT

HUB_KEY = web.AppKey("kefu_signaling_hub", SignalingHub)

# Messages between 64 KiB and this are answered with a too_large error and the socket stays
# open; bigger ones make aiohttp close the socket with 1009 before we read them into memory.
READ_LIMIT = 4 * MAX_MESSAGE_BYTES


class ClusterHooks(Protocol):
    """What the signaling route needs of the cluster (kefu.cluster.routing.ClusterRouting)."""

    key: str

    async def node_for(self, text: str) -> str | None: ...

    def note_session(self, session: str) -> None: ...


def key_matches(request: web.Request, key: str) -> bool:
    """The front's relay key is in the request (constant time; any header bytes are safe)."""
    given = request.headers.get(RELAY_KEY_HEADER, "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, key.encode())


def _route(relay: ShardRelay, text: str) -> int | None:
    """The shard for a socket's message, or None (not a join or resume: the hub answers it).

    Routing only peeks at the JSON; whatever the text does to the decoder (50,000 nested
    ``[`` raise RecursionError) must leave the answer to the hub's parser (``bad_json``)
    instead of dropping the socket.
    """
    try:
        return relay.route(text)
    except (ValueError, RecursionError):
        return None


def add_signaling_routes(
    app: web.Application,
    hub: SignalingHub,
    *,
    path: str = "/ws",
    drive_timers: bool = True,
    relay: ShardRelay | None = None,
    relay_key: str | None = None,
    cluster: ClusterHooks | None = None,
) -> None:
    """Mount the signaling WebSocket at ``path``; start/stop the hub with the app.

    ``drive_timers=False`` leaves timers to the caller (tests call ``hub.handle_timer(now)``).
    ``relay``: this is the front of a sharded node; ``relay_key``: this is a room worker;
    ``cluster``: this node is one of several (``relay`` must then be given too).
    """
    if cluster is not None and relay is None:
        raise ValueError("a cluster node relays: give relay too")
    app[HUB_KEY] = hub

    def hopped(request: web.Request) -> bool:
        """Relayed here by another node of the cluster (its key checked)."""
        return (
            cluster is not None
            and HOP_HEADER in request.headers
            and key_matches(request, cluster.key)
        )

    def client_ip(request: web.Request) -> str:
        forwarded = request.headers.get(CLIENT_IP_HEADER)
        if forwarded and ((relay_key and key_matches(request, relay_key)) or hopped(request)):
            return forwarded
        return forwarded_client_ip(request)

    async def feed(conn: Connection, msg: WSMessage) -> None:
        if msg.type is WSMsgType.TEXT:
            await hub.receive(conn, msg.data)
        elif msg.type is WSMsgType.BINARY:
            conn.send(Error("bad_message", "binary frames are not part of protocol v1"))

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=READ_LIMIT, autoping=True)
        await ws.prepare(request)
        ip = client_ip(request)
        token = request.query.get("token", "")
        conn = await hub.open(ws, ip, token)
        if conn is None:
            return ws
        shard: int | None = None if relay is not None else FRONT
        elsewhere = cluster if cluster is not None and not hopped(request) else None
        noted = False
        try:
            async for msg in ws:
                if shard is None and msg.type is WSMsgType.TEXT and relay is not None:
                    node = await elsewhere.node_for(msg.data) if elsewhere is not None else None
                    if node is not None:
                        # The room lives on another node: the socket is that node's now.
                        await hub.disconnected(conn)
                        await relay.relay(ws, node, token, ip, msg.data)
                        return ws
                    shard = _route(relay, msg.data)
                    if shard is not None and shard != FRONT:
                        # The socket now belongs to the room's worker; it never joined here.
                        await hub.disconnected(conn)
                        await relay.relay(ws, shard, token, ip, msg.data)
                        return ws
                await feed(conn, msg)
                if cluster is not None and not noted and conn.session is not None:
                    noted = True
                    cluster.note_session(conn.session.id)
        finally:
            if shard is None or shard == FRONT:
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
