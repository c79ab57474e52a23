"""Prosodic arousal: pitch, loudness and speaking rate of one utterance, in plain numpy.

Pitch is tracked with YIN (de Cheveigné & Kawahara 2002) on 40 ms frames every 10 ms,
60-500 Hz, after resampling to 8 kHz (soxr): the difference function is computed for all
frames at once through one FFT cross-correlation, then the cumulative-mean-normalised
difference, the absolute threshold (0.15), the first dip below it and a parabolic refinement.
A frame is voiced when its aperiodicity (the normalised difference at the chosen lag) is below
0.3 and it carries speech energy.

Arousal combines z-scores, each against the call's own baseline when the tracker has one
(``relative_to="call"``) and against population norms otherwise:

=========================  ==========  ========================  ===============================
feature                    weight      population norm (sd)      per-call sd
=========================  ==========  ========================  ===============================
median F0, semitones       0.30 (0.15  165 Hz (4.5 st)           2.5 st
                           w/o base)
F0 range p90-p10           0.20        6 st (3 st)               3 st
speech level, dBFS         0.35        -26 dBFS (6 dB; P.56)     4 dB
speaking rate              0.20        en 2.7 words/s (0.7),     en 0.5 words/s, zh 0.8 chars/s
                                       zh 4.5 chars/s (1.0)
clipping (samples ≥ 0.98)  +1 per 1 %  absolute                  absolute
=========================  ==========  ========================  ===============================

``arousal = tanh(Σ wᵢ·zᵢ / Σ wᵢ · 1.5 + clipping)`` over the features that could be measured.
The population pitch norm sits between typical male (~120 Hz) and female (~210 Hz) voices,
which is why pitch weighs less until the call has a baseline.

Whispering (speech level under -40 dBFS with under 25 % of speech time voiced) caps arousal
at -0.4 and sets ``whisper``: the fusion then does not read the low arousal as sadness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from kefu.ai_bridge.emotion.values import ProsodyFeatures

__all__ = [
    "PopulationNorms",
    "ProsodyArousal",
    "ProsodyBaseline",
    "arousal",
    "count_units",
    "measure",
    "track_pitch",
]

SAMPLE_RATE = 16000
"""Rate of the audio given to :func:`measure`."""
ANALYSIS_RATE = 8000
"""Pitch is tracked at 8 kHz (telephone band, a quarter of the work; F0 stays ≤ 500 Hz)."""
FRAME = 320
"""40 ms analysis frame at ANALYSIS_RATE."""
HOP = 80
"""10 ms between frames."""
FRAME_S = HOP / ANALYSIS_RATE
FMIN, FMAX = 60.0, 500.0
_TAU_MIN = int(ANALYSIS_RATE / FMAX)
_TAU_MAX = int(ANALYSIS_RATE / FMIN)
_WINDOW = FRAME - _TAU_MAX
"""YIN integration window: the frame minus the longest lag."""
_NFFT = 512
_YIN_THRESHOLD = 0.15
_VOICED_APERIODICITY = 0.3
_CLIP_LEVEL = 0.98 * 32768
_FULL_SCALE_POWER = 32768.0**2
_MIN_SPEECH_S = 0.25
_MIN_VOICED_RUN = 3
"""Voiced runs shorter than 30 ms are dropped (creaks, clicks, noise)."""
_WHISPER_LEVEL_DB = -40.0
_WHISPER_VOICED = 0.25

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")


@dataclass(frozen=True, slots=True)
class PopulationNorms:
    """Means and spreads of the features over callers, used before a call has a baseline."""

    f0_hz: float = 165.0
    """Between typical male (~120 Hz) and female (~210 Hz) speaking pitch."""
    f0_sd_st: float = 4.5
    f0_range_st: float = 6.0
    f0_range_sd_st: float = 4.0
    level_db: float = -26.0
    """ITU-T P.56 nominal active speech level on a digital telephone channel."""
    level_sd_db: float = 6.0
    rate_word: float = 3.5
    """English articulation rate (pauses excluded, as :func:`measure` does), words/s."""
    rate_word_sd: float = 0.8
    rate_char: float = 5.0
    """Mandarin articulation rate, characters (syllables)/s."""
    rate_char_sd: float = 1.2


@dataclass(frozen=True, slots=True)
class ProsodyBaseline:
    """A caller's own typical values, from the first turns of the call (EmotionTracker)."""

    f0_hz: float | None
    f0_range_st: float | None
    level_db: float | None
    rate_word: float | None
    """Words/s over the English turns seen, None if there were none."""
    rate_char: float | None
    """Characters/s over the Mandarin turns seen."""
    turns: int
    """How many turns it was built from."""


@dataclass(frozen=True, slots=True)
class ProsodyArousal:
    """Arousal of one utterance from its prosody."""

    arousal: float
    """Calm/quiet (-1) to excited/loud (+1)."""
    whisper: bool
    """Quiet and mostly unvoiced."""
    relative_to: str
    """``"call"`` (the caller's baseline) or ``"population"``."""
    components: tuple[tuple[str, float], ...]
    """Each feature's z-score (and the clipping bonus), for logs."""


def count_units(text: str, lang: str) -> tuple[int, str]:
    """Rate units in ``text``: (characters, "char") for Mandarin, (words, "word") otherwise.

    In Mandarin text each Latin word counts as one unit too (code-switching: "我想upgrade").
    """
    words = len(_WORD.findall(text))
    if lang.lower().startswith("zh") or lang.lower().startswith("cmn"):
        return len(_CJK.findall(text)) + words, "char"
    return words + len(_CJK.findall(text)), "word"


def _frames(x: NDArray[np.float64]) -> NDArray[np.float64]:
    if len(x) < FRAME:
        x = np.pad(x, (0, FRAME - len(x)))
    out: NDArray[np.float64] = sliding_window_view(x, FRAME)[::HOP]
    return out


def track_pitch(
    pcm16k: NDArray[np.int16] | NDArray[np.floating[Any]],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """F0 in Hz, aperiodicity (0 periodic … 1 noise) and level in dBFS per 10 ms frame.

    ``pcm16k`` is 16 kHz mono in int16 units (float input is taken in the same units).
    """
    x16 = np.asarray(pcm16k, dtype=np.float32)
    x = np.asarray(soxr.resample(x16, SAMPLE_RATE, ANALYSIS_RATE, quality="LQ"), np.float64)
    fr = _frames(x)
    power = np.mean(fr * fr, axis=1)
    level = 10.0 * np.log10(power / _FULL_SCALE_POWER + 1e-12)
    spec_win = np.fft.rfft(fr[:, :_WINDOW], _NFFT)
    spec_all = np.fft.rfft(fr, _NFFT)
    corr = np.fft.irfft(np.conj(spec_win) * spec_all, _NFFT)[:, : _TAU_MAX + 1]
    cs = np.concatenate([np.zeros((len(fr), 1)), np.cumsum(fr * fr, axis=1)], axis=1)
    energy = cs[:, _WINDOW : _WINDOW + _TAU_MAX + 1] - cs[:, : _TAU_MAX + 1]
    diff = np.maximum(energy[:, :1] + energy - 2.0 * corr, 0.0)
    cum = np.cumsum(diff[:, 1:], axis=1)
    lags = np.arange(1, diff.shape[1])
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * lags / np.maximum(cum, 1e-9)
    search = cmnd[:, _TAU_MIN : _TAU_MAX + 1]
    below = search < _YIN_THRESHOLD
    has = below.any(axis=1)
    first = np.argmax(below, axis=1)
    # The dip: from the first lag under the threshold, while it stays under; take its minimum.
    idx = np.arange(search.shape[1])
    after = idx[None, :] >= first[:, None]
    left_dip = np.cumsum(after & ~below, axis=1) > 0
    dip = after & below & ~left_dip
    best = np.where(has, np.argmin(np.where(dip, search, np.inf), axis=1), np.argmin(search, 1))
    tau = best + _TAU_MIN
    rows = np.arange(len(fr))
    ap = cmnd[rows, tau]
    # Parabolic interpolation around the chosen lag.
    left, right = cmnd[rows, tau - 1], cmnd[rows, np.minimum(tau + 1, cmnd.shape[1] - 1)]
    denom = left - 2.0 * ap + right
    shift = np.divide(
        0.5 * (left - right), denom, out=np.zeros_like(denom), where=np.abs(denom) > 1e-12
    )
    f0 = ANALYSIS_RATE / (tau + np.clip(shift, -1.0, 1.0))
    return f0, np.clip(ap, 0.0, 1.0), level


def _semitones(hz: NDArray[np.float64] | float, ref: float = 100.0) -> NDArray[np.float64]:
    out: NDArray[np.float64] = 12.0 * np.log2(np.asarray(hz, dtype=np.float64) / ref)
    return out


def _drop_short_runs(mask: NDArray[np.bool_], min_run: int) -> NDArray[np.bool_]:
    """``mask`` without runs of True shorter than ``min_run`` (isolated voicing blips)."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    out = np.zeros_like(mask)
    for a, b in zip(starts, ends, strict=True):
        if b - a >= min_run:
            out[a:b] = True
    return out


def _smoothed_semitones(f0: NDArray[np.float64], voiced: NDArray[np.bool_]) -> NDArray[np.float64]:
    """F0 of the voiced frames in semitones re 100 Hz, 5-frame median-filtered within voicing
    (removes single-frame octave jumps without smearing across unvoiced gaps)."""
    st = np.where(voiced, _semitones(np.maximum(f0, 1.0)), np.nan)
    padded = np.pad(st, 2, constant_values=np.nan)
    windows = sliding_window_view(padded, 5)
    with np.errstate(all="ignore"):
        smooth = np.nanmedian(windows[voiced], axis=1)
    out: NDArray[np.float64] = smooth
    return out


def _speech_and_voicing(
    ap: NDArray[np.float64], level: NDArray[np.float64]
) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    """Per frame: speech (above a gate set from the utterance's own levels) and voiced speech."""
    peak = float(np.percentile(level, 95)) if len(level) else -120.0
    floor = float(np.percentile(level, 10)) if len(level) else -120.0
    gate = max(-60.0, min(peak - 25.0, floor + 6.0))
    speech = level > gate
    return speech, speech & (ap < _VOICED_APERIODICITY)


def final_pitch_movement(pcm16k: NDArray[np.int16], tail_s: float = 0.25) -> float | None:
    """How far the pitch of the last ``tail_s`` of voiced speech lies from the utterance's
    median, in semitones: negative for the fall that ends a statement, positive for the rise
    of a question or of a speaker who is going on ("the jacket, ..."). None when the audio
    holds too little voicing to say (under ~0.3 s)."""
    f0, ap, level = track_pitch(pcm16k)
    _, voiced = _speech_and_voicing(ap, level)
    voiced = _drop_short_runs(voiced, _MIN_VOICED_RUN)
    tail = max(3, int(round(tail_s / FRAME_S)))
    if voiced.sum() < 2 * tail:
        return None
    st = _smoothed_semitones(f0, voiced)
    return float(np.median(st[-tail:]) - np.median(st))


def measure(pcm16k: NDArray[np.int16], text: str = "", lang: str = "en") -> ProsodyFeatures:
    """The prosodic features of one utterance (16 kHz mono int16), with ``text`` for rate."""
    pcm = np.asarray(pcm16k)
    duration = len(pcm) / SAMPLE_RATE
    f0, ap, level = track_pitch(pcm)
    peak = float(np.percentile(level, 95)) if len(level) else -120.0
    speech, voiced = _speech_and_voicing(ap, level)
    speech_s = float(speech.sum()) * FRAME_S
    voiced_s = float(voiced.sum()) * FRAME_S
    f0_med: float | None = None
    f0_range: float | None = None
    voiced = _drop_short_runs(voiced, _MIN_VOICED_RUN)
    if voiced.sum() >= 5:
        st = _smoothed_semitones(f0, voiced)
        f0_med = float(100.0 * 2.0 ** (np.median(st) / 12.0))
        f0_range = float(np.percentile(st, 90) - np.percentile(st, 10))
    if speech.any():
        lin = np.mean(10.0 ** (level[speech] / 10.0))
        level_db = float(10.0 * np.log10(lin + 1e-12))
    else:
        level_db = float(peak)
    clip = float(np.mean(np.abs(pcm.astype(np.int32)) >= _CLIP_LEVEL)) if len(pcm) else 0.0
    rate: float | None = None
    unit = ""
    if text.strip():
        units, unit = count_units(text, lang)
        if units and speech_s >= _MIN_SPEECH_S:
            rate = units / speech_s
    return ProsodyFeatures(
        duration_s=duration,
        speech_s=speech_s,
        voiced_s=voiced_s,
        f0_median_hz=f0_med,
        f0_range_st=f0_range,
        level_db=level_db,
        clip_ratio=clip,
        rate=rate,
        rate_unit=unit,
    )


def arousal(
    features: ProsodyFeatures,
    baseline: ProsodyBaseline | None = None,
    norms: PopulationNorms | None = None,
) -> ProsodyArousal | None:
    """Arousal from ``features`` (None when there is under 0.25 s of speech to judge)."""
    if features.speech_s < _MIN_SPEECH_S:
        return None
    pop = norms or PopulationNorms()
    base = baseline
    comps: list[tuple[str, float, float]] = []  # (name, z, weight)
    if features.f0_median_hz is not None:
        if base is not None and base.f0_hz is not None:
            z = float(_semitones(features.f0_median_hz, base.f0_hz)) / 2.5
            comps.append(("pitch", z, 0.30))
        else:
            z = float(_semitones(features.f0_median_hz, pop.f0_hz)) / pop.f0_sd_st
            comps.append(("pitch", z, 0.15))
    if features.f0_range_st is not None:
        ref = base.f0_range_st if base is not None and base.f0_range_st is not None else None
        if ref is not None:
            z = (features.f0_range_st - ref) / 4.0
        else:
            z = (features.f0_range_st - pop.f0_range_st) / pop.f0_range_sd_st
        comps.append(("range", z, 0.15))
    if base is not None and base.level_db is not None:
        comps.append(("level", (features.level_db - base.level_db) / 4.0, 0.35))
    else:
        comps.append(("level", (features.level_db - pop.level_db) / pop.level_sd_db, 0.35))
    if features.rate is not None:
        word = features.rate_unit == "word"
        ref_rate = (base.rate_word if word else base.rate_char) if base is not None else None
        if ref_rate is not None:
            z = (features.rate - ref_rate) / (0.5 if word else 0.8)
        elif word:
            z = (features.rate - pop.rate_word) / pop.rate_word_sd
        else:
            z = (features.rate - pop.rate_char) / pop.rate_char_sd
        comps.append(("rate", z, 0.20))
    weights = sum(w for _, _, w in comps)
    zs = [(name, float(np.clip(z, -3.0, 3.0)), w) for name, z, w in comps]
    score = sum(z * w for _, z, w in zs) / weights * 1.5
    clip_bonus = min(features.clip_ratio / 0.01, 1.5)
    value = float(np.tanh(score + clip_bonus))
    whisper = features.level_db < _WHISPER_LEVEL_DB and features.voiced_ratio < _WHISPER_VOICED
    if whisper:
        value = min(value, -0.4)
    parts = tuple((name, round(z, 3)) for name, z, _ in zs) + (("clip", round(clip_bonus, 3)),)
    relative = "call" if base is not None else "population"
    return ProsodyArousal(value, whisper, relative, parts)


def baseline_from(
    features: list[ProsodyFeatures], turns: int | None = None
) -> ProsodyBaseline | None:
    """Medians of the features of the first turns (None if none had enough speech)."""
    usable = [f for f in features if f.speech_s >= _MIN_SPEECH_S]
    if not usable:
        return None

    def med(values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        return float(np.median(vals)) if vals else None

    return ProsodyBaseline(
        f0_hz=med([f.f0_median_hz for f in usable]),
        f0_range_st=med([f.f0_range_st for f in usable]),
        level_db=med([f.level_db for f in usable]),
        rate_word=med([f.rate for f in usable if f.rate_unit == "word"]),
        rate_char=med([f.rate for f in usable if f.rate_unit == "char"]),
        turns=turns if turns is not None else len(usable),
    )
