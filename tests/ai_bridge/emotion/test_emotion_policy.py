"""Per-call smoothing, the reply-tone table and the escalation rules (pure, no models)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from structlog.testing import capture_logs

from kefu.ai_bridge.emotion import (
    EMOTIONS,
    REPLY_KINDS,
    CallerEmotion,
    EmotionTracker,
    EscalationPolicy,
    EscalationSettings,
    TrackerState,
    reply_emotion,
)
from kefu.ai_bridge.emotion.prosody import measure
from kefu.ai_bridge.emotion.values import EmotionError
from kefu.ai_bridge.speak.base import EMOTIONS as TTS_EMOTIONS


def emo(label: str, valence: float, confidence: float = 0.8, **kw: object) -> CallerEmotion:
    scores = tuple(1.0 if e == label else 0.0 for e in EMOTIONS)
    return CallerEmotion(label, valence, 0.0, confidence, scores=scores, **kw)  # type: ignore[arg-type]


def test_labels_are_the_tts_emotions() -> None:
    assert EMOTIONS == TTS_EMOTIONS


# --- tracker ------------------------------------------------------------------------------


def test_first_turn_sets_the_state_then_it_is_smoothed() -> None:
    tr = EmotionTracker(alpha=0.5)
    s1 = tr.update(emo("angry", -0.8, confidence=1.0))
    assert s1.valence == -0.8 and s1.label == "angry" and s1.turns == 1
    s2 = tr.update(emo("happy", 0.8, confidence=1.0))
    assert s2.valence == pytest.approx(0.0)  # halfway at alpha 0.5, confidence 1
    s3 = tr.update(emo("happy", 0.8, confidence=0.2))  # a weak turn moves it less
    assert 0.0 < s3.valence < 0.4
    assert s3.label == "happy"


def test_zero_confidence_turns_are_recorded_but_not_smoothed_in() -> None:
    tr = EmotionTracker()
    tr.update(emo("sad", -0.6))
    state = tr.update(CallerEmotion.unknown("not loaded"))
    assert state.turns == 2 and len(state.recent) == 2
    assert state.valence == -0.6 and state.label == "sad"
    assert tr.previous_valence == 0.0


def test_negative_streak_counts_only_the_latest_run() -> None:
    tr = EmotionTracker()
    for e in (emo("angry", -0.7), emo("neutral", 0.0), emo("angry", -0.7), emo("sad", -0.5)):
        state = tr.update(e)
    assert state.negative_streak() == 2
    assert state.negative_streak(valence_below=-0.6) == 0
    state = tr.update(emo("angry", -0.9, confidence=0.3))  # too unsure to count
    assert state.negative_streak(min_confidence=0.4) == 0


def test_history_is_bounded() -> None:
    tr = EmotionTracker(history=3)
    for _ in range(10):
        state = tr.update(emo("neutral", 0.0))
    assert len(state.recent) == 3 and state.turns == 10


def test_baseline_is_built_from_the_first_turns_with_speech(
    voice: Callable[..., np.ndarray],
) -> None:
    tr = EmotionTracker(baseline_turns=2)
    silent = measure(np.zeros(16000, np.int16), "hello", "en")
    tr.update(emo("neutral", 0.0, prosody=silent))
    assert tr.baseline is None
    for f0 in (200.0, 220.0):
        feats = measure(voice([f0], level=0.2), "I would like to check my bill", "en")
        tr.update(emo("neutral", 0.0, prosody=feats))
    base = tr.baseline
    assert base is not None and base.turns == 2
    assert base.f0_hz == pytest.approx(210.0, rel=0.03)
    # Fixed once built: later turns do not move it.
    tr.update(emo("angry", -0.8, prosody=measure(voice([300.0], level=1.0), "no", "en")))
    assert tr.baseline == base


def test_tracker_validates_its_settings() -> None:
    with pytest.raises(EmotionError):
        EmotionTracker(alpha=0.0)
    with pytest.raises(EmotionError):
        EmotionTracker(history=0)


# --- reply tone ---------------------------------------------------------------------------


def test_reply_is_never_angry_fearful_or_surprised() -> None:
    for label, kind, conf, val in itertools.product(
        EMOTIONS, REPLY_KINDS, (0.0, 0.5, 1.0), (-1.0, 0.0, 1.0)
    ):
        out = reply_emotion(emo(label, val, confidence=conf), kind)
        assert out in ("neutral", "happy", "sad"), (label, kind, out)


@pytest.mark.parametrize(
    ("label", "valence", "kind", "expected"),
    [
        ("neutral", 0.0, "greeting", "happy"),  # warm greeting
        ("angry", -0.8, "greeting", "neutral"),  # no cheerfulness at an angry caller
        ("angry", -0.8, "answer", "neutral"),  # calm
        ("angry", -0.8, "handoff", "sad"),  # empathetic
        ("fearful", -0.6, "answer", "neutral"),  # reassuring
        ("surprised", -0.5, "goodbye", "neutral"),  # a shocked caller is treated as worried
        ("surprised", 0.5, "goodbye", "happy"),
        ("sad", -0.6, "answer", "sad"),  # empathetic
        ("happy", 0.8, "answer", "happy"),
        ("happy", 0.8, "fallback", "sad"),  # apologetic whatever the mood
        ("neutral", 0.0, "error", "sad"),
        ("neutral", 0.0, "clarify", "neutral"),
    ],
)
def test_reply_table(label: str, valence: float, kind: str, expected: str) -> None:
    assert reply_emotion(emo(label, valence), kind) == expected


def test_unsure_emotion_is_treated_as_neutral() -> None:
    assert reply_emotion(emo("angry", -0.8, confidence=0.2), "greeting") == "happy"
    assert reply_emotion(CallerEmotion.unknown(), "goodbye") == "happy"


def test_unknown_reply_kind() -> None:
    with pytest.raises(EmotionError, match="unknown reply kind 'chitchat'"):
        reply_emotion(emo("neutral", 0.0), "chitchat")


# --- escalation ---------------------------------------------------------------------------


def _state(*turns: CallerEmotion) -> TrackerState:
    tr = EmotionTracker()
    for t in turns:
        tr.update(t)
    return tr.state


def test_sustained_negative_emotion_escalates() -> None:
    policy = EscalationPolicy()
    two = _state(emo("angry", -0.7), emo("angry", -0.8))
    assert not policy.decide(two, 0, False).escalate
    three = _state(emo("angry", -0.7), emo("angry", -0.8), emo("sad", -0.5))
    d = policy.decide(three, 0, False)
    assert d.escalate and d.reason == "negative_emotion" and d.negative_streak == 3
    # Three negative turns, but one was too unsure to count.
    mixed = _state(emo("angry", -0.7), emo("angry", -0.8, confidence=0.3), emo("sad", -0.5))
    assert not policy.decide(mixed, 0, False).escalate


def test_failed_answers_and_explicit_request() -> None:
    policy = EscalationPolicy()
    calm = _state(emo("neutral", 0.0))
    assert policy.decide(calm, 1, False).reason == ""
    assert policy.decide(calm, 2, False).reason == "failed_answers"
    angry = _state(*[emo("angry", -0.9)] * 4)
    # Precedence: explicit request, then failed answers, then emotion.
    assert policy.decide(angry, 2, True).reason == "explicit_request"
    assert policy.decide(angry, 2, False).reason == "failed_answers"


def test_settings_can_switch_rules_off_and_are_validated() -> None:
    off = EscalationPolicy(
        EscalationSettings(negative_turns=0, failed_answers=0, on_explicit_request=False)
    )
    angry = _state(*[emo("angry", -0.9)] * 5)
    assert not off.decide(angry, 9, True).escalate
    with pytest.raises(EmotionError):
        EscalationSettings(negative_valence=-2.0)
    with pytest.raises(EmotionError):
        EscalationSettings(negative_confidence=1.5)
    with pytest.raises(EmotionError):
        EscalationSettings(failed_answers=-1)


def test_every_decision_is_logged_with_call_and_turn() -> None:
    policy = EscalationPolicy()
    with capture_logs() as logs:
        policy.decide(_state(emo("neutral", 0.0)), 0, False, call_id="c1", turn_id=3)
        policy.decide(_state(emo("neutral", 0.0)), 0, True, call_id="c1", turn_id=4)
    assert [(e["event"], e["call_id"], e["turn_id"], e["escalate"]) for e in logs] == [
        ("emotion.escalation", "c1", 3, False),
        ("emotion.escalation", "c1", 4, True),
    ]
    assert logs[1]["reason"] == "explicit_request" and logs[1]["log_level"] == "info"
    assert logs[0]["log_level"] == "info"  # kept at the server's default level too
