"""``GET /api/events``: every call's events, as JSON text messages on a WebSocket.

The protocol is documented in docs/events.md. A reader is one WebSocket with one bounded bus
subscription; its sender task moves events from the subscription to the socket:

* the token (``Authorization: Bearer`` or ``?token=``) is checked after the upgrade, so a
  browser sees why it was refused: 4401 (missing, bad or expired token), 4403 (a role that may
  not read events), 4400 (bad ``call_id`` filters), 4503 (too many readers), 1001 (shutdown);
* ``?call_id=X`` (repeatable) filters at the subscription, so other calls' events neither
  queue nor push this reader's events out;
* memory per reader is bounded twice: the subscription's queue drops its oldest events when
  full (the reader is then sent ``events.dropped`` with the count, before the next event), and
  the sender waits for the socket to drain (aiohttp's writer pauses every ``writer_limit``
  bytes while the transport is above its high-water mark), so a client that does not read
  makes events pile up only in the bounded queue, never in an unbounded write buffer;
* messages from the client: ``{"type": "ping"}`` is answered ``pong``; anything else gets an
  ``error`` message and the socket stays open; text over ``read_limit`` bytes closes it (1009).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from aiohttp import WSMsgType, hdrs, web

from kefu.signaling.api_access import bearer_token
from kefu.signaling.auth import Authenticator, Claims
from kefu.signaling.client_address import client_ip
from kefu.signaling.errors import (
    CLOSE_BAD_TOKEN,
    CLOSE_FORBIDDEN,
    CLOSE_GOING_AWAY,
    CLOSE_NODE_FULL,
    AuthError,
)
from kefu.signaling.http import authorize, error_response, refusal

log = structlog.get_logger("kefu.events")

EVENTS_PATH = "/api/events"
VERSION = 1
CLOSE_BAD_REQUEST = 4400
"""Bad ``call_id`` filters (empty, over 128 characters, more than ``max_filters``)."""
_MAX_CALL_ID = 128


class EventSubscription(Protocol):
    queue: asyncio.Queue[object]

    def take_dropped(self) -> int: ...


class EventFeed(Protocol):
    """The bus (kefu.mediaserver.bus.EventBus) as this module uses it."""

    def subscribe(
        self, accept: Callable[[object], bool] | None = None, *, queue_size: int | None = None
    ) -> Any: ...

    def unsubscribe(self, sub: Any) -> None: ...


@dataclass(frozen=True, slots=True)
class EventStreamSettings:
    """Limits of the events endpoint (docs/events.md)."""

    queue_size: int = 256
    """Events queued per reader; beyond it the oldest are dropped and counted."""
    max_readers: int = 200
    """Readers one node serves at once; the next is closed with 4503."""
    max_filters: int = 100
    """``call_id`` parameters one reader may give."""
    read_limit: int = 4096
    """Largest message a client may send (bigger: aiohttp closes with 1009)."""
    writer_limit: int = 16 * 1024
    """Bytes written between checks that the socket drains."""
    send_buffer: int = 64 * 1024
    """The reader socket's kernel send buffer (SO_SNDBUF; the kernel doubles it). Left to
    autotuning a stalled reader's socket would hold up to ``tcp_wmem``'s maximum (4 MiB on
    Linux) of events in kernel memory, out of sight of ``queue_size``."""
    close_timeout_s: float = 2.0
    """How long a closing handshake may take before the connection is dropped."""
    heartbeat_s: float | None = 60.0
    """kefu pings this often; a reader silent for half of it more is dropped (dead peers)."""


def _cap_send_buffer(request: web.Request, size: int) -> None:
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None and size > 0:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


def _dumps(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class _Reader:
    """One events WebSocket: its subscription, its sender task and its counters."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        request: web.Request,
        claims: Claims,
        sub: EventSubscription,
        encode: Callable[[object], dict[str, Any]],
        warn_unknown: Callable[[object], None],
    ) -> None:
        self.ws = ws
        self.request = request
        self.claims = claims
        self.sub = sub
        self._encode = encode
        self._warn_unknown = warn_unknown
        self._lock = asyncio.Lock()
        self.sent = 0
        self.dropped = 0
        self.sender: asyncio.Task[None] | None = None

    @property
    def write_buffer(self) -> int:
        """Bytes waiting in this socket's transport (the part of a slow reader kefu holds)."""
        transport = self.request.transport
        return 0 if transport is None else transport.get_write_buffer_size()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._lock:
            await self.ws.send_str(_dumps(message))

    async def run_sender(self) -> None:
        """Bus → socket, one event at a time, waiting for the socket to drain."""
        try:
            while True:
                event = await self.sub.queue.get()
                dropped = self.sub.take_dropped()
                if dropped:
                    self.dropped += dropped
                    notice = {"v": VERSION, "type": "events.dropped", "count": dropped}
                    await self.send({**notice, "at": round(time.time(), 3)})
                try:
                    message = self._encode(event)
                    text = _dumps(message)
                except (KeyError, TypeError, ValueError):
                    self._warn_unknown(event)
                    continue
                async with self._lock:
                    await self.ws.send_str(text)
                self.sent += 1
        except (ConnectionError, RuntimeError):
            return  # the socket is gone or closing: the handler cleans up

    async def on_message(self, data: Any, kind: WSMsgType) -> None:
        if kind is not WSMsgType.TEXT:
            await self._error("bad_message", "only JSON text messages are accepted")
            return
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            await self._error("bad_json", "not JSON")
            return
        if not isinstance(message, dict):
            await self._error("bad_json", "not a JSON object")
            return
        if message.get("type") == "ping":
            await self.send({"v": VERSION, "type": "pong"})
            return
        await self._error("unknown_type", "the only message a client may send is ping")

    async def _error(self, code: str, text: str) -> None:
        await self.send({"v": VERSION, "type": "error", "code": code, "message": text})


class EventStream:
    """The ``/api/events`` endpoint: admits readers and closes them all on shutdown."""

    def __init__(
        self,
        feed: EventFeed,
        encode: Callable[[object], dict[str, Any]],
        auth: Authenticator,
        settings: EventStreamSettings | None = None,
    ) -> None:
        self.feed = feed
        self.encode = encode
        self.auth = auth
        self.settings = settings or EventStreamSettings()
        self.readers: set[_Reader] = set()
        self._closed = False
        self._warned: set[type] = set()

    def agents_online(self) -> int:
        """Readers signed in as an agent or supervisor (the workbenches open on this node)."""
        return sum(1 for r in self.readers if r.claims.role in ("agent", "supervisor"))

    def _warn_unknown(self, event: object) -> None:
        if type(event) not in self._warned:
            self._warned.add(type(event))
            log.warning("event_not_serializable", event_type=type(event).__name__)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        s = self.settings
        token = bearer_token(request.headers.get(hdrs.AUTHORIZATION))
        token = token or request.query.get("token", "")
        ws = web.WebSocketResponse(
            max_msg_size=s.read_limit,
            autoping=True,
            compress=False,
            timeout=s.close_timeout_s,
            writer_limit=s.writer_limit,
            heartbeat=s.heartbeat_s,
        )
        ip = client_ip(request)
        if not ws.can_prepare(request).ok:  # plain HTTP: the API's 401/403, else 426
            try:
                await authorize(self.auth, token)
            except AuthError as exc:
                return refusal(exc, ip=ip, path=EVENTS_PATH)
            response = error_response(426, "websocket_required", "GET /api/events is a WebSocket")
            response.headers[hdrs.UPGRADE] = "websocket"
            return response
        _cap_send_buffer(request, s.send_buffer)
        await ws.prepare(request)
        if self._closed:
            await self._refuse(ws, CLOSE_GOING_AWAY, "shutting_down", "server is shutting down")
            return ws
        try:
            claims = await authorize(self.auth, token)
        except AuthError as exc:
            code = "forbidden" if exc.code == "forbidden" else "unauthorized"
            close = CLOSE_FORBIDDEN if code == "forbidden" else CLOSE_BAD_TOKEN
            log.info("api_refused", ip=ip, path=EVENTS_PATH, code=code, reason=str(exc))
            await self._refuse(ws, close, code, str(exc))
            return ws
        call_ids = request.query.getall("call_id", [])
        if len(call_ids) > s.max_filters or not all(0 < len(c) <= _MAX_CALL_ID for c in call_ids):
            text = f"at most {s.max_filters} call_id filters of 1-{_MAX_CALL_ID} characters"
            await self._refuse(ws, CLOSE_BAD_REQUEST, "bad_request", text)
            return ws
        if len(self.readers) >= s.max_readers:
            await self._refuse(ws, CLOSE_NODE_FULL, "node_full", "too many event readers")
            return ws
        wanted = frozenset(call_ids)
        accept = (lambda e: getattr(e, "call_id", None) in wanted) if wanted else None
        sub = self.feed.subscribe(accept, queue_size=s.queue_size)
        reader = _Reader(ws, request, claims, sub, self.encode, self._warn_unknown)
        self.readers.add(reader)
        bound = log.bind(user=claims.user, role=claims.role, ip=ip)
        bound.info("events_reader_open", call_ids=sorted(wanted) or None)
        try:
            hello = {"v": VERSION, "type": "events.subscribed", "queue_size": s.queue_size}
            await reader.send({**hello, "call_ids": sorted(wanted) or None})
            reader.sender = asyncio.create_task(reader.run_sender(), name="events-sender")
            try:
                async with asyncio.timeout(max(0.0, claims.expires - time.time())):
                    async for msg in ws:
                        await reader.on_message(msg.data, msg.type)
            except TimeoutError:
                await self._close(reader, CLOSE_BAD_TOKEN, "token_expired")
        except (ConnectionError, RuntimeError):
            pass
        finally:
            await self._forget(reader)
            bound.info("events_reader_closed", sent=reader.sent, dropped=reader.dropped)
        return ws

    async def _refuse(self, ws: web.WebSocketResponse, close: int, code: str, text: str) -> None:
        message = {"v": VERSION, "type": "error", "code": code, "message": text}
        try:
            await ws.send_str(_dumps(message))
            await asyncio.wait_for(
                ws.close(code=close, message=code.encode()), self.settings.close_timeout_s
            )
        except (ConnectionError, RuntimeError, TimeoutError):
            pass

    async def _forget(self, reader: _Reader) -> None:
        self.readers.discard(reader)
        self.feed.unsubscribe(reader.sub)
        if reader.sender is not None:
            reader.sender.cancel()
            await asyncio.gather(reader.sender, return_exceptions=True)

    async def _close(self, reader: _Reader, code: int, reason: str) -> None:
        """Stop the sender, then close; a socket that will not drain is dropped."""
        if reader.sender is not None:
            reader.sender.cancel()
            await asyncio.gather(reader.sender, return_exceptions=True)
        try:
            await asyncio.wait_for(
                reader.ws.close(code=code, message=reason.encode()),
                self.settings.close_timeout_s,
            )
        except (ConnectionError, RuntimeError, TimeoutError):
            pass

    async def close(self) -> None:
        """Server stop: every reader is closed with 1001 (going away)."""
        self._closed = True
        readers = list(self.readers)
        await asyncio.gather(
            *(self._close(r, CLOSE_GOING_AWAY, "shutdown") for r in readers),
            return_exceptions=True,
        )


STREAM_KEY = web.AppKey("kefu_event_stream", EventStream)


def add_event_routes(
    app: web.Application,
    feed: EventFeed,
    encode: Callable[[object], dict[str, Any]],
    auth: Authenticator,
    settings: EventStreamSettings | None = None,
) -> EventStream:
    """Mount ``GET /api/events``; its readers are closed when the app shuts down."""
    stream = EventStream(feed, encode, auth, settings)
    app[STREAM_KEY] = stream

    async def on_shutdown(_: web.Application) -> None:
        await stream.close()

    app.router.add_get(EVENTS_PATH, stream.handle)
    app.on_shutdown.append(on_shutdown)
    return stream
