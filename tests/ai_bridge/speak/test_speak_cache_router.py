"""PhraseCache (LRU by bytes) and the Voice router (language choice, fallback, cache)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kefu.ai_bridge.speak.base import TtsChunk, TtsError
from kefu.ai_bridge.speak.cache import COMMON_PHRASES, PhraseCache
from kefu.ai_bridge.speak.espeak_engine import EspeakEngine
from kefu.ai_bridge.speak.piper_engine import PiperEngine
from kefu.ai_bridge.speak.router import Voice


def chunk(samples: int, text: str = "x") -> TtsChunk:
    return TtsChunk(np.ones(samples, np.int16), 22050, text, (), True)


def test_cache_lru_by_bytes() -> None:
    cache = PhraseCache(max_bytes=3000)
    assert cache.put("a", "neutral", "e", [chunk(500)])  # 1000 bytes
    assert cache.put("b", "neutral", "e", [chunk(500)])
    assert cache.get("a", "neutral", "e") is not None  # a is now most recent
    assert cache.put("c", "neutral", "e", [chunk(600)])  # 1200 bytes: b must go
    assert cache.get("b", "neutral", "e") is None
    assert cache.get("a", "neutral", "e") is not None
    assert not cache.put("huge", "neutral", "e", [chunk(2000)])
    stats = cache.stats()
    assert (stats.entries, stats.bytes, stats.evictions) == (2, 2200, 1)
    assert (stats.hits, stats.misses) == (2, 1)


def test_cache_key_normalises_text_and_separates_emotion_and_engine() -> None:
    cache = PhraseCache()
    cache.put("One  moment please.", "neutral", "piper", [chunk(10)])
    assert cache.get("One moment please.", "neutral", "piper") is not None
    assert cache.get("One moment please.", "happy", "piper") is None
    assert cache.get("One moment please.", "neutral", "espeak") is None


def test_cached_audio_is_read_only() -> None:
    cache = PhraseCache()
    cache.put("hi", "neutral", "e", [chunk(10)])
    [got] = cache.get("hi", "neutral", "e") or []
    with pytest.raises(ValueError):
        got.pcm[0] = 5


@pytest.fixture
def voice(piper: PiperEngine, espeak_cmn: EspeakEngine, espeak_en: EspeakEngine) -> Voice:
    return Voice(english=piper, chinese=espeak_cmn, english_fallback=espeak_en)


def test_language_routing(voice: Voice) -> None:
    assert voice.engine_for("How are you?") is voice.english
    assert voice.engine_for("您好") is voice.chinese
    assert voice.engine_for("OK", lang="zh-CN") is voice.chinese
    assert voice.engine_for("您好", lang="en") is voice.english
    assert voice.ready and voice.error is None


async def test_prerendered_phrases_are_instant(
    voice: Voice, monkeypatch: pytest.MonkeyPatch
) -> None:
    await voice.start()
    await voice.cache.wait_prerendered()
    assert voice.cache.stats().entries == sum(len(p) for p in COMMON_PHRASES.values())

    def no_synthesis(*args: Any, **kw: Any) -> Any:
        raise AssertionError("a cached phrase must not be synthesised")

    monkeypatch.setattr(voice.english, "synthesize", no_synthesis)
    monkeypatch.setattr(voice.chinese, "synthesize", no_synthesis)
    # Instant = no synthesis (the engines above raise); what a hit costs in time is
    # loadtest/bench_speak.py::test_cache_hit_cost, not a wall-clock assert here.
    for text in ("One moment please.", "请稍等。"):
        chunks = [c async for c in voice.synthesize(text)]
        assert chunks and chunks[-1].is_last
    await voice.close()  # injected engines stay usable: the voice does not own them
    assert voice.english.ready


async def test_reply_openings_render_ahead_within_their_share_of_the_cache(
    piper: PiperEngine, espeak_cmn: EspeakEngine, espeak_en: EspeakEngine
) -> None:
    lines = {
        "en": ["Standard delivery takes 3 to 5 business days.", "Returns are free."],
        "zh": ["标准配送需要三到五个工作日。"],
    }
    voice = Voice(english=piper, chinese=espeak_cmn, english_fallback=espeak_en, prerender=False)
    await voice.start()
    assert voice.prerender_in_background(lines) == 3
    await voice.cache.wait_prerendered()
    for lang, texts in lines.items():
        for text in texts:
            chunks = voice.cache.get(text, "neutral", voice.engine_for(text, lang))
            assert chunks and sum(len(c.pcm) for c in chunks) > 0.5 * chunks[0].sample_rate
    # a budget already half full renders nothing more
    small = Voice(english=piper, chinese=espeak_cmn, english_fallback=espeak_en, prerender=False)
    small.cache = PhraseCache(max_bytes=100_000)
    small.cache.put("filler", "neutral", "x", [chunk(25_000)])  # 50 kB: half of it
    small.prerender_in_background({"en": ["Returns are free."]})
    await small.cache.wait_prerendered()
    assert small.cache.stats().entries == 1
    await voice.close()
    await small.close()


async def test_short_replies_are_cached_after_first_use(voice: Voice) -> None:
    text = "Your order number is 4 8 2 1."
    first = [c async for c in voice.synthesize(text, emotion="happy")]
    second = [c async for c in voice.synthesize(text, emotion="happy")]
    assert [c.text for c in first] == [c.text for c in second]
    assert all(a.pcm is b.pcm for a, b in zip(first, second, strict=True))


async def test_piper_failure_falls_back_to_espeak_english(
    espeak_cmn: EspeakEngine, espeak_en: EspeakEngine, tmp_path: Any
) -> None:
    broken = PiperEngine(model_path=tmp_path / "missing.onnx")
    voice = Voice(english=broken, chinese=espeak_cmn, english_fallback=espeak_en, prerender=False)
    await voice.start()
    assert not broken.ready and "missing.onnx" in (broken.error or "")
    assert voice.ready
    assert "falls back to espeak-ng:en-us" in (voice.error or "")
    assert voice.engine_for("Hello") is espeak_en
    chunks = [c async for c in voice.synthesize("Hello there.")]
    assert sum(len(c.pcm) for c in chunks) > 5000
    await voice.close()
    broken.close()


async def test_not_ready_voice_refuses_clearly(tmp_path: Any) -> None:
    broken = PiperEngine(model_path=tmp_path / "missing.onnx")
    no_fallback = PiperEngine(model_path=tmp_path / "also-missing.onnx")
    voice = Voice(english=broken, english_fallback=no_fallback, prerender=False)
    await voice.start()
    assert not voice.ready
    with pytest.raises(TtsError, match="no voice for 'en'"):
        [c async for c in voice.synthesize("Hello")]
    await voice.close()
    broken.close()
    no_fallback.close()
