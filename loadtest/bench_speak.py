"""TTS benchmarks: first-chunk latency, real-time factor, cache-hit cost.

Run with ``python3 -m pytest loadtest/bench_speak.py --benchmark-enable``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import pytest

from kefu.ai_bridge.speak.cache import PhraseCache
from kefu.ai_bridge.speak.espeak_engine import EspeakEngine, EspeakLibrary
from kefu.ai_bridge.speak.piper_engine import PiperEngine
from kefu.ai_bridge.speak.router import Voice

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ANSWER_EN = (
    "Sure, I can help with that. Your order left our warehouse yesterday evening, "
    "and it should arrive tomorrow before noon. You will get a text message with the "
    "tracking number."
)
ANSWER_ZH = (
    "好的，我来帮您查一下。您的订单已经在昨天晚上发货，预计明天中午之前送达，请您注意查收短信。"
)


@pytest.fixture(scope="module")
def piper() -> Iterator[PiperEngine]:
    engine = PiperEngine()
    engine.load()
    assert engine.ready, engine.error
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def espeak() -> Iterator[EspeakEngine]:
    library = EspeakLibrary()
    engine = EspeakEngine("cmn", library=library)
    engine.load()
    assert engine.ready, engine.error
    yield engine
    library.close()


def first_chunk_ms(engine: PiperEngine | EspeakEngine, text: str) -> float:
    """Time to the first chunk from an idle engine.

    After closing the stream the executor is drained: the clause submitted ahead finishes
    anyway (an inference cannot be interrupted) and would otherwise delay the next round.
    """

    async def run() -> float:
        t0 = time.perf_counter()
        stream = engine.synthesize(text)
        await anext(stream)
        elapsed = (time.perf_counter() - t0) * 1000
        await stream.aclose()
        executor = engine.executor if isinstance(engine, PiperEngine) else engine.library.executor
        await asyncio.get_running_loop().run_in_executor(executor, lambda: None)
        return elapsed

    return asyncio.run(run())


def rtf(engine: PiperEngine | EspeakEngine, text: str) -> float:
    """Synthesis time / audio time for the whole answer (no consumer pacing)."""

    async def run() -> float:
        t0 = time.perf_counter()
        audio_s = 0.0
        async for chunk in engine.synthesize(text):
            audio_s += chunk.duration_ms / 1000
        return (time.perf_counter() - t0) / audio_s

    return asyncio.run(run())


@pytest.mark.parametrize("which, text", [("piper", ANSWER_EN), ("espeak", ANSWER_ZH)])
def test_first_chunk_latency(benchmark, request, which: str, text: str) -> None:  # type: ignore[no-untyped-def]
    engine = request.getfixturevalue(which)
    samples: list[float] = []
    benchmark.pedantic(
        lambda: samples.append(first_chunk_ms(engine, text)), rounds=20, warmup_rounds=2
    )
    samples.sort()
    p50, p95 = samples[len(samples) // 2], samples[int(len(samples) * 0.95) - 1]
    benchmark.extra_info |= {"first_chunk_p50_ms": round(p50, 2), "first_chunk_p95_ms": p95}
    print(f"\n{which}: first chunk p50 {p50:.1f} ms, p95 {p95:.1f} ms")


@pytest.mark.parametrize("which, text", [("piper", ANSWER_EN), ("espeak", ANSWER_ZH)])
def test_real_time_factor(benchmark, request, which: str, text: str) -> None:  # type: ignore[no-untyped-def]
    engine = request.getfixturevalue(which)
    value = benchmark.pedantic(rtf, args=(engine, text), rounds=5, warmup_rounds=1)
    benchmark.extra_info["rtf"] = round(value, 4)
    print(f"\n{which}: RTF {value:.3f}")


def test_cache_hit_cost(benchmark, piper: PiperEngine) -> None:  # type: ignore[no-untyped-def]
    voice = Voice(english=piper, chinese=piper, english_fallback=piper, cache=PhraseCache())
    phrase = "One moment please."

    async def render_once() -> None:
        _ = [c async for c in voice.synthesize(phrase)]

    asyncio.run(render_once())  # first time renders and stores it
    loop = asyncio.new_event_loop()

    def hit() -> int:
        async def run() -> int:
            return len([c async for c in voice.synthesize(phrase)])

        return loop.run_until_complete(run())

    try:
        assert benchmark(hit) >= 1
    finally:
        loop.close()
    assert voice.cache.stats().hits >= 1
