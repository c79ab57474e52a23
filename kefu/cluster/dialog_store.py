"""Dialog state kept in this process and replicated to Redis each turn.

A turn reads its call's state from memory (no Redis round trip on the answer's path) and
writes the new state to memory; a writer task copies every changed state to Redis
(``kefu:dialog:<call_id>``, JSON, TTL ``state.dialog_ttl_s``) within milliseconds, in
pipelined batches. A call that arrives on this node without local state (a web caller whose
node died, resuming here) is read from Redis once.

While Redis is lost the calls go on from memory; the changed states wait (the latest per
call, at most ``max_dirty`` calls: beyond that the oldest change is dropped and counted) and
are written when Redis returns.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import structlog

from kefu.ai_bridge.dialog.state import DialogState, MemorySessionStore
from kefu.cluster.redis_link import REDIS_ERRORS, RedisLink

__all__ = ["DIALOG_PREFIX", "ReplicatedSessionStore"]

log = structlog.get_logger("kefu.cluster")

DIALOG_PREFIX = "kefu:dialog:"
BATCH = 100


class ReplicatedSessionStore:
    """A :class:`~kefu.ai_bridge.dialog.state.SessionStore`: memory first, Redis behind."""

    def __init__(self, link: RedisLink, *, ttl_s: int = 3600, max_dirty: int = 10_000) -> None:
        self.link = link
        self.ttl_s = ttl_s
        self.max_dirty = max_dirty
        self.local = MemorySessionStore()
        self._dirty: OrderedDict[str, DialogState | None] = OrderedDict()
        """Changes not yet in Redis: call id -> its latest state (None: deleted)."""
        self._wake = asyncio.Event()
        self.written = 0
        self.read_from_redis = 0
        self.dropped = 0

    async def get(self, call_id: str) -> DialogState | None:
        state = await self.local.get(call_id)
        if state is not None or call_id in self._dirty or not self.link.up:
            return state
        try:
            raw = await self.link.client.get(DIALOG_PREFIX + call_id)
        except REDIS_ERRORS as exc:
            self.link.failed(exc)
            return None
        if raw is None:
            return None
        try:
            state = DialogState.from_json(raw)
        except (ValueError, TypeError, KeyError):
            log.warning("cluster.dialog_state_unreadable", call_id=call_id)
            return None
        self.read_from_redis += 1
        await self.local.put(state)
        log.info("cluster.dialog_state_restored", call_id=call_id, turns=state.turns)
        return state

    async def put(self, state: DialogState) -> None:
        await self.local.put(state)
        self._mark(state.call_id, state)

    async def delete(self, call_id: str) -> None:
        await self.local.delete(call_id)
        self._mark(call_id, None)

    def resync(self) -> int:
        """Queue every state held here for Redis (after an outage: a restarted Redis has
        none of them); how many."""
        states = self.local.states()
        for state in states:
            if state.call_id not in self._dirty:
                self._mark(state.call_id, state)
        return len(states)

    def _mark(self, call_id: str, state: DialogState | None) -> None:
        self._dirty[call_id] = state
        self._dirty.move_to_end(call_id)
        while len(self._dirty) > self.max_dirty:
            self._dirty.popitem(last=False)
            self.dropped += 1
        self._wake.set()

    async def run_writer(self) -> None:
        while True:
            if not self._dirty:
                self._wake.clear()
                await self._wake.wait()
            batch = list(self._dirty.items())[:BATCH]
            try:
                async with self.link.client.pipeline(transaction=False) as pipe:
                    for call_id, state in batch:
                        if state is None:
                            pipe.delete(DIALOG_PREFIX + call_id)
                        else:
                            pipe.set(DIALOG_PREFIX + call_id, state.to_json(), ex=self.ttl_s)
                    await pipe.execute()
            except REDIS_ERRORS as exc:
                self.link.failed(exc)
                await self.link.wait_up()
                continue
            for call_id, state in batch:
                if self._dirty.get(call_id, state) is state:
                    self._dirty.pop(call_id, None)  # unless it changed again meanwhile
            self.written += len(batch)

    def describe(self) -> dict[str, int]:
        return {
            "written": self.written,
            "pending": len(self._dirty),
            "restored": self.read_from_redis,
            "dropped": self.dropped,
        }
