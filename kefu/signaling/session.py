"""Per-socket and per-participant state that the signaling hub routes between.

:class:`Connection` is one WebSocket: a verified token, an ordered outbound queue and the
writer task that sends it. :class:`Session` is one participant in a room; it outlives its
sockets for the resume grace, keeping what it sends while detached, and holds server
candidates back while an answer/offer is being made (see :meth:`Session.describing`).

Also here are the structural contracts the hub works against: :class:`ParticipantLike` and
:class:`SfuLike` (kefu/sfu/api.py), and :class:`Socket`, the one I/O seam (aiohttp's
WebSocketResponse in production, see ws.py). The hub itself, which creates, attaches, resumes
and ends sessions, is :class:`~kefu.signaling.hub.SignalingHub`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kefu.signaling import protocol as p
from kefu.signaling.auth import Claims
from kefu.signaling.settings import SignalingSettings

log = structlog.get_logger("kefu.signaling")


# --- the contract with kefu/sfu/api.py (structural, so fakes and the real Sfu both fit) ---------


class ParticipantLike(Protocol):
    id: str
    room_id: str
    role: str
    on_ice_candidate: Callable[[dict[str, Any] | None], None] | None
    on_renegotiation_needed: Callable[[], None] | None
    on_event: Callable[[dict[str, Any]], None] | None
    on_state: Callable[[str], None] | None

    async def handle_offer(self, sdp: str) -> str: ...
    async def create_offer(self) -> str: ...
    async def handle_answer(self, sdp: str) -> None: ...
    async def add_ice_candidate(self, candidate: dict[str, Any] | None) -> None: ...
    async def leave(self) -> None: ...
    def publish_event(self, event: dict[str, Any]) -> None: ...


class SfuLike(Protocol):
    async def join(
        self, room_id: str, participant_id: str, *, role: str, display: str = "", user: str = ""
    ) -> Any: ...
    def room_exists(self, room_id: str) -> bool: ...


class Socket(Protocol):
    """The one I/O seam: what the hub needs from a WebSocket."""

    async def send_str(self, data: str) -> None: ...
    async def close(self, *, code: int = ..., message: bytes = ...) -> bool: ...


class HubLike(Protocol):
    """What a :class:`Session` needs of its hub (:class:`~kefu.signaling.hub.SignalingHub`)."""

    settings: SignalingSettings


@dataclass(frozen=True, slots=True)
class _Close:
    code: int
    reason: str


class Connection:
    """One WebSocket: a verified token, an ordered outbound queue and its writer task."""

    def __init__(self, socket: Socket, ip: str, claims: Claims, now: float, limit: int) -> None:
        self.socket = socket
        self.ip = ip
        self.claims = claims
        self.last_seen = now
        self.session: Session | None = None
        self.closing = False
        self.dropped = 0
        self._queue: deque[str | _Close] = deque()
        self._limit = limit
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write())

    def send(self, message: p.ServerMessage) -> None:
        self._push(p.serialize(message))

    def _push(self, item: str | _Close) -> None:
        if self.closing:
            return
        if isinstance(item, str) and len(self._queue) >= self._limit:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(item)
        if isinstance(item, _Close):
            self.closing = True
        self._wake.set()

    def close(self, code: int, reason: str) -> None:
        """Send what is queued, then close with ``code`` (idempotent)."""
        self._push(_Close(code, reason))

    async def _write(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    item = self._queue.popleft()
                    if isinstance(item, _Close):
                        await self.socket.close(code=item.code, message=item.reason.encode())
                        return
                    await self.socket.send_str(item)
        except (ConnectionError, RuntimeError) as exc:
            log.info("signaling_send_failed", ip=self.ip, error=str(exc))

    def unsent(self) -> list[str | _Close]:
        """Queued items the writer never sent (valid after :meth:`stop`)."""
        return list(self._queue)

    async def stop(self) -> None:
        """Stop the writer (the socket is gone)."""
        self.closing = True
        if not self._writer.done():
            self._writer.cancel()
        try:
            await self._writer
        except asyncio.CancelledError:
            pass


class Session:
    """A participant in a room, outliving sockets for ``resume_grace_s``."""

    def __init__(self, hub: HubLike, claims: Claims, participant: Any, display: str) -> None:
        self.id = secrets.token_urlsafe(18)
        self.hub = hub
        self.user = claims.user
        self.room: str = participant.room_id
        self.participant: ParticipantLike = participant
        self.info = p.ParticipantInfo(participant.id, claims.role, display)
        self.conn: Connection | None = None
        self.detached_at: float | None = None
        self.ended = False
        self.pending: deque[str] = deque()
        self.dropped = 0
        self.negotiating = False
        self.renegotiate_again = False
        self.tasks: set[asyncio.Task[None]] = set()
        self._describing = 0
        self._held: list[p.Candidate] = []

    def send(self, message: p.ServerMessage) -> None:
        if self.ended:
            return
        if self.conn is not None and not self.conn.closing:
            self.conn.send(message)
            return
        if len(self.pending) >= self.hub.settings.max_pending:
            self.pending.popleft()
            self.dropped += 1
        self.pending.append(p.serialize(message))

    def send_candidate(self, message: p.Candidate) -> None:
        if self._describing:
            self._held.append(message)
        else:
            self.send(message)

    @contextmanager
    def describing(self) -> Iterator[None]:
        """Around making and sending an answer/offer: candidates wait until it is sent."""
        self._describing += 1
        sent = False
        try:
            yield
            sent = True
        finally:
            self._describing -= 1
            if not self._describing:
                held, self._held = self._held, []
                if sent:
                    for message in held:
                        self.send(message)
                elif held:
                    # they belong to a description the client never got
                    log.info("signaling_candidates_dropped", session=self.id, count=len(held))

    def spawn(self, work: Callable[[], Any]) -> None:
        task = asyncio.get_running_loop().create_task(work())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
