"""Prosodic arousal: the YIN pitch tracker, the features, and the ordering of arousal."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

from kefu.ai_bridge.emotion.prosody import (
    ProsodyBaseline,
    arousal,
    baseline_from,
    count_units,
    measure,
    track_pitch,
)

SR = 16000
Voice = Callable[..., np.ndarray]
TEXT = "where is my order I ordered it two weeks ago"


@pytest.mark.parametrize("f0", [65.0, 90.0, 120.0, 180.0, 240.0, 330.0, 450.0])
def test_pitch_of_a_steady_harmonic_tone_is_within_one_percent(f0: float, voice: Voice) -> None:
    x = voice([f0], level=0.3, seconds=1.0, syllables_per_s=0.0)
    est, aperiodicity, _ = track_pitch(x)
    assert np.median(est) == pytest.approx(f0, rel=0.01)
    assert np.median(aperiodicity) < 0.1


def test_pitch_follows_a_glide_and_reports_its_range(voice: Voice) -> None:
    # 100 → 200 Hz: one octave = 12 semitones; p10-p90 of a linear-in-Hz glide is ~9.4 st.
    x = voice([100.0, 200.0], level=0.3, seconds=2.0, syllables_per_s=0.0)
    f0, _, _ = track_pitch(x)
    mid = f0[len(f0) // 2]
    assert mid == pytest.approx(150.0, rel=0.03)
    feats = measure(x)
    assert feats.f0_range_st is not None and 8.0 < feats.f0_range_st < 11.0
    assert feats.f0_median_hz == pytest.approx(150.0, rel=0.05)


def test_noise_is_not_voiced() -> None:
    noise = (np.random.default_rng(3).standard_normal(SR) * 3000).astype(np.int16)
    feats = measure(noise)
    assert feats.voiced_s < 0.1 * feats.speech_s
    assert feats.f0_median_hz is None


def test_level_clipping_and_rate_are_measured(voice: Voice) -> None:
    quiet = voice([150.0], level=0.01, seconds=2.0)
    loud = voice([150.0], level=1.0, clip=True, seconds=2.0)
    fq, fl = measure(quiet, TEXT, "en"), measure(loud, TEXT, "en")
    assert fl.level_db - fq.level_db > 35.0
    assert fq.clip_ratio == 0.0 and fl.clip_ratio > 0.1
    assert fq.rate == pytest.approx(10 / fq.speech_s)
    assert fq.rate_unit == "word"


def test_rate_units_words_in_english_characters_in_mandarin() -> None:
    assert count_units("I'd like to pay my bill", "en") == (6, "word")
    assert count_units("我想查一下订单", "zh") == (7, "char")
    # Code-switched Mandarin: a Latin word counts as one unit.
    assert count_units("我想upgrade一下我的plan", "zh") == (8, "char")


def test_arousal_orders_shouting_above_normal_above_flat_quiet_speech(voice: Voice) -> None:
    shout = voice([220.0, 330.0, 200.0], level=1.0, clip=True, syllables_per_s=5.5, seconds=1.6)
    normal = voice([140.0, 175.0, 130.0], level=0.2, seconds=2.4)
    flat = voice([110.0, 105.0], level=0.02, seconds=3.5, syllables_per_s=2.5)
    a = [arousal(measure(x, TEXT, "en")) for x in (shout, normal, flat)]
    assert all(r is not None for r in a)
    values = [r.arousal for r in a if r is not None]
    assert values[0] > 0.8
    assert values[0] > values[1] + 0.4 > values[2] + 0.8
    assert values[2] < -0.5
    assert not any(r.whisper for r in a if r is not None)


@pytest.mark.parametrize(
    ("feature", "low", "high"),
    [
        ("pitch", {"contour": [120.0]}, {"contour": [200.0]}),
        ("range", {"contour": [150.0, 150.0]}, {"contour": [110.0, 220.0, 120.0]}),
        ("level", {"level": 0.05}, {"level": 0.4}),
    ],
)
def test_each_feature_raises_arousal_on_its_own(
    feature: str, low: dict, high: dict, voice: Voice
) -> None:
    base = {"contour": [150.0, 160.0], "level": 0.15, "seconds": 2.0}
    lo = arousal(measure(voice(**{**base, **low}), TEXT, "en"))
    hi = arousal(measure(voice(**{**base, **high}), TEXT, "en"))
    assert lo is not None and hi is not None
    assert hi.arousal > lo.arousal + 0.1, (feature, lo, hi)


def test_faster_speech_has_higher_arousal(voice: Voice) -> None:
    x = voice([150.0, 160.0], level=0.15, seconds=2.0)
    slow = arousal(measure(x, "where is my order", "en"))
    fast = arousal(measure(x, TEXT + " and it still is not here", "en"))
    assert slow is not None and fast is not None
    assert fast.arousal > slow.arousal + 0.2


def test_whisper_is_low_arousal_and_flagged(voice: Voice) -> None:
    n = 2 * SR
    envelope = np.clip(np.sin(np.pi * 4.0 * np.arange(n) / SR) ** 2 * 1.6, 0.0, 1.0)
    whisper = (np.random.default_rng(0).standard_normal(n) * 150 * envelope).astype(np.int16)
    result = arousal(measure(whisper, "can you just text me the code", "en"))
    assert result is not None
    assert result.whisper
    assert result.arousal <= -0.4
    # Quiet but voiced speech is not a whisper.
    soft = arousal(measure(voice([130.0], level=0.02), "can you text me", "en"))
    assert soft is not None and not soft.whisper


def test_too_little_speech_gives_no_arousal(voice: Voice) -> None:
    assert arousal(measure(np.zeros(SR, np.int16), "hello", "en")) is None
    assert arousal(measure(voice([150.0], level=0.2, seconds=0.15), "hi", "en")) is None


def test_baseline_makes_arousal_relative_to_the_caller(voice: Voice) -> None:
    # A high-pitched, loud-channel caller speaking normally for them.
    habitual = [voice([230.0, 260.0, 220.0], level=0.5, seconds=2.0, seed=s) for s in (1, 2)]
    feats = [measure(x, TEXT, "en") for x in habitual]
    base = baseline_from(feats)
    assert isinstance(base, ProsodyBaseline) and base.turns == 2
    assert base.rate_word is not None and base.rate_char is None
    same = measure(voice([230.0, 260.0, 220.0], level=0.5, seconds=2.0), TEXT, "en")
    pop = arousal(same)
    rel = arousal(same, base)
    assert pop is not None and rel is not None
    assert pop.relative_to == "population" and rel.relative_to == "call"
    assert pop.arousal > 0.4  # against the population, this voice sounds aroused...
    assert abs(rel.arousal) < 0.2  # ...against the caller's own baseline it does not.
    louder = measure(voice([260.0, 300.0, 240.0], level=1.0, seconds=2.0), TEXT, "en")
    lifted = arousal(louder, base)
    assert lifted is not None and lifted.arousal > rel.arousal + 0.3


def test_baseline_needs_a_turn_with_speech() -> None:
    assert baseline_from([measure(np.zeros(SR, np.int16))]) is None


@pytest.fixture(scope="module")
def piper_voice() -> Iterator[Callable[[str, str], np.ndarray]]:
    """English piper voice rendering ``(text, emotion)`` as 16 kHz int16, or skip."""
    pytest.importorskip("piper", reason="piper-tts model package not installed")
    soxr = pytest.importorskip("soxr")
    from kefu.ai_bridge.speak.emotion import piper_style
    from kefu.ai_bridge.speak.piper_engine import PiperEngine

    engine = PiperEngine()
    engine.load()
    if not engine.ready:
        pytest.skip(f"piper model not loadable: {engine.error}")

    def render(text: str, emotion: str) -> np.ndarray:
        chunk = engine.render(text, piper_style(emotion))
        pcm = soxr.resample(chunk.pcm.astype(np.float32), chunk.sample_rate, SR)
        return np.asarray(np.clip(pcm, -32768, 32767), dtype=np.int16)

    yield render
    engine.close()


@pytest.mark.parametrize(
    "text",
    [
        "I have been waiting for my refund for three weeks and nobody has called me back.",
        "My package was supposed to arrive on Monday but it still has not shown up.",
    ],
)
def test_piper_angry_speech_has_higher_arousal_than_sad(
    piper_voice: Callable[[str, str], np.ndarray], text: str
) -> None:
    # piper's "angry" is faster, louder and a little higher than its "sad" (speak/emotion.py).
    results = {}
    for emotion in ("sad", "neutral", "angry"):
        result = arousal(measure(piper_voice(text, emotion), text, "en"))
        assert result is not None
        results[emotion] = result.arousal
    assert results["angry"] > results["sad"] + 0.3, results
    assert results["neutral"] > results["sad"], results
