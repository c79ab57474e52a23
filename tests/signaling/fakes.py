"""Fakes for signaling tests: one fake SFU at the Sfu contract seam, one fake socket at the
hub's Socket seam, and a hand-driven clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kefu.errors import LocalError
from kefu.signaling.tokens import mint_token

SECRET = "test-secret-" + "0123456789abcdef" * 4


class FakeSfuError(LocalError):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class FakeParticipant:
    id: str
    room_id: str
    role: str
    sfu: FakeSfu
    on_ice_candidate: Callable[[dict[str, Any] | None], None] | None = None
    on_renegotiation_needed: Callable[[], None] | None = None
    on_event: Callable[[dict[str, Any]], None] | None = None
    on_state: Callable[[str], None] | None = None
    offers: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    candidates: list[dict[str, Any] | None] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)
    left: int = 0
    created_offers: int = 0

    async def handle_offer(self, sdp: str) -> str:
        if "bad" in sdp:
            raise ValueError("SDP has no media")
        self.offers.append(sdp)
        return f"answer-to:{sdp}"

    async def create_offer(self) -> str:
        self.created_offers += 1
        return f"server-offer-{self.created_offers}"

    async def handle_answer(self, sdp: str) -> None:
        self.answers.append(sdp)

    async def add_ice_candidate(self, candidate: dict[str, Any] | None) -> None:
        self.candidates.append(candidate)

    async def leave(self) -> None:
        self.left += 1
        room = self.sfu.rooms.get(self.room_id, {})
        room.pop(self.id, None)
        if not room:
            self.sfu.rooms.pop(self.room_id, None)

    def publish_event(self, event: dict[str, Any]) -> None:
        self.published.append(event)


class FakeSfu:
    def __init__(self, max_per_room: int = 4, max_rooms: int = 1000) -> None:
        self.rooms: dict[str, dict[str, FakeParticipant]] = {}
        self.max_per_room = max_per_room
        self.max_rooms = max_rooms
        self.all: list[FakeParticipant] = []

    async def join(
        self, room_id: str, participant_id: str, *, role: str, display: str = "", user: str = ""
    ) -> FakeParticipant:
        if room_id not in self.rooms and len(self.rooms) >= self.max_rooms:
            raise FakeSfuError("node_full")
        room = self.rooms.setdefault(room_id, {})
        if len(room) >= self.max_per_room:
            raise FakeSfuError("room_full")
        part = FakeParticipant(participant_id, room_id, role, self)
        room[participant_id] = part
        self.all.append(part)
        return part

    def room_exists(self, room_id: str) -> bool:
        return room_id in self.rooms


class FakeSocket:
    """Records what the hub sends; ``closed`` holds (code, reason) once closed."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self.changed = asyncio.Event()

    async def send_str(self, data: str) -> None:
        if self.closed is not None:
            raise ConnectionResetError("closed")
        self.sent.append(json.loads(data))
        self.changed.set()

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        self.closed = (code, message.decode())
        self.changed.set()
        return True

    def types(self) -> list[str]:
        return [m["type"] for m in self.sent]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["type"] == kind]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let writer tasks flush (they only need a few loop turns; no timers involved)."""
    for _ in range(10):
        await asyncio.sleep(0)


def token(
    user: str = "u1", role: str = "customer", room: str | None = None, ttl: float = 600
) -> str:
    return mint_token(SECRET, user, role, ttl, room)


def msg(kind: str, **fields: Any) -> str:
    return json.dumps({"v": 1, "type": kind, **fields})
