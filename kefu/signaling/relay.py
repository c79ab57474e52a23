"""Relays a client's signaling WebSocket to the room worker that hosts its room.

The front has already admitted the socket (rate limit, token) and read its join or resume;
:class:`~kefu.signaling.shards.ShardRouter` chose the shard. Here the front opens the same
WebSocket on the worker (over the worker's Unix socket, with the client's token, so the
worker authenticates and authorizes as if the client had come straight to it) and copies
text frames both ways until either side closes, then closes the other side with the same
code. Media never passes through here: ICE and RTP go straight between the client and the
worker's own UDP ports.

The worker trusts the client address the front puts in ``X-Kefu-Client-Ip`` only when
``X-Kefu-Relay-Key`` carries the secret shared at spawn, so per-IP limits still see
the real caller.

In a cluster (:mod:`kefu.cluster.routing`) the same relay carries a socket to another node
(a ``str`` target: that node's base URL) over TCP, with the cluster's key and
``X-Kefu-Cluster-Hop`` naming this node; the node receiving it serves it itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from urllib.parse import quote

import aiohttp
import structlog
from aiohttp import WSMsgType, web

from kefu.signaling import protocol as p
from kefu.signaling.errors import CLOSE_GOING_AWAY
from kefu.signaling.shards import ShardRouter

__all__ = [
    "CLIENT_IP_HEADER",
    "CLOSE_TRY_AGAIN",
    "HOP_HEADER",
    "RELAY_KEY_HEADER",
    "ShardRelay",
    "Target",
]

log = structlog.get_logger("kefu.signaling.relay")

CLIENT_IP_HEADER = "X-Kefu-Client-Ip"
RELAY_KEY_HEADER = "X-Kefu-Relay-Key"
HOP_HEADER = "X-Kefu-Cluster-Hop"
CONNECT_TIMEOUT_S = 5.0
"""A worker that does not take the WebSocket in this long counts as unavailable."""
CLOSE_TRY_AGAIN = 1013
"""RFC 6455 §7.4.1 'Try Again Later': the room's worker is restarting."""

Target = int | str
"""A room worker's shard number, or another node's base URL."""


class ShardRelay:
    """The front's side of room sharding: routes and relays sockets to room workers."""

    def __init__(
        self,
        router: ShardRouter,
        socket_for: Callable[[int], str | None],
        key: str,
        *,
        read_limit: int,
        clock: Callable[[], float] = time.monotonic,
        cluster_key: str | None = None,
        node_id: str = "",
    ) -> None:
        self.router = router
        self.cluster_key = cluster_key
        """The key other nodes of the cluster accept relayed sockets with."""
        self.node_id = node_id
        self.on_session: Callable[[str], None] | None = None
        """Called with each session a room worker of this node issues."""
        self._socket_for = socket_for
        self._key = key
        self._read_limit = read_limit
        self._clock = clock
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._relays: set[asyncio.Task[None]] = set()

    def route(self, message: str) -> int | None:
        return self.router.route(message, self._clock())

    async def relay(
        self, client: web.WebSocketResponse, shard: Target, token: str, ip: str, first: str
    ) -> None:
        """Carry ``client`` to ``shard`` (a worker, or another node) until either side closes."""
        upstream = await self._connect(shard, token, ip)
        if upstream is None:
            where = "node is not reachable" if isinstance(shard, str) else "worker is restarting"
            error = p.Error("room_unavailable", f"the room's {where}, try again")
            with contextlib.suppress(ConnectionError, RuntimeError):
                await client.send_str(p.serialize(error))
                await client.close(code=CLOSE_TRY_AGAIN, message=b"room_unavailable")
            return
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        sessions: list[str] = []
        try:
            await upstream.send_str(first)
            down = asyncio.create_task(self._down(upstream, client, shard, sessions))
            up = asyncio.create_task(self._up(client, upstream))
            try:
                await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for side in (down, up):
                    side.cancel()
                await asyncio.gather(down, up, return_exceptions=True)
            code = upstream.close_code if upstream.closed else client.close_code
            with contextlib.suppress(ConnectionError, RuntimeError):
                await client.close(code=code or CLOSE_GOING_AWAY)
        except (ConnectionError, aiohttp.ClientError):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await client.close(code=CLOSE_GOING_AWAY)
        finally:
            self._relays.discard(task)
            with contextlib.suppress(ConnectionError, RuntimeError, aiohttp.ClientError):
                await upstream.close()
            now = self._clock()
            for session in sessions:
                self.router.released(session, now)

    def _session_to(self, shard: Target) -> tuple[aiohttp.ClientSession, str, str] | None:
        """The client session, base URL and key for ``shard``; None: not reachable now."""
        if isinstance(shard, str):
            if self.cluster_key is None:
                return None
            name, base, key = "tcp", shard, self.cluster_key
        else:
            path = self._socket_for(shard)
            if path is None:
                return None
            name, base, key = path, "http://room-worker", self._key
        session = self._sessions.get(name)
        if session is None or session.closed:
            # Every relayed socket holds one connection for its lifetime: no pool limit
            # (aiohttp's default of 100 would stall the 101st join).
            connector = (
                aiohttp.TCPConnector(limit=0)
                if name == "tcp"
                else aiohttp.UnixConnector(path=name, limit=0)
            )
            session = aiohttp.ClientSession(connector=connector)
            self._sessions[name] = session
        return session, base, key

    async def _connect(
        self, shard: Target, token: str, ip: str
    ) -> aiohttp.ClientWebSocketResponse | None:
        found = self._session_to(shard)
        if found is None:
            return None
        session, base, key = found
        headers = {CLIENT_IP_HEADER: ip, RELAY_KEY_HEADER: key}
        if isinstance(shard, str):
            headers[HOP_HEADER] = self.node_id or "node"
        try:
            return await asyncio.wait_for(
                session.ws_connect(
                    f"{base}/ws?token={quote(token, safe='')}",
                    headers=headers,
                    max_msg_size=self._read_limit,
                    autoping=True,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                ),
                CONNECT_TIMEOUT_S,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            log.warning("relay_connect_failed", shard=shard, error=str(exc))
            return None

    async def _down(
        self,
        upstream: aiohttp.ClientWebSocketResponse,
        client: web.WebSocketResponse,
        shard: Target,
        sessions: list[str],
    ) -> None:
        async for msg in upstream:
            if msg.type is not WSMsgType.TEXT:
                continue
            if isinstance(shard, int):  # another node keeps its own sessions
                session = self.router.note_reply(shard, msg.data, self._clock())
                if session is not None:
                    sessions.append(session)
                    if self.on_session is not None:
                        self.on_session(session)
            await client.send_str(msg.data)

    async def _up(
        self, client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
    ) -> None:
        async for msg in client:
            if msg.type is WSMsgType.TEXT:
                await upstream.send_str(msg.data)
            elif msg.type is WSMsgType.BINARY:
                await upstream.send_bytes(msg.data)

    async def close(self) -> None:
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
