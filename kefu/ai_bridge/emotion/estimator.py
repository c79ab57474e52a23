"""One turn's caller emotion: words, prosody and (optionally) a speech model, fused.

Fusion, per turn:

1. **Label scores** start from the text classifier's probabilities. With a
   :class:`~kefu.ai_bridge.emotion.speech.SpeechEmotion` model they are mixed geometrically
   with its probabilities (``speech_weight``).
2. **Arousal tilt**: prosodic arousal shifts each label's logit by
   ``tilt · arousal · CLASS_AROUSAL[label]``, so a loud, fast, high complaint leans to angry
   rather than sad, and a flat, slow one the other way. Whispering does not tilt the labels
   (the caller is quiet because of where they are, not how they feel): its low arousal shows
   in ``arousal`` only.
3. **Valence** is the words' valence (prosody says little about pleasantness), mixed with the
   speech model's when there is one.
4. **Arousal** is ``0.7 · prosodic + 0.3 · the words' arousal`` when there is audio, else the
   words' arousal (each label's place on the arousal axis, weighted by its probability).
5. **Confidence** is the top fused probability, lowered for one- or two-word turns (too
   little text to judge) and for audio-only turns (empty transcript).

The estimator is blocking (run it in an executor); its cost per turn is one sentence
embedding plus one pitch track, ~15-35 ms on one core (see tests/ai_bridge/emotion).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.emotion import prosody
from kefu.ai_bridge.emotion.prosody import PopulationNorms, ProsodyBaseline, count_units
from kefu.ai_bridge.emotion.speech import SpeechEmotion
from kefu.ai_bridge.emotion.text import TextSentimentModel
from kefu.ai_bridge.emotion.values import (
    CLASS_AROUSAL,
    CLASS_VALENCE,
    EMOTIONS,
    CallerEmotion,
    EmotionError,
    ProsodyFeatures,
)

__all__ = ["EmotionEstimator", "FusionSettings"]

log = structlog.get_logger(__name__)

_AROUSAL = np.array([CLASS_AROUSAL[e] for e in EMOTIONS])
_VALENCE = np.array([CLASS_VALENCE[e] for e in EMOTIONS])


@dataclass(frozen=True, slots=True)
class FusionSettings:
    """How the words, the prosody and a speech model are weighed against each other."""

    tilt: float = 1.0
    """Logit shift per unit of prosodic arousal times the label's arousal placement."""
    prosody_share: float = 0.7
    """Share of the fused arousal that comes from prosody when there is audio."""
    speech_weight: float = 0.5
    """Weight of a speech-emotion model's log-probabilities against the text's."""
    short_text_units: int = 2
    """Turns with at most this many words/characters get :attr:`short_text_factor`."""
    short_text_factor: float = 0.6
    audio_only_confidence: float = 0.2
    """Confidence cap when the transcript is empty and only the voice was judged."""


class EmotionEstimator:
    """Caller emotion per turn. :meth:`load` once (blocking, ~2 s), then :meth:`estimate`.

    If loading fails, :attr:`error` says why and :meth:`estimate` returns neutral with
    confidence 0 (:meth:`CallerEmotion.unknown`), so a call never fails on emotion.
    A speech model that fails to load is dropped (``speech_error``) and the estimator runs on
    words and prosody.
    """

    def __init__(
        self,
        text_model: TextSentimentModel | None = None,
        speech: SpeechEmotion | None = None,
        *,
        norms: PopulationNorms | None = None,
        settings: FusionSettings | None = None,
    ) -> None:
        self.text_model = text_model if text_model is not None else TextSentimentModel()
        self.speech = speech
        self.norms = norms or PopulationNorms()
        self.settings = settings or FusionSettings()
        self.ready = False
        self.error: str | None = "not loaded"
        self.speech_error: str | None = None

    def load(self) -> bool:
        """Load the text model (and the speech model, if any); True when ready."""
        try:
            self.text_model.load()
        except Exception as exc:  # a missing model or package must not take a call down
            self.ready, self.error = False, f"{type(exc).__name__}: {exc}"
            log.warning("emotion.load_failed", error=self.error)
            return False
        if self.speech is not None:
            try:
                self.speech.load()
            except Exception as exc:
                self.speech_error = f"{type(exc).__name__}: {exc}"
                log.warning("emotion.speech_model_failed", error=self.speech_error)
                self.speech = None
        self.ready, self.error = True, None
        log.info("emotion.loaded", speech_model=self.speech is not None)
        return True

    def estimate(
        self,
        text: str,
        lang: str,
        pcm16k: NDArray[np.int16] | None = None,
        *,
        baseline: ProsodyBaseline | None = None,
        previous_valence: float | None = None,
        embedding: NDArray[Any] | None = None,
    ) -> CallerEmotion:
        """The caller's emotion in one turn (blocking).

        ``text`` is the ASR transcript, ``lang`` its language (``"en"``, ``"zh"``), ``pcm16k``
        the turn's audio (16 kHz mono int16) or None. ``baseline`` is the call's prosody
        baseline (:attr:`EmotionTracker.baseline`) and ``previous_valence`` the last turn's
        valence (sarcasm after a complaint); both optional. ``embedding`` is the text's e5
        query vector if the dialog already computed it (saves the ~15 ms embedding).

        Misuse (a wrong-sized embedding) raises :class:`EmotionError`; any other failure
        (a model erring mid-call) is logged and answered with :meth:`CallerEmotion.unknown`.
        """
        if not self.ready:
            return CallerEmotion.unknown(self.error)
        try:
            return self._estimate(text, lang, pcm16k, baseline, previous_valence, embedding)
        except EmotionError:
            raise
        except Exception as exc:  # an emotion failure must never take the turn down
            error = f"{type(exc).__name__}: {exc}"
            log.warning("emotion.estimate_failed", error=error)
            return CallerEmotion.unknown(error)

    def _estimate(
        self,
        text: str,
        lang: str,
        pcm16k: NDArray[np.int16] | None,
        baseline: ProsodyBaseline | None,
        previous_valence: float | None,
        embedding: NDArray[Any] | None,
    ) -> CallerEmotion:
        cfg = self.settings
        sentiment = self.text_model.analyze(
            text, previous_valence=previous_valence, embedding=embedding
        )
        p_text = np.asarray(sentiment.scores)
        z = np.log(np.maximum(p_text, 1e-6))
        valence = sentiment.valence

        features: ProsodyFeatures | None = None
        pros: prosody.ProsodyArousal | None = None
        speech_label: str | None = None
        if pcm16k is not None and len(pcm16k):
            features = prosody.measure(pcm16k, text, lang)
            pros = prosody.arousal(features, baseline, self.norms)
            if self.speech is not None:
                p_speech = np.asarray(self.speech.classify(pcm16k))
                speech_label = EMOTIONS[int(np.argmax(p_speech))]
                w = cfg.speech_weight
                z = (1.0 - w) * z + w * np.log(np.maximum(p_speech, 1e-6))
                valence = (1.0 - w / 2) * valence + (w / 2) * float(p_speech @ _VALENCE)
        if pros is not None and not pros.whisper:
            z = z + cfg.tilt * pros.arousal * _AROUSAL
        p = np.exp(z - z.max())
        p /= p.sum()

        text_arousal = float(p_text @ _AROUSAL)
        if pros is not None:
            arousal = cfg.prosody_share * pros.arousal + (1 - cfg.prosody_share) * text_arousal
        else:
            arousal = text_arousal
        confidence = float(p.max())
        if not text.strip():
            confidence = min(confidence, cfg.audio_only_confidence if pros is not None else 0.0)
        elif count_units(text, lang)[0] <= cfg.short_text_units:
            confidence *= cfg.short_text_factor
        return CallerEmotion(
            label=EMOTIONS[int(np.argmax(p))],
            valence=_unit(valence),
            arousal=_unit(arousal),
            confidence=min(max(confidence, 0.0), 1.0),
            text_label=sentiment.label,
            prosody_arousal=pros.arousal if pros is not None else None,
            scores=tuple(float(v) for v in p),
            text_valence=sentiment.valence,
            whisper=pros.whisper if pros is not None else False,
            cues=sentiment.cues,
            speech_label=speech_label,
            prosody=features,
        )


def _unit(x: float) -> float:
    return 0.0 if math.isnan(x) else max(-1.0, min(1.0, float(x)))
