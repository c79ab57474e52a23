"""SignalingHub: sessions between WebSocket clients and the SFU.

Life of a socket (:class:`~kefu.signaling.session.Connection`): opened with a verified token →
(join | resume) → attached to a :class:`~kefu.signaling.session.Session` → closed. Life of a
session:

    attached ──socket drops / heartbeat timeout──► detached ──resume──► attached
        │                                             │
        └──leave / SFU failed / shutdown──► ended ◄───┴──grace expires

Invariants:
* a session is attached to at most one connection and a connection to at most one session;
* every session in ``_sessions`` has a live SFU participant; ending a session removes it from
  ``_sessions`` and its room, then calls ``participant.leave()`` exactly once;
* everything a session sends while detached is kept (up to ``max_pending``, oldest dropped
  and counted) and delivered in order after ``resume``;
* a server ``candidate`` never goes out before the ``answer``/``offer`` it belongs to (browsers
  refuse it): the SFU reports candidates while still making the description (aiortc gathers
  in setLocalDescription), so they wait until it is sent, or are dropped if making it failed;
* timers (heartbeat, resume grace) only fire from :meth:`SignalingHub.handle_timer`, with the
  time passed in, so tests drive them without sleeping.

All network I/O goes through the :class:`~kefu.signaling.session.Socket` seam (aiohttp's
WebSocketResponse in production, see ws.py); each connection owns one writer task that sends
its queue in order. Connections, sessions and the SFU/socket contracts live in session.py.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import Any

import structlog

from kefu.signaling import protocol as p
from kefu.signaling.auth import Authenticator, authorize_join
from kefu.signaling.errors import (
    CLOSE_GOING_AWAY,
    CLOSE_HEARTBEAT_TIMEOUT,
    CLOSE_INTERNAL,
    CLOSE_NODE_FULL,
    CLOSE_NORMAL,
    CLOSE_RATE_LIMITED,
    CLOSE_REPLACED,
    CLOSE_ROOM_FULL,
    CLOSE_UNKNOWN_SESSION,
    AuthError,
    ProtocolError,
    StateError,
)
from kefu.signaling.ratelimit import RateLimiter
from kefu.signaling.session import Connection, Session, SfuLike, Socket
from kefu.signaling.settings import SignalingSettings
from kefu.signaling.turn import ice_servers

log = structlog.get_logger("kefu.signaling")


class SignalingHub:
    """Routes signaling between sockets and SFU participants; owns sessions and timers."""

    def __init__(
        self,
        sfu: SfuLike,
        settings: SignalingSettings,
        *,
        authenticator: Authenticator | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.sfu = sfu
        self.settings = settings
        self.auth = authenticator or Authenticator(
            secret=settings.jwt_secret,
            jwks_url=settings.jwks_url,
            jwks_cache_s=settings.jwks_cache_s,
        )
        self.clock = clock
        self._wall = wall_clock
        self.connect_limiter = RateLimiter(settings.connect_rate, max_keys=settings.rate_limit_keys)
        self.message_limiter = RateLimiter(settings.message_rate, max_keys=settings.rate_limit_keys)
        self._connections: set[Connection] = set()
        self._sessions: dict[str, Session] = {}
        self._rooms: dict[str, dict[str, Session]] = {}
        self._timer_changed = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None
        self._closed = False

    # --- introspection ------------------------------------------------------------------------

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def room_members(self, room: str) -> list[p.ParticipantInfo]:
        return [s.info for s in self._rooms.get(room, {}).values()]

    # --- sockets -------------------------------------------------------------------------------

    async def open(self, socket: Socket, ip: str, token: str) -> Connection | None:
        """Admit a socket: rate limit by IP, verify the token. None = refused (and closed)."""
        now = self.clock()
        if self._closed:
            await self._refuse(socket, p.Error("shutting_down", "server is shutting down"), 1001)
            return None
        if not self.connect_limiter.allow(ip, now):
            error = p.Error("rate_limited", "too many connections")
            await self._refuse(socket, error, CLOSE_RATE_LIMITED)
            return None
        try:
            claims = await self.auth.verify(token)
        except AuthError as exc:
            log.info("signaling_auth_failed", ip=ip, code=exc.code, reason=str(exc))
            await self._refuse(socket, p.Error(exc.code, str(exc)), exc.close_code or 4401)
            return None
        conn = Connection(socket, ip, claims, now, self.settings.max_pending)
        self._connections.add(conn)
        self._timer_changed.set()
        return conn

    async def _refuse(self, socket: Socket, error: p.Error, code: int) -> None:
        try:
            await socket.send_str(p.serialize(error))
            await socket.close(code=code, message=error.code.encode())
        except (ConnectionError, RuntimeError):
            pass

    async def disconnected(self, conn: Connection) -> None:
        """The socket is closed (by either side): detach its session for a possible resume."""
        self._connections.discard(conn)
        await conn.stop()
        session = conn.session
        if session is not None and session.conn is conn and not session.ended:
            # Whatever the writer had not sent yet is kept for a resume, in order.
            unsent = [item for item in conn.unsent() if isinstance(item, str)]
            session.pending.extendleft(reversed(unsent))
            while len(session.pending) > self.settings.max_pending:
                session.pending.popleft()
                session.dropped += 1
            session.conn = None
            session.detached_at = self.clock()
            self._timer_changed.set()
            log.info("signaling_detached", session=session.id, room=session.room)

    # --- messages ------------------------------------------------------------------------------

    async def receive(self, conn: Connection, data: str | bytes) -> None:
        """Handle one inbound WebSocket message."""
        now = self.clock()
        conn.last_seen = now
        if conn.closing:
            return
        if not self.message_limiter.allow(conn.claims.user, now):
            conn.send(p.Error("rate_limited", "too many messages"))
            conn.close(CLOSE_RATE_LIMITED, "rate_limited")
            return
        try:
            message = p.parse_client(data)
            await self._dispatch(conn, message)
        except (ProtocolError, StateError) as exc:
            conn.send(p.Error(exc.code, str(exc)))
        except AuthError as exc:
            conn.send(p.Error(exc.code, str(exc)))
            conn.close(exc.close_code or 4403, exc.code)
        except ValueError as exc:
            # SdpError and friends from the SFU: the client's SDP was not acceptable.
            conn.send(p.Error("bad_sdp", str(exc)[:200]))
        except Exception:
            log.exception("signaling_internal_error", ip=conn.ip)
            conn.send(p.Error("internal", "internal error"))
            conn.close(CLOSE_INTERNAL, "internal")

    async def _dispatch(self, conn: Connection, message: p.ClientMessage) -> None:
        if isinstance(message, p.Ping):
            conn.send(p.Pong())
            return
        if isinstance(message, p.Join):
            await self._join(conn, message)
            return
        if isinstance(message, p.Resume):
            await self._resume(conn, message)
            return
        session = conn.session
        if session is None or session.ended:
            raise StateError(f"{message.TYPE} before join", code="bad_state")
        match message:
            case p.Offer(sdp):
                with session.describing():
                    answer = await session.participant.handle_offer(sdp)
                    session.send(p.Answer(answer))
            case p.Answer(sdp):
                await session.participant.handle_answer(sdp)
                session.negotiating = False
                if session.renegotiate_again:
                    session.renegotiate_again = False
                    self._renegotiate(session)
            case p.Candidate(candidate):
                await session.participant.add_ice_candidate(
                    None if candidate is None else candidate.to_json()
                )
            case p.Leave():
                await self.end(session, "left", CLOSE_NORMAL)

    async def _join(self, conn: Connection, message: p.Join) -> None:
        if conn.session is not None:
            raise StateError("already joined", code="bad_state")
        claims = conn.claims
        authorize_join(claims, message.room, self.sfu.room_exists(message.room))
        if len(self._sessions) >= self.settings.max_sessions:
            conn.send(p.Error("node_full", "this node takes no more participants"))
            conn.close(CLOSE_NODE_FULL, "node_full")
            return
        participant_id = f"{claims.role[0]}-{secrets.token_hex(6)}"
        try:
            participant = await self.sfu.join(
                message.room,
                participant_id,
                role=claims.role,
                display=message.display,
                user=claims.user,
            )
        except Exception as exc:
            code = getattr(exc, "code", None)
            close = {"room_full": CLOSE_ROOM_FULL, "node_full": CLOSE_NODE_FULL}.get(str(code))
            if close is None:
                log.exception("signaling_join_failed", room=message.room)
                code, close = "internal", CLOSE_INTERNAL
            conn.send(p.Error(str(code), "cannot join"))
            conn.close(close, str(code))
            return
        session = Session(self, claims, participant, message.display)
        others = self.room_members(session.room)
        self._sessions[session.id] = session
        self._rooms.setdefault(session.room, {})[session.id] = session
        self._wire(session)
        self._attach(session, conn)
        conn.send(self._joined(session, others))
        self._broadcast(session, p.ParticipantJoined(session.info))
        log.info("signaling_joined", session=session.id, room=session.room, role=claims.role)

    async def _resume(self, conn: Connection, message: p.Resume) -> None:
        if conn.session is not None:
            raise StateError("already joined", code="bad_state")
        session = self._sessions.get(message.session)
        try:
            claims = await self.auth.verify(message.token)
        except AuthError:
            session = None
        # Unknown, expired and someone else's sessions look the same from outside.
        if session is None or session.ended or claims.user != session.user:
            conn.send(p.Error("unknown_session", "session cannot be resumed"))
            conn.close(CLOSE_UNKNOWN_SESSION, "unknown_session")
            return
        if session.conn is not None:
            old = session.conn
            old.session = None
            old.send(p.Bye("replaced"))
            old.close(CLOSE_REPLACED, "replaced")
        self._attach(session, conn)
        conn.send(self._joined(session, self._others(session)))
        while session.pending:
            conn._push(session.pending.popleft())
        log.info("signaling_resumed", session=session.id, room=session.room)

    def _others(self, session: Session) -> list[p.ParticipantInfo]:
        return [s.info for s in self._rooms.get(session.room, {}).values() if s is not session]

    def _joined(self, session: Session, others: list[p.ParticipantInfo]) -> p.Joined:
        return p.Joined(
            session=session.id,
            participant=session.info.id,
            room=session.room,
            ice_servers=ice_servers(
                stun_urls=self.settings.stun_urls,
                turn_urls=self.settings.turn_urls,
                turn_secret=self.settings.turn_secret,
                user=session.user,
                now=self._wall(),
                ttl_s=self.settings.turn_ttl_s,
            ),
            participants=tuple(others),
            heartbeat_s=self.settings.heartbeat_s,
        )

    def _attach(self, session: Session, conn: Connection) -> None:
        session.conn = conn
        session.detached_at = None
        conn.session = session

    def _broadcast(self, sender: Session, message: p.ServerMessage) -> None:
        for other in list(self._rooms.get(sender.room, {}).values()):
            if other is not sender:
                other.send(message)

    # --- SFU callbacks -------------------------------------------------------------------------

    def _wire(self, session: Session) -> None:
        part = session.participant

        def on_candidate(candidate: dict[str, Any] | None) -> None:
            try:
                ice = None if candidate is None else p.IceCandidate.from_json(candidate)
            except ProtocolError:
                log.warning("signaling_bad_server_candidate", session=session.id)
                return
            session.send_candidate(p.Candidate(ice))

        def on_state(state: str) -> None:
            if state in ("failed", "closed") and not session.ended:
                session.spawn(lambda: self.end(session, state, CLOSE_NORMAL))

        part.on_ice_candidate = on_candidate
        part.on_event = lambda event: session.send(p.Event(event))
        part.on_renegotiation_needed = lambda: self._renegotiate(session)
        part.on_state = on_state

    def _renegotiate(self, session: Session) -> None:
        if session.ended:
            return
        if session.negotiating:
            session.renegotiate_again = True
            return
        session.negotiating = True

        async def offer() -> None:
            try:
                with session.describing():
                    sdp = await session.participant.create_offer()
                    session.send(p.Offer(sdp))
            except Exception:
                log.exception("signaling_create_offer_failed", session=session.id)
                session.negotiating = False

        session.spawn(offer)

    # --- ending --------------------------------------------------------------------------------

    async def end(self, session: Session, reason: str, close_code: int) -> None:
        """End a session for good: leave the SFU, tell the room, say bye and close."""
        if session.ended:
            return
        session.ended = True
        self._sessions.pop(session.id, None)
        room = self._rooms.get(session.room, {})
        room.pop(session.id, None)
        if not room:
            self._rooms.pop(session.room, None)
        for other in list(room.values()):
            other.send(p.ParticipantLeft(session.info.id))
        conn = session.conn
        if conn is not None:
            conn.send(p.Bye(reason))
            conn.close(close_code, reason)
            conn.session = None
        current = asyncio.current_task()
        for task in list(session.tasks):
            if task is not current:
                task.cancel()
        try:
            await session.participant.leave()
        except Exception:
            log.exception("signaling_leave_failed", session=session.id)
        log.info("signaling_ended", session=session.id, room=session.room, reason=reason)

    # --- timers --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` next has work, or None."""
        timeout = self.settings.heartbeat_timeout_s
        deadlines = [
            c.last_seen + (2 * timeout if c.closing else timeout) for c in self._connections
        ]
        deadlines += [
            s.detached_at + self.settings.resume_grace_s
            for s in self._sessions.values()
            if s.detached_at is not None
        ]
        return min(deadlines, default=None)

    async def handle_timer(self, now: float) -> None:
        """Close silent sockets and end sessions whose resume grace has run out."""
        timeout = self.settings.heartbeat_timeout_s
        for conn in list(self._connections):
            if not conn.closing and now - conn.last_seen >= timeout:
                conn.send(p.Error("heartbeat_timeout", "no message within the timeout"))
                conn.close(CLOSE_HEARTBEAT_TIMEOUT, "heartbeat_timeout")
            elif conn.closing and now - conn.last_seen >= 2 * timeout:
                # The close handshake is stuck (peer stopped reading): let go of the socket
                # so its session starts the resume grace instead of hanging on it forever.
                log.info("signaling_close_stuck", ip=conn.ip)
                await self.disconnected(conn)
        grace = self.settings.resume_grace_s
        for session in list(self._sessions.values()):
            if session.detached_at is not None and now - session.detached_at >= grace:
                await self.end(session, "timeout", CLOSE_NORMAL)
        self.connect_limiter.sweep(now)
        self.message_limiter.sweep(now)

    def start(self) -> None:
        """Drive timers from the real clock (production; tests call handle_timer instead)."""
        if self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive())

    async def _drive(self) -> None:
        while True:
            deadline = self.get_timer()
            delay = None if deadline is None else max(0.0, deadline - self.clock())
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel.
                async with asyncio.timeout(delay):
                    await self._timer_changed.wait()
            except TimeoutError:
                pass
            self._timer_changed.clear()
            await self.handle_timer(self.clock())

    async def close(self) -> None:
        """Shutdown: say bye to everyone, end every session, stop the timer driver."""
        self._closed = True
        if self._driver is not None:
            self._driver.cancel()
            try:
                await self._driver
            except asyncio.CancelledError:
                pass
            self._driver = None
        for session in list(self._sessions.values()):
            await self.end(session, "shutdown", CLOSE_GOING_AWAY)
        for conn in list(self._connections):
            conn.close(CLOSE_GOING_AWAY, "shutdown")
