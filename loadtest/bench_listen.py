"""Benchmarks of the ears: run with
``python3 -m pytest loadtest/bench_listen.py --benchmark-enable``.

VAD per 32 ms chunk, Whisper tiny.en decode of 2 s / 5 s utterances with the 30 s window and
the short window, pocketsphinx partial cost per 20 ms.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = {
    2: "I want to check my order status.",
    5: "Hello, I was charged twice for my subscription last month and I want a refund.",
}


@pytest.fixture(scope="module")
def utterances() -> dict[int, np.ndarray]:
    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    voice = piper_voice()
    return {k: speak(voice, text) for k, text in SENTENCES.items()}


@pytest.fixture(scope="module")
def engines():
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr, WhisperOptions

    made = {w: WhisperAsr(options=WhisperOptions(window=w)) for w in ("full", "short")}
    yield made
    for e in made.values():
        e.close()


def test_vad_chunk(benchmark, utterances) -> None:
    from kefu.ai_bridge.listen.vad import SileroVad

    vad = SileroVad()
    audio = utterances[5]
    chunks = [audio[i : i + 512] for i in range(0, len(audio) - 512, 512)]
    state = {"i": 0}

    def step() -> float:
        state["i"] = (state["i"] + 1) % len(chunks)
        return vad.probability(chunks[state["i"]])

    benchmark(step)


@pytest.mark.parametrize("seconds", [2, 5])
@pytest.mark.parametrize("window", ["full", "short"])
def test_whisper_decode(benchmark, engines, utterances, window: str, seconds: int) -> None:
    from kefu.ai_bridge.listen.heldout import wer

    engine = engines[window]
    audio = utterances[seconds]
    result = benchmark.pedantic(engine.transcribe_sync, args=(audio,), rounds=5, warmup_rounds=1)
    benchmark.extra_info["audio_s"] = round(len(audio) / 16000, 2)
    benchmark.extra_info["wer"] = wer(SENTENCES[seconds], result.text)


def test_pocketsphinx_partial_20ms(benchmark, utterances) -> None:
    from kefu.ai_bridge.listen.asr.partials import PocketsphinxPartials

    rec = PocketsphinxPartials()
    audio = utterances[5]
    frames = [audio[i : i + 320] for i in range(0, len(audio) - 320, 320)]
    state = {"i": 0}

    def step() -> str | None:
        state["i"] += 1
        if state["i"] >= len(frames):
            state["i"] = 0
            rec.reset()  # keep the utterance realistic in length
        return rec.feed(frames[state["i"]])

    benchmark(step)
