"""PhraseCache: rendered audio for phrases the bot says again and again.

Greetings, "one moment please" and the like are rendered once in the background at start
and then cost a dictionary lookup instead of ~100 ms of synthesis. The cache is an LRU
bounded by the bytes of PCM it holds, keyed by (normalised text, emotion, engine name);
it counts hits, misses and evictions so /metrics can show whether the budget is right.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import structlog

from kefu.ai_bridge.speak.base import TtsChunk, TtsEngine
from kefu.ai_bridge.speak.text import normalize_text

log = structlog.get_logger(__name__)

COMMON_PHRASES: Mapping[str, tuple[str, ...]] = {
    "en": (
        "Hello, thank you for calling. How can I help you today?",
        "One moment please.",
        "Sorry, I didn't catch that. Could you say it again?",
        "Let me transfer you to a colleague.",
        "Is there anything else I can help you with?",
        "Thank you for calling. Goodbye!",
    ),
    "zh": (
        "您好，请问有什么可以帮您？",
        "请稍等。",
        "抱歉，我没有听清楚，请您再说一遍。",
        "我帮您转接人工客服。",
        "请问还有其他可以帮您的吗？",
        "感谢您的来电，再见！",
    ),
}
"""Phrases pre-rendered at start, per language."""


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters for /metrics."""

    entries: int
    """Phrases held."""
    bytes: int
    """PCM bytes held."""
    max_bytes: int
    """The byte budget."""
    hits: int
    """Lookups answered from the cache."""
    misses: int
    """Lookups that had to synthesise."""
    evictions: int
    """Entries dropped to stay within the budget."""


def _engine_name(engine: TtsEngine | str) -> str:
    return engine if isinstance(engine, str) else engine.name


class PhraseCache:
    """Bounded LRU of rendered phrases (byte budget, not entry count)."""

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str, str], tuple[TtsChunk, ...]] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def key(text: str, emotion: str, engine: TtsEngine | str) -> tuple[str, str, str]:
        return normalize_text(text), emotion, _engine_name(engine)

    def get(self, text: str, emotion: str, engine: TtsEngine | str) -> list[TtsChunk] | None:
        """The chunks for this phrase, or None; a hit makes the entry most recent."""
        key = self.key(text, emotion, engine)
        chunks = self._entries.get(key)
        if chunks is None:
            self._misses += 1
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return list(chunks)

    def put(
        self, text: str, emotion: str, engine: TtsEngine | str, chunks: Iterable[TtsChunk]
    ) -> bool:
        """Store a rendering; False when it alone is larger than the whole budget."""
        frozen = tuple(chunks)
        size = sum(c.nbytes for c in frozen)
        if size > self.max_bytes or not frozen:
            return False
        for chunk in frozen:
            # Cached audio is shared by every call that plays it: nobody may edit it.
            chunk.pcm.flags.writeable = False
        key = self.key(text, emotion, engine)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= sum(c.nbytes for c in old)
        self._entries[key] = frozen
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= sum(c.nbytes for c in evicted)
            self._evictions += 1
        return True

    def stats(self) -> CacheStats:
        return CacheStats(
            len(self._entries),
            self._bytes,
            self.max_bytes,
            self._hits,
            self._misses,
            self._evictions,
        )

    async def prerender(
        self,
        engine: TtsEngine,
        phrases: Iterable[str],
        *,
        emotion: str = "neutral",
        fill: float = 1.0,
    ) -> int:
        """Render ``phrases`` with ``engine`` into the cache; returns how many were stored.

        A phrase that fails is logged and skipped: the cache is an optimisation. Rendering
        stops once the cache holds ``fill`` of its byte budget (a large knowledge base must
        not evict what calls use, nor burn minutes of CPU at start).
        """
        stored = 0
        for phrase in phrases:
            if self._bytes >= fill * self.max_bytes:
                break
            if self.key(phrase, emotion, engine) in self._entries:
                continue
            try:
                gen = engine.synthesize(phrase, emotion=emotion, background=True)
                chunks = [c async for c in gen]
            except Exception as exc:  # a bad phrase must not stop the rest
                log.warning(
                    "tts.prerender_failed", engine=engine.name, phrase=phrase, error=str(exc)
                )
                continue
            stored += self.put(phrase, emotion, engine, chunks)
        return stored

    def prerender_in_background(
        self,
        engine: TtsEngine,
        phrases: Iterable[str],
        *,
        emotion: str = "neutral",
        fill: float = 1.0,
    ) -> asyncio.Task[None]:
        """Start :meth:`prerender` as a task the cache owns (cancelled by :meth:`close`)."""
        items = tuple(phrases)

        async def run() -> None:
            n = await self.prerender(engine, items, emotion=emotion, fill=fill)
            log.info("tts.prerendered", engine=engine.name, phrases=n)

        task = asyncio.get_running_loop().create_task(run(), name=f"prerender:{engine.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait_prerendered(self) -> None:
        """Wait for the background renders started so far (tests and readiness checks)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.wait_prerendered()
