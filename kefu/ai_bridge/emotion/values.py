"""Value objects and errors of the caller-emotion package.

The six labels are the ones the TTS renders (:data:`kefu.ai_bridge.speak.base.EMOTIONS`), so
a caller's emotion and a reply's emotion share one vocabulary. Valence and arousal follow the
circumplex model of affect (Russell 1980): valence is unpleasant (-1) to pleasant (+1),
arousal is calm/quiet (-1) to excited/loud (+1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kefu.errors import LocalError

__all__ = [
    "CLASS_AROUSAL",
    "CLASS_VALENCE",
    "EMOTIONS",
    "CallerEmotion",
    "EmotionError",
    "ProsodyFeatures",
    "SpeechEmotionError",
    "TextSentiment",
]

EMOTIONS: tuple[str, ...] = ("neutral", "happy", "sad", "angry", "fearful", "surprised")
"""The six labels, in the order every ``scores`` tuple uses (same as the TTS's EMOTIONS)."""

CLASS_VALENCE: dict[str, float] = {
    "neutral": 0.0,
    "happy": 0.8,
    "sad": -0.6,
    "angry": -0.85,
    "fearful": -0.6,
    "surprised": 0.1,
}
"""Where each label sits on the valence axis (circumplex placement, Russell 1980)."""

CLASS_AROUSAL: dict[str, float] = {
    "neutral": 0.0,
    "happy": 0.35,
    "sad": -0.5,
    "angry": 0.7,
    "fearful": 0.5,
    "surprised": 0.6,
}
"""Where each label sits on the arousal axis; used for the text's own arousal guess."""


class EmotionError(LocalError, ValueError):
    """The emotion package was misused (unknown label or reply kind, bad settings)."""


class SpeechEmotionError(EmotionError):
    """A speech-emotion model directory is missing, incomplete or broken."""


@dataclass(frozen=True, slots=True)
class TextSentiment:
    """What the words alone say about the caller's emotion."""

    scores: tuple[float, ...]
    """Probability per label, in :data:`EMOTIONS` order; sums to 1."""
    valence: float
    """Pleasantness in [-1, 1], from the scores and the lexical cues."""
    cues: tuple[str, ...] = ()
    """Lexical cues that fired: ``negation``, ``intensifier``, ``profanity``, ``sarcasm``."""

    @property
    def label(self) -> str:
        """The most probable label."""
        return EMOTIONS[max(range(len(EMOTIONS)), key=self.scores.__getitem__)]

    @property
    def confidence(self) -> float:
        """Probability of the top label."""
        return max(self.scores)


@dataclass(frozen=True, slots=True)
class ProsodyFeatures:
    """Acoustic measurements of one utterance (16 kHz mono), the inputs of prosodic arousal."""

    duration_s: float
    """Length of the audio given."""
    speech_s: float
    """Time with speech energy (voiced or not) above the utterance's noise floor."""
    voiced_s: float
    """Time the pitch tracker found periodic (voiced) speech."""
    f0_median_hz: float | None
    """Median fundamental frequency over voiced frames; None with too little voicing."""
    f0_range_st: float | None
    """Pitch range: 90th minus 10th percentile of F0, in semitones."""
    level_db: float
    """RMS level of the speech frames in dB re full scale (int16)."""
    clip_ratio: float
    """Fraction of samples at or near full scale (shouting into the microphone)."""
    rate: float | None
    """Speaking rate: words/s for English, characters/s for Chinese; None without text."""
    rate_unit: str = ""
    """``"word"`` or ``"char"``: what :attr:`rate` counts."""

    @property
    def voiced_ratio(self) -> float:
        """Voiced time over speech time (low for whispering, which has no voicing)."""
        return self.voiced_s / self.speech_s if self.speech_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CallerEmotion:
    """The caller's emotion in one turn: words, voice and (optionally) a speech model fused."""

    label: str
    """One of :data:`EMOTIONS`."""
    valence: float
    """Unpleasant (-1) to pleasant (+1)."""
    arousal: float
    """Calm/quiet (-1) to excited/loud (+1)."""
    confidence: float
    """How much to trust :attr:`label`, in [0, 1]; 0 when nothing could be estimated."""
    text_label: str = "neutral"
    """The label the words alone gave."""
    prosody_arousal: float | None = None
    """Arousal from pitch, energy and rate alone; None without audio."""
    scores: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    """Fused probability per label, in :data:`EMOTIONS` order."""
    text_valence: float = 0.0
    """Valence from the words alone."""
    whisper: bool = False
    """The caller spoke quietly with little voicing (whispering): low arousal, not sadness."""
    cues: tuple[str, ...] = ()
    """Lexical cues that fired (see :class:`TextSentiment`)."""
    speech_label: str | None = None
    """The acoustic model's label when a :class:`SpeechEmotion` model is configured."""
    prosody: ProsodyFeatures | None = field(default=None, repr=False)
    """The acoustic measurements (the tracker builds the call's baseline from them)."""
    error: str | None = None
    """Why nothing could be estimated (estimator not loaded), else None."""

    @classmethod
    def unknown(cls, error: str | None = None) -> CallerEmotion:
        """Neutral with confidence 0: what an estimator that could not load returns."""
        return cls("neutral", 0.0, 0.0, 0.0, error=error)

    def score(self, label: str) -> float:
        """The fused probability of ``label``."""
        return self.scores[EMOTIONS.index(label)]
