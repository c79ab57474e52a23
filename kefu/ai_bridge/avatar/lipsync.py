"""Phoneme timings to per-frame mouth weights, with coarticulation.

Each phoneme mark becomes one or more :class:`VisemeSpan` (a diphthong or compound final is
split, vowels taking the larger share of its time). The mouth at time ``t`` is a weighted
average of the viseme poses, each weighted by a dominance function (after Cohen & Massaro's
model of coarticulation)::

    D_i(t) = dominance_i · ramp_i(t)        ramp = 1 inside the span, a raised-cosine ramp
                                            over ``lead_s`` before it and ``lag_s`` after it
    W(t)   = Σ D_i(t) · pose_i / max(1, Σ D_i(t))

so a viseme starts to show before its sound begins and fades after it ends; where the
dominances add up to less than 1 the remainder is the rest pose, which is how speech fades in
from and out to a closed mouth. Strong visemes (PP, FF) pull their neighbours towards them,
weak ones (kk, nn, DD) borrow the mouth of the vowels around them. Lip rounding (mouthPucker,
mouthFunnel) is blended separately: rounded visemes start ``rounding_lead_s`` early and
tongue consonants barely resist it, so the lips round during "st" in "stew".

Blending alone would let a short /p/ between two open vowels go unseen, so a last pass makes
every bilabial (PP) close the lips on every frame inside it, or on its nearest frame when it
is shorter than a frame.

Frame ``k`` is the mouth at ``k / fps`` seconds from the utterance start, on the audio's own
timeline. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import COUNT, Weights, index_of, indices, pose_vector
from kefu.ai_bridge.avatar.poses import SHAPES
from kefu.ai_bridge.avatar.visemes import Notation, Viseme, phoneme_visemes
from kefu.ai_bridge.speak.base import PhonemeMark, TtsChunk

__all__ = [
    "LipsyncConfig",
    "SpeechClip",
    "VisemeSpan",
    "blend",
    "close_lips",
    "concat_chunks",
    "envelope_clip",
    "frame_count",
    "frame_times",
    "lipsync",
    "speech_clip",
    "viseme_spans",
]


@dataclass(frozen=True, slots=True)
class LipsyncConfig:
    """Timing of the coarticulation model (seconds)."""

    fps: float = 30.0
    """Frames per second of the output (30, or 60 for smoother clients)."""
    lead_s: float = 0.06
    """How long before its sound a viseme starts to show."""
    lag_s: float = 0.07
    """How long after its sound a viseme takes to fade."""
    rounding_lead_s: float = 0.2
    """How early the lips start rounding for a rounded viseme (anticipation)."""
    silence_full_s: float = 0.25
    """A pause this long (or longer) brings the mouth fully to rest; shorter word gaps pull
    it only part of the way."""
    consonant_share: float = 0.6
    """Time share of a consonant part against 1.0 for a vowel part when a phoneme splits."""

    def __post_init__(self) -> None:
        if not 1.0 <= self.fps <= 240.0:
            raise ValueError(f"fps {self.fps} outside 1..240")
        if min(self.lead_s, self.lag_s, self.rounding_lead_s, self.silence_full_s) <= 0:
            raise ValueError("lipsync timings must be positive")


@dataclass(frozen=True, slots=True)
class VisemeSpan:
    """One viseme and when it sounds, in seconds from the utterance start."""

    viseme: Viseme
    start_s: float
    end_s: float

    @property
    def center_s(self) -> float:
        return 0.5 * (self.start_s + self.end_s)


@dataclass(frozen=True, slots=True, eq=False)
class SpeechClip:
    """Lip-sync frames placed on the bot audio's clock: frame ``k`` plays at
    ``start_s + k / fps``."""

    start_s: float
    fps: float
    frames: Weights = field(repr=False)
    """frames × 52 weights in [0, 1]."""

    @property
    def end_s(self) -> float:
        return self.start_s + len(self.frames) / self.fps

    def frame_index(self, now_s: float) -> int | None:
        """The frame showing at ``now_s`` (the last one that started), None outside the clip."""
        k = math.floor((now_s - self.start_s) * self.fps + 1e-6)
        return k if 0 <= k < len(self.frames) else None


_ROUNDING = np.array(indices(("mouthPucker", "mouthFunnel")))
_OPENING = np.array(
    indices(
        (
            "jawOpen",
            "mouthFunnel",
            "mouthLowerDownLeft",
            "mouthLowerDownRight",
            "mouthUpperUpLeft",
            "mouthUpperUpRight",
            "tongueOut",
        )
    )
)
_PRESS = np.array(
    indices(("mouthPressLeft", "mouthPressRight", "mouthRollLower", "mouthRollUpper"))
)
_JAW_OPEN = index_of("jawOpen")
_MOUTH_CLOSE = index_of("mouthClose")
_POSES: NDArray[np.float32] = np.stack([pose_vector(SHAPES[v].pose) for v in Viseme])
_ROW = {viseme: row for row, viseme in enumerate(Viseme)}
_CLOSURE = _POSES[_ROW[Viseme.PP]]


def viseme_spans(
    marks: Iterable[PhonemeMark],
    notation: Notation = Notation.IPA,
    *,
    consonant_share: float = 0.6,
) -> tuple[VisemeSpan, ...]:
    """The visemes of ``marks`` with their times, in seconds. A mark with no viseme of its
    own (a stress or tone mark sent alone) lengthens the span before it; marks with a
    non-finite time are skipped; nothing raises."""
    spans: list[VisemeSpan] = []
    ordered = sorted(
        (m for m in marks if math.isfinite(m.start_ms) and math.isfinite(m.duration_ms)),
        key=lambda m: m.start_ms,
    )
    for mark in ordered:
        start = mark.start_ms / 1000.0
        end = start + max(mark.duration_ms, 0.0) / 1000.0
        parts = phoneme_visemes(mark.phoneme, notation)
        if not parts:
            if spans:
                last = spans[-1]
                spans[-1] = VisemeSpan(last.viseme, last.start_s, max(last.end_s, end))
            continue
        shares = [1.0 if SHAPES[v].vowel else consonant_share for v in parts]
        total = sum(shares)
        at = start
        for viseme, share in zip(parts, shares, strict=True):
            step = (end - start) * share / total
            spans.append(VisemeSpan(viseme, at, at + step))
            at += step
    return tuple(spans)


def frame_count(duration_s: float, fps: float) -> int:
    """Frames whose time ``k / fps`` falls inside ``duration_s``."""
    if not math.isfinite(duration_s) or duration_s <= 0:
        return 0
    return math.ceil(duration_s * fps - 1e-9)


def frame_times(count: int, fps: float) -> NDArray[np.float64]:
    """The time of each of ``count`` frames, in seconds from the utterance start."""
    return np.arange(count, dtype=np.float64) / fps


def _ramp(distance: NDArray[np.float64], width: NDArray[np.float64]) -> NDArray[np.float64]:
    """1 at distance <= 0, a raised cosine down to 0 at ``width``, 0 beyond."""
    x = np.clip(distance / width, 0.0, 1.0)
    out: NDArray[np.float64] = 0.5 * (1.0 + np.cos(np.pi * x))
    return out


def _dominances(
    spans: Sequence[VisemeSpan], times: NDArray[np.float64], config: LipsyncConfig
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(frames × spans) dominance for the general and for the rounding channels."""
    starts = np.array([s.start_s for s in spans])
    ends = np.array([s.end_s for s in spans])
    shapes = [SHAPES[s.viseme] for s in spans]
    strength = np.array([shape.dominance for shape in shapes])
    rounding = np.array([shape.rounding_dominance for shape in shapes])
    silent = np.array([s.viseme is Viseme.SIL for s in spans])
    pause = np.clip((ends - starts) / config.silence_full_s, 0.2, 1.0)
    strength = np.where(silent, pause, strength)
    rounding = np.where(silent, pause, rounding)
    rounded = np.array([shape.rounded for shape in shapes])
    t = times[:, None]
    lead = np.full(len(spans), config.lead_s)
    rounding_lead = np.where(rounded, config.rounding_lead_s, config.lead_s)
    fade_out = _ramp(t - ends, np.full(len(spans), config.lag_s))
    general = strength * np.minimum(_ramp(starts - t, lead), fade_out)
    lips = rounding * np.minimum(_ramp(starts - t, rounding_lead), fade_out)
    return general, lips


def blend(
    spans: Sequence[VisemeSpan], times: NDArray[np.float64], config: LipsyncConfig
) -> Weights:
    """The coarticulated mouth at each of ``times`` (frames × 52), before lip closure."""
    out = np.zeros((len(times), COUNT), np.float64)
    if not spans or not len(times):
        return out.astype(np.float32)
    general, lips = _dominances(spans, times, config)
    poses = _POSES[[_ROW[s.viseme] for s in spans]].astype(np.float64)
    out[:] = general @ poses / np.maximum(general.sum(axis=1), 1.0)[:, None]
    rounding = lips @ poses[:, _ROUNDING] / np.maximum(lips.sum(axis=1), 1.0)[:, None]
    out[:, _ROUNDING] = rounding
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def close_lips(frames: Weights, spans: Sequence[VisemeSpan], fps: float) -> Weights:
    """Make every bilabial span close the lips on its frames (at least one frame each): the
    lip-opening shapes are capped at the PP pose, the press is at least the PP pose, and
    mouthClose is at least jawOpen (ARKit's sealed lips). Rounding is left as blended: lips
    can protrude while closed ("boo"). Returns a new array."""
    out = frames.copy()
    count = len(out)
    if not count:
        return out
    for span in spans:
        if span.viseme is not Viseme.PP:
            continue
        first = max(math.ceil(span.start_s * fps - 1e-9), 0)
        last = min(math.ceil(span.end_s * fps - 1e-9), count)  # exclusive
        rows = list(range(first, last))
        if not rows:
            rows = [min(max(round(span.center_s * fps), 0), count - 1)]
        for k in rows:
            row = out[k]
            row[_OPENING] = np.minimum(row[_OPENING], _CLOSURE[_OPENING])
            row[_PRESS] = np.maximum(row[_PRESS], _CLOSURE[_PRESS])
            row[_MOUTH_CLOSE] = max(row[_MOUTH_CLOSE], row[_JAW_OPEN])
    return out


def lipsync(
    marks: Iterable[PhonemeMark],
    *,
    fps: float | None = None,
    duration_ms: float | None = None,
    notation: Notation = Notation.IPA,
    config: LipsyncConfig | None = None,
) -> Weights:
    """Frames × 52 float32 weights in [0, 1] for one utterance; frame ``k`` is the mouth at
    ``k / fps`` s (``fps`` overrides ``config.fps``, 30 by default). ``duration_ms`` (the
    audio's length) sets the frame count; without it the frames end with the last mark."""
    config = config or LipsyncConfig()
    if fps is not None:
        config = replace(config, fps=fps)
    fps = config.fps
    spans = viseme_spans(marks, notation, consonant_share=config.consonant_share)
    if duration_ms is None:
        duration_ms = 1000.0 * max((s.end_s for s in spans), default=0.0)
    times = frame_times(frame_count(duration_ms / 1000.0, fps), fps)
    return close_lips(blend(spans, times, config), spans, fps)


def speech_clip(
    marks: Iterable[PhonemeMark],
    start_s: float,
    *,
    fps: float | None = None,
    duration_ms: float | None = None,
    notation: Notation = Notation.IPA,
    config: LipsyncConfig | None = None,
) -> SpeechClip:
    """:func:`lipsync` frames placed at ``start_s`` on the bot audio's clock."""
    rate = fps if fps is not None else (config or LipsyncConfig()).fps
    frames = lipsync(marks, fps=rate, duration_ms=duration_ms, notation=notation, config=config)
    return SpeechClip(start_s, rate, frames)


ENVELOPE_FLOOR_DB = -45.0
"""Frame loudness (dBFS) at and below which the envelope mouth is shut."""
ENVELOPE_FULL_DB = -15.0
"""Frame loudness at which it is as open as it gets."""


def envelope_clip(
    pcm: NDArray[np.int16], sample_rate: int, start_s: float, *, fps: float = 30.0
) -> SpeechClip:
    """A mouth from the audio's loudness alone, for speech that came without phoneme timings
    (an engine that gives none, a recorded prompt): each frame's RMS in dBFS between
    :data:`ENVELOPE_FLOOR_DB` and :data:`ENVELOPE_FULL_DB` opens the jaw up to 0.55 and
    lowers the lower lip with it, with a fast attack and a slower release so syllables read.
    No visemes, so no rounded or closed-lip shapes: a fallback, not lip-sync."""
    count = frame_count(len(pcm) / sample_rate, fps) if len(pcm) else 0
    frames = np.zeros((count, COUNT), np.float32)
    hop = sample_rate / fps
    level, out = 0.0, np.zeros(count, np.float32)
    for k in range(count):
        window = pcm[int(k * hop) : int((k + 1) * hop)].astype(np.float64)
        rms = math.sqrt(float(np.mean(window**2))) if len(window) else 0.0
        db = 20.0 * math.log10(max(rms, 1.0) / 32768.0)
        span = ENVELOPE_FULL_DB - ENVELOPE_FLOOR_DB
        target = min(1.0, max(0.0, (db - ENVELOPE_FLOOR_DB) / span))
        level += (0.7 if target > level else 0.35) * (target - level)
        out[k] = level
    frames[:, index_of("jawOpen")] = 0.55 * out
    frames[:, indices(("mouthLowerDownLeft", "mouthLowerDownRight"))] = 0.25 * out[:, None]
    return SpeechClip(start_s, fps, frames)


def concat_chunks(chunks: Iterable[TtsChunk]) -> tuple[tuple[PhonemeMark, ...], float]:
    """The marks of consecutive chunks on one timeline (each chunk starts where the audio of
    the previous one ends) and the total duration in ms: one reply as one utterance."""
    marks: list[PhonemeMark] = []
    offset = 0.0
    for chunk in chunks:
        marks.extend(
            PhonemeMark(m.phoneme, m.start_ms + offset, m.duration_ms) for m in chunk.phonemes
        )
        offset += chunk.duration_ms
    return tuple(marks), offset
