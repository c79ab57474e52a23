"""Dialog state values and the session stores."""

from __future__ import annotations

from typing import Any

import pytest

from kefu.ai_bridge.dialog.state import (
    HISTORY_LINES,
    DialogState,
    MemorySessionStore,
    RedisSessionStore,
)


def test_state_json_roundtrip_and_slot_merge() -> None:
    s = DialogState("c1", lang="zh", turns=2, last_intent="order_status", last_kb_ids=("x",))
    s = s.with_slots({"order_number": "A1"}).with_slots({"date": "2026-12-03"})
    assert s.slot_dict() == {"order_number": "A1", "date": "2026-12-03"}
    assert DialogState.from_json(s.to_json()) == s


async def test_memory_store_is_bounded_and_counts_evictions() -> None:
    store = MemorySessionStore(max_sessions=2)
    for cid in ("a", "b"):
        await store.put(DialogState(cid))
    assert await store.get("a") is not None  # touch: "b" is now least recently used
    await store.put(DialogState("c"))
    assert len(store) == 2 and store.evicted == 1
    assert await store.get("b") is None
    await store.delete("a")
    assert await store.get("a") is None


class FakeRedis:
    """The three redis.asyncio calls the store uses."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.ttl: dict[str, int] = {}

    async def get(self, key: str) -> Any:
        return self.data.get(key)

    async def set(self, key: str, value: str, ex: int) -> None:
        self.data[key], self.ttl[key] = value.encode(), ex

    async def delete(self, key: str) -> None:
        self.data.pop(key, None)


async def test_redis_store_roundtrip_with_ttl() -> None:
    r = FakeRedis()
    store = RedisSessionStore(r, ttl_s=60)
    s = DialogState("c9", pending_slot="order_number").with_slots({"phone": "+14155550123"})
    await store.put(s)
    assert r.ttl["kefu:dialog:c9"] == 60
    assert await store.get("c9") == s
    await store.delete("c9")
    assert await store.get("c9") is None


def test_history_keeps_each_speaker_bounded_and_survives_json() -> None:
    s = DialogState("c2").with_line("caller", "where is my parcel").with_line("bot", "Which order?")
    s = s.with_line("agent", "I have found it, it arrives tomorrow.")
    assert s.history == (
        ("caller", "where is my parcel"),
        ("bot", "Which order?"),
        ("agent", "I have found it, it arrives tomorrow."),
    )
    assert DialogState.from_json(s.to_json()) == s
    for i in range(HISTORY_LINES + 5):
        s = s.with_line("caller", f"line {i}")
    assert len(s.history) == HISTORY_LINES
    assert s.history[-1] == ("caller", f"line {HISTORY_LINES + 4}")
    with pytest.raises(ValueError, match="unknown speaker 'robot'"):
        s.with_line("robot", "beep")
