"""Which process hosts a room: the routing half of room sharding (sans-IO).

One Python process is held to one core by the GIL, so kefu can host WebRTC rooms in several
processes (config ``webrtc.room_workers``). The process that accepts the WebSocket (the
front, shard 0, which also runs the SIP trunk) reads the socket's first message and hands
the socket to the shard that hosts the room it names. A room lives in exactly one process,
so packets forwarded between its participants never cross a process boundary.

A new room goes to the shard hosting the fewest rooms, as each shard last reported
(:meth:`ShardRouter.observe`, every second) plus the rooms placed there since; ties (an idle
node) go to the shard a stable hash of the room's id names, and a router nobody reports to
places by that hash alone. A room a shard reports, or one placed moments ago, stays where it
is: every join of a room lands in the process hosting it. ``pinned`` rooms (the SIP room,
whose phone legs live in the front) stay in shard 0. A ``resume`` goes to the shard that
issued the session, learnt from the ``joined`` message relayed back. Messages before the join
or resume (pings, garbage, an offer too early) are answered by the front, so errors read the
same whichever shard a room is on, and the first join or resume decides where the socket goes.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

__all__ = ["ShardRouter", "json_object", "shard_of"]

FRONT = 0
PLACED_GRACE_S = 10.0
"""A room placed but not reported by its shard within this long is forgotten."""


def shard_of(room_id: str, shards: int) -> int:
    """The shard hosting ``room_id`` among ``shards``, the same in every process and run."""
    if shards <= 1:
        return FRONT
    digest = hashlib.blake2b(room_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def json_object(text: str | bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class ShardRouter:
    """Routes sockets by their first message and remembers which shard issued each session.

    Sessions are remembered while their socket is relayed and for ``resume_grace_s`` after
    it closes (the hub's resume grace, plus a margin); at most ``max_sessions`` are kept,
    those that ended first are forgotten first.
    """

    def __init__(
        self,
        shards: int,
        *,
        pinned: frozenset[str] = frozenset(),
        pinned_prefixes: tuple[str, ...] = (),
        resume_grace_s: float = 20.0,
        max_sessions: int = 20_000,
    ) -> None:
        if shards < 1:
            raise ValueError("ShardRouter needs at least one shard")
        self.shards = shards
        self.pinned = pinned
        self.pinned_prefixes = pinned_prefixes
        """Rooms named with one of these (a phone call's agent room) stay in the front too."""
        self.resume_grace_s = resume_grace_s
        self.max_sessions = max_sessions
        # session -> (shard, forget at); the relay's open sessions have no deadline (inf).
        self._sessions: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._hosted: dict[str, int] = {}
        """room -> shard, as the shards last reported."""
        self._counts: dict[int, int] = {}
        """Rooms per shard, as last reported."""
        self._placed: OrderedDict[str, tuple[int, float]] = OrderedDict()
        """room -> (shard, when) placed but not reported yet."""

    def route(self, message_text: str | bytes, now: float) -> int | None:
        """The shard that should take a socket that sent this; None: not a join or resume."""
        message = json_object(message_text)
        if message is None:
            return None
        kind = message.get("type")
        if kind == "join":
            room = message.get("room")
            if not isinstance(room, str) or room in self.pinned:
                return FRONT  # the front's hub rejects a malformed join
            if room.startswith(self.pinned_prefixes):
                return FRONT
            return self._place(room, now)
        if kind == "resume":
            session = message.get("session")
            if isinstance(session, str):
                entry = self._sessions.get(session)
                if entry is not None and entry[1] > now:
                    return entry[0]
            return FRONT  # the front's own session, or unknown_session from the front
        return None

    def observe(self, shard: int, rooms: Collection[str], now: float) -> None:
        """``shard`` hosts exactly ``rooms`` now (its status poll)."""
        for room in [r for r, s in self._hosted.items() if s == shard and r not in rooms]:
            del self._hosted[room]
        for room in rooms:
            self._hosted[room] = shard
            self._placed.pop(room, None)
        self._counts[shard] = len(rooms)
        while self._placed:
            room, (_, at) = next(iter(self._placed.items()))
            if at > now - PLACED_GRACE_S:
                break
            del self._placed[room]  # never opened (refused), or closed again

    def _place(self, room: str, now: float) -> int:
        hosted = self._hosted.get(room)
        if hosted is not None:
            return hosted
        placed = self._placed.get(room)
        if placed is not None:
            return placed[0]
        if self.shards <= 1 or not self._counts:
            return shard_of(room, self.shards)  # nobody reports loads: the hash alone
        load = dict(self._counts)
        for shard, _ in self._placed.values():
            load[shard] = load.get(shard, 0) + 1
        first = shard_of(room, self.shards)
        shard = min(range(self.shards), key=lambda s: (load.get(s, 0), (s - first) % self.shards))
        self._placed[room] = (shard, now)
        while len(self._placed) > self.max_sessions:
            self._placed.popitem(last=False)
        return shard

    def note_reply(self, shard: int, server_message: str, now: float) -> str | None:
        """Read a message relayed back from ``shard``; returns the session a ``joined`` names."""
        if '"joined"' not in server_message:
            return None
        message = json_object(server_message)
        if message is None or message.get("type") != "joined":
            return None
        session = message.get("session")
        if not isinstance(session, str):
            return None
        self._sessions[session] = (shard, float("inf"))
        self._sessions.move_to_end(session)
        self._prune(now)
        return session

    def released(self, session: str, now: float) -> None:
        """The relayed socket of ``session`` closed: keep routing resumes for the grace."""
        entry = self._sessions.get(session)
        if entry is not None:
            self._sessions[session] = (entry[0], now + self.resume_grace_s)
            self._sessions.move_to_end(session)

    def session_count(self) -> int:
        return len(self._sessions)

    def _prune(self, now: float) -> None:
        if len(self._sessions) <= self.max_sessions:
            return
        for session, (_, forget_at) in list(self._sessions.items()):
            if forget_at <= now:
                del self._sessions[session]
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
