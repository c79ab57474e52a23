"""Per-call dialog state and where it is kept.

``DialogState`` is an immutable value: each turn computes a new one and stores it, so a turn
that is cancelled halfway (barge-in) leaves the previous state intact. ``SessionStore`` is
async so a Redis implementation (redis.asyncio, JSON values with a TTL) can stand behind
the same protocol; ``MemorySessionStore`` is the in-process default. ``CallLocks`` serialises
the read-modify-write of one call's state (a turn, a line added to its history).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)

HISTORY_LINES = 24
"""Lines of the conversation a :class:`DialogState` keeps (the oldest are forgotten)."""

SPEAKERS = ("caller", "bot", "agent")
"""Who a history line is from: the caller, the AI, a human agent (during a takeover)."""


@dataclass(frozen=True, slots=True)
class DialogState:
    """What the dialog remembers about one call between turns."""

    call_id: str
    """The call this state belongs to (SessionStore key)."""
    lang: str = "en"
    """Language of the caller's last turn ('en' / 'zh')."""
    turns: int = 0
    """Caller turns handled so far."""
    last_intent: str = ""
    """Intent of the last answered turn (for follow-ups like "and how long does it take?")."""
    last_query: str = ""
    """The caller's last on-topic question, prepended to follow-ups for retrieval."""
    slots: tuple[tuple[str, str], ...] = ()
    """Slot values gathered so far in this call (name, normalised value)."""
    pending_slot: str = ""
    """Slot the bot just asked for; the next turn is read as its answer."""
    pending_intent: str = ""
    """Intent that was waiting for ``pending_slot``."""
    pending_query: str = ""
    """The question that was waiting for ``pending_slot`` (answered once it is filled)."""
    pending_entry: str = ""
    """The knowledge-base entry that asked for ``pending_slot``: the one answered once it is
    filled (a re-ranking of ``pending_query`` could prefer the entry the caller turned down
    in "A or B?")."""
    offered_handoff: bool = False
    """The bot just offered a human colleague; "yes" means hand off."""
    pending_choice: tuple[str, ...] = ()
    """Knowledge-base entries the bot just asked the caller to choose between ("Do you mean
    A or B?"); the next turn is resolved against these two first."""
    pending_choice_query: str = ""
    """The question that was ambiguous between ``pending_choice``."""
    last_kb_ids: tuple[str, ...] = ()
    """Knowledge-base entries used in the last answer."""
    history: tuple[tuple[str, str], ...] = ()
    """The conversation so far as ``(speaker, text)``, oldest first, the last
    :data:`HISTORY_LINES` only; ``speaker`` is one of :data:`SPEAKERS`, so what a human agent
    said during a takeover is there, as theirs, when the AI has the call back."""

    def with_line(self, speaker: str, text: str) -> DialogState:
        """This state with one more line of conversation (``ValueError``: unknown speaker)."""
        if speaker not in SPEAKERS:
            raise ValueError(f"unknown speaker {speaker!r}: expected one of {SPEAKERS}")
        return replace(self, history=(*self.history, (speaker, text))[-HISTORY_LINES:])

    def slot_dict(self) -> dict[str, str]:
        return dict(self.slots)

    def with_slots(self, new: dict[str, str]) -> DialogState:
        merged = self.slot_dict()
        merged.update(new)
        return replace(self, slots=tuple(sorted(merged.items())))

    def to_json(self) -> str:
        d: dict[str, Any] = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["slots"] = [list(p) for p in self.slots]
        d["last_kb_ids"] = list(self.last_kb_ids)
        d["pending_choice"] = list(self.pending_choice)
        d["history"] = [list(p) for p in self.history]
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> DialogState:
        d = json.loads(raw)
        d["slots"] = tuple((str(a), str(b)) for a, b in d.get("slots", []))
        d["last_kb_ids"] = tuple(d.get("last_kb_ids", []))
        d["pending_choice"] = tuple(d.get("pending_choice", []))
        d["history"] = tuple((str(a), str(b)) for a, b in d.get("history", []))
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


class CallLocks:
    """One ``asyncio.Lock`` per call id, kept only while a task holds or awaits it (a weak
    mapping: calls that never end leave nothing behind)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, call_id: str) -> asyncio.Lock:
        lock = self._locks.get(call_id)
        if lock is None:
            lock = self._locks[call_id] = asyncio.Lock()
        return lock


class SessionStore(Protocol):
    """Dialog state by call id."""

    async def get(self, call_id: str) -> DialogState | None: ...

    async def put(self, state: DialogState) -> None: ...

    async def delete(self, call_id: str) -> None: ...


@dataclass(slots=True)
class MemorySessionStore:
    """In-process store, bounded: the least recently used call is evicted (and counted)
    when ``max_sessions`` is exceeded, so calls that end without ``delete`` cannot leak."""

    max_sessions: int = 10_000
    evicted: int = 0
    _data: OrderedDict[str, DialogState] = field(default_factory=OrderedDict)

    async def get(self, call_id: str) -> DialogState | None:
        state = self._data.get(call_id)
        if state is not None:
            self._data.move_to_end(call_id)
        return state

    async def put(self, state: DialogState) -> None:
        self._data[state.call_id] = state
        self._data.move_to_end(state.call_id)
        while len(self._data) > self.max_sessions:
            old, _ = self._data.popitem(last=False)
            self.evicted += 1
            log.warning("dialog.state_evicted", call_id=old, evicted=self.evicted)

    async def delete(self, call_id: str) -> None:
        self._data.pop(call_id, None)

    def states(self) -> list[DialogState]:
        """Every call's state held now."""
        return list(self._data.values())

    def __len__(self) -> int:
        return len(self._data)


class RedisSessionStore:
    """State in Redis as JSON under ``<prefix><call_id>`` with a TTL (calls that never
    hang up cleanly expire). ``client`` is a ``redis.asyncio.Redis``."""

    def __init__(self, client: Any, *, prefix: str = "kefu:dialog:", ttl_s: int = 3600) -> None:
        self._r = client
        self._prefix = prefix
        self._ttl = ttl_s

    async def get(self, call_id: str) -> DialogState | None:
        raw = await self._r.get(self._prefix + call_id)
        return DialogState.from_json(raw) if raw is not None else None

    async def put(self, state: DialogState) -> None:
        await self._r.set(self._prefix + state.call_id, state.to_json(), ex=self._ttl)

    async def delete(self, call_id: str) -> None:
        await self._r.delete(self._prefix + call_id)
