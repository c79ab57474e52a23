"""Per-call smoothing of the caller's emotion, and the call's prosodic baseline.

One :class:`EmotionTracker` per call, fed every turn's :class:`CallerEmotion`. It keeps:

* exponentially smoothed valence, arousal and label scores (the smoothed label is the top
  smoothed score), each turn weighted by its confidence, so one misread turn does not swing
  the workbench display or the reply tone; turns with confidence 0 are recorded but not
  smoothed in;
* the last turns (valence, confidence), from which the escalation policy counts consecutive
  negative turns with its own thresholds;
* the caller's prosodic baseline: medians of the first ``baseline_turns`` turns that had
  enough speech. Later turns' arousal is measured against it, which removes the speaker's sex
  (pitch), the channel's gain (level) and their habitual tempo (rate).

Not thread-safe: a call's turns are sequential; keep the tracker with the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from kefu.ai_bridge.emotion.prosody import ProsodyBaseline, baseline_from
from kefu.ai_bridge.emotion.values import EMOTIONS, CallerEmotion, EmotionError, ProsodyFeatures

__all__ = ["EmotionTracker", "TrackerState", "TurnRecord"]


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What the tracker remembers of one turn."""

    label: str
    valence: float
    arousal: float
    confidence: float


@dataclass(frozen=True, slots=True)
class TrackerState:
    """A snapshot of one call's emotion after some turns."""

    turns: int = 0
    """Turns seen, including ones with confidence 0."""
    valence: float = 0.0
    """Smoothed valence."""
    arousal: float = 0.0
    """Smoothed arousal."""
    scores: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    """Smoothed label scores, :data:`EMOTIONS` order."""
    recent: tuple[TurnRecord, ...] = ()
    """The last turns, oldest first (at most the tracker's ``history``)."""
    baseline: ProsodyBaseline | None = None
    """The caller's prosodic baseline once the first turns are in."""

    @property
    def label(self) -> str:
        """The smoothed label (top smoothed score)."""
        return EMOTIONS[max(range(len(EMOTIONS)), key=self.scores.__getitem__)]

    @property
    def last(self) -> TurnRecord | None:
        return self.recent[-1] if self.recent else None

    def negative_streak(self, valence_below: float = -0.3, min_confidence: float = 0.4) -> int:
        """Consecutive most recent turns with valence below ``valence_below`` and confidence
        of at least ``min_confidence``."""
        n = 0
        for rec in reversed(self.recent):
            if rec.valence < valence_below and rec.confidence >= min_confidence:
                n += 1
            else:
                break
        return n


class EmotionTracker:
    """Smooths one call's per-turn emotions (see module doc)."""

    def __init__(self, alpha: float = 0.5, baseline_turns: int = 2, history: int = 16) -> None:
        if not 0.0 < alpha <= 1.0:
            raise EmotionError(f"alpha must be in (0, 1], got {alpha}")
        if baseline_turns < 0 or history < 1:
            raise EmotionError("baseline_turns must be >= 0 and history >= 1")
        self.alpha = alpha
        """Smoothing factor for a turn of confidence 1 (half of it at confidence 0)."""
        self.baseline_turns = baseline_turns
        self.history = history
        self._state = TrackerState()
        self._features: list[ProsodyFeatures] = []

    @property
    def state(self) -> TrackerState:
        return self._state

    @property
    def baseline(self) -> ProsodyBaseline | None:
        """Pass to :meth:`EmotionEstimator.estimate` for the next turn."""
        return self._state.baseline

    @property
    def previous_valence(self) -> float | None:
        """The last turn's valence (sarcasm context), None before the first turn."""
        last = self._state.last
        return last.valence if last is not None else None

    def update(self, emotion: CallerEmotion) -> TrackerState:
        """Fold one turn in; returns the new state."""
        s = self._state
        rec = TurnRecord(emotion.label, emotion.valence, emotion.arousal, emotion.confidence)
        recent = (*s.recent, rec)[-self.history :]
        valence, arousal, scores = s.valence, s.arousal, s.scores
        if emotion.confidence > 0:
            first = not any(r.confidence > 0 for r in s.recent)
            a = 1.0 if first else self.alpha * (0.5 + 0.5 * emotion.confidence)
            valence += a * (emotion.valence - valence)
            arousal += a * (emotion.arousal - arousal)
            scores = tuple(o + a * (n - o) for o, n in zip(scores, emotion.scores, strict=True))
        baseline = s.baseline
        if baseline is None and emotion.prosody is not None and self.baseline_turns:
            self._features.append(emotion.prosody)
            candidate = baseline_from(self._features)
            if candidate is not None and candidate.turns >= self.baseline_turns:
                baseline = candidate
                self._features.clear()
        self._state = TrackerState(
            turns=s.turns + 1,
            valence=valence,
            arousal=arousal,
            scores=scores,
            recent=recent,
            baseline=baseline,
        )
        return self._state
