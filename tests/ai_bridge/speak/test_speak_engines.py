"""The real engines: piper (English) and espeak-ng 1.52 (Chinese, English fallback)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from kefu.ai_bridge.speak.base import (
    LEAD_THRESHOLD,
    PhonemeMark,
    TtsChunk,
    TtsEngine,
    TtsError,
    trim_lead,
)
from kefu.ai_bridge.speak.emotion import piper_style
from kefu.ai_bridge.speak.espeak_engine import EspeakEngine
from kefu.ai_bridge.speak.piper_engine import SILENCE, PiperEngine, alignment_marks

F0 = Callable[[np.ndarray, int], float]
LONG_ANSWER = (
    "Sure. I have found your order. It left our warehouse yesterday. "
    "The courier will deliver it tomorrow. You will get a text message. "
    "Please keep your phone nearby. Thank you for waiting."
)


async def collect(engine: TtsEngine, text: str, **kw: Any) -> list[TtsChunk]:
    return [c async for c in engine.synthesize(text, **kw)]


def audio(chunks: list[TtsChunk]) -> np.ndarray:
    return np.concatenate([c.pcm for c in chunks])


def assert_marks_cover(chunk: TtsChunk) -> None:
    pos = 0.0
    for mark in chunk.phonemes:
        assert mark.start_ms == pytest.approx(pos, abs=1e-6)
        assert mark.duration_ms >= 0
        pos = mark.start_ms + mark.duration_ms
    assert pos == pytest.approx(chunk.duration_ms, abs=1.0)


def test_engines_satisfy_the_protocol(
    piper: PiperEngine, espeak_cmn: EspeakEngine, espeak_en: EspeakEngine
) -> None:
    for engine in (piper, espeak_cmn, espeak_en):
        assert isinstance(engine, TtsEngine)
        assert engine.sample_rate == 22050
        assert engine.ready and engine.error is None
    assert piper.languages == ("en",) and espeak_cmn.languages == ("zh",)


def test_piper_raw_alignments_match_audio_length(piper: PiperEngine) -> None:
    from piper import SynthesisConfig

    voice = piper._voice
    for text in ("Hello, thanks for calling", "Your parcel arrives on Friday afternoon"):
        for chunk in voice.synthesize(text, SynthesisConfig(), include_alignments=True):
            assert chunk.phoneme_alignments, "alignments missing: is onnx installed?"
            pairs = [(a.phoneme, a.num_samples) for a in chunk.phoneme_alignments]
            marks = alignment_marks(pairs, piper.sample_rate)
            end = marks[-1].start_ms + marks[-1].duration_ms
            audio_ms = 1000 * len(chunk.audio_float_array) / piper.sample_rate
            assert abs(end - audio_ms) <= 50
            # Stress and length marks are folded into real phones.
            assert not any(m.phoneme in ("ˈ", "ˌ", "ː") for m in marks)


async def test_piper_speaks_with_alignments(piper: PiperEngine) -> None:
    chunks = await collect(piper, "Hello, how can I help you today?")
    assert [c.text for c in chunks] == ["Hello,", "how can I help you today?"]
    assert [c.is_last for c in chunks] == [False, True]
    for chunk in chunks:
        assert chunk.pcm.dtype == np.int16 and chunk.sample_rate == 22050
        assert 300 < chunk.duration_ms < 3000
        assert np.abs(chunk.pcm).max() > 8000
        assert_marks_cover(chunk)
        assert sum(m.phoneme != SILENCE for m in chunk.phonemes) >= 3


def _lead_ms(chunk: TtsChunk) -> float:
    return float(
        1000 * np.argmax(np.abs(chunk.pcm.astype(int)) > LEAD_THRESHOLD) / chunk.sample_rate
    )


async def test_a_reply_starts_at_its_first_phoneme(piper: PiperEngine) -> None:
    chunks = await collect(piper, "Your order ships tomorrow. It is on its way.")
    assert _lead_ms(chunks[0]) <= 6  # the reply's first clause starts at once ...
    assert _lead_ms(chunks[1]) > 20  # ... later clauses keep piper's lead-in: part of the pause


def test_trim_lead_moves_the_marks_with_the_audio(piper: PiperEngine) -> None:
    from kefu.ai_bridge.speak.emotion import piper_style

    raw = piper.render("Your order ships tomorrow.", piper_style("neutral"))
    trimmed = trim_lead(raw)
    assert _lead_ms(raw) > 20 and _lead_ms(trimmed) <= 6
    shift = raw.duration_ms - trimmed.duration_ms
    assert shift == pytest.approx(_lead_ms(raw) - _lead_ms(trimmed), abs=0.1)
    assert_marks_cover(trimmed)
    voiced = [m for m in raw.phonemes if m.phoneme != SILENCE]
    moved = [m for m in trimmed.phonemes if m.phoneme != SILENCE]
    assert [m.phoneme for m in moved] == [m.phoneme for m in voiced]
    assert [m.start_ms for m in moved] == pytest.approx([m.start_ms - shift for m in voiced])


def test_trim_lead_keeps_quiet_and_prompt_chunks_whole() -> None:
    silent = TtsChunk(np.zeros(2205, np.int16), 22050, "", ())
    assert trim_lead(silent) is silent
    loud = np.full(2205, 5000, np.int16)
    prompt = TtsChunk(loud, 22050, "a", (PhonemeMark("a", 0.0, 100.0),))
    assert trim_lead(prompt) is prompt


async def test_piper_happy_and_sad_sound_different(piper: PiperEngine, f0: F0) -> None:
    text = "Your refund has been approved and will arrive this week"  # no gap appended

    def steady(emotion: str) -> np.ndarray:
        # The emotion's length, pitch and gain, without piper's random noise: one draw in
        # many made the sad reading less than 1.2x as long (a fresh-clone run failed on it).
        style = replace(piper_style(emotion), noise_scale=0.0, noise_w=0.0)
        return piper.render(text, style).pcm

    happy, sad = steady("happy"), steady("sad")
    assert len(sad) > 1.2 * len(happy)
    assert f0(happy, 22050) > 1.1 * f0(sad, 22050)
    assert np.abs(sad).max() < np.abs(happy).max()


async def test_piper_pitch_shift_keeps_alignment_consistent(piper: PiperEngine) -> None:
    [chunk] = await collect(piper, "Really", emotion="surprised")
    assert_marks_cover(chunk)


async def test_espeak_cmn_speaks_with_phoneme_events(espeak_cmn: EspeakEngine) -> None:
    chunks = await collect(espeak_cmn, "您好，请问有什么可以帮您？")
    assert [c.text for c in chunks] == ["您好，", "请问有什么可以帮您？"]
    total_ms = sum(c.duration_ms for c in chunks)
    assert 1500 < total_ms < 6000
    assert np.abs(audio(chunks)).max() > 5000
    for chunk in chunks:
        assert len(chunk.phonemes) >= 4
        starts = [m.start_ms for m in chunk.phonemes]
        assert starts == sorted(starts)
        last = chunk.phonemes[-1]
        assert last.start_ms + last.duration_ms <= chunk.duration_ms + 1
    names = {m.phoneme for c in chunks for m in c.phonemes}
    assert {"n", "χ"} <= names  # nin2 hao3: IPA phonemes from espeakEVENT_PHONEME


async def test_espeak_emotion_changes_duration_and_pitch(espeak_en: EspeakEngine, f0: F0) -> None:
    text = "Thank you for calling, how can I help you today?"
    happy = audio(await collect(espeak_en, text, emotion="happy"))
    sad = audio(await collect(espeak_en, text, emotion="sad"))
    assert len(sad) > 1.2 * len(happy)
    assert f0(happy, 22050) > 1.1 * f0(sad, 22050)


async def test_ssml_break_becomes_silence(espeak_en: EspeakEngine) -> None:
    chunks = await collect(espeak_en, '<speak>Hi.<break time="400ms"/>Bye.</speak>')
    assert [c.text for c in chunks] == ["Hi.", "Bye."]
    tail = chunks[0].pcm[-int(0.4 * 22050) :]
    assert np.abs(tail).max() < 200


async def test_bad_request_is_rejected_before_any_work(piper: PiperEngine) -> None:
    with pytest.raises(TtsError, match="unknown emotion"):
        await collect(piper, "hi", emotion="bored")
    with pytest.raises(TtsError, match="rate"):
        await collect(piper, "hi", rate=0.0)


def counting(engine: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    rendered: list[str] = []
    original: Callable[..., TtsChunk] = engine.render

    def render(clause: str, *args: Any) -> TtsChunk:
        rendered.append(clause)
        return original(clause, *args)

    monkeypatch.setattr(engine, "render", render)
    return rendered


async def drain(engine: Any) -> None:
    """Wait until the engine's single worker has finished whatever it was given."""
    executor = engine.executor if hasattr(engine, "executor") else engine.library.executor
    await asyncio.get_running_loop().run_in_executor(executor, lambda: None)


@pytest.mark.parametrize("which", ["piper", "espeak_en"])
async def test_closing_the_stream_stops_synthesis(
    which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = request.getfixturevalue(which)
    rendered = counting(engine, monkeypatch)
    stream = engine.synthesize(LONG_ANSWER)
    first = await anext(stream)
    assert first.text == "Sure."
    await stream.aclose()
    await drain(engine)
    # One clause may have been submitted ahead (lookahead), never more.
    assert 1 <= len(rendered) <= 2
    assert len(engine.jobs(LONG_ANSWER)) >= 7


async def test_cancelling_the_task_stops_synthesis(
    piper: PiperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = counting(piper, monkeypatch)
    got: list[TtsChunk] = []
    first = asyncio.Event()

    async def speak() -> None:
        async for chunk in piper.synthesize(LONG_ANSWER):
            got.append(chunk)
            first.set()
            await asyncio.sleep(3600)  # a paced consumer, interrupted by barge-in

    task = asyncio.create_task(speak())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await drain(piper)
    assert len(got) == 1
    assert len(rendered) <= 2


async def test_a_second_espeak_library_does_not_break_the_first(espeak_cmn: EspeakEngine) -> None:
    import gc

    from kefu.ai_bridge.speak.espeak_engine import EspeakLibrary

    other = EspeakEngine("en-us", library=EspeakLibrary())
    other.load()
    assert other.ready
    assert await collect(other, "Hi.")
    other.close()
    del other
    gc.collect()  # its callback trampoline is gone; espeak must not call it again
    chunks = await collect(espeak_cmn, "谢谢。")
    assert sum(len(c.pcm) for c in chunks) > 1000
