"""Idle life of the face: blinks and gaze (saccades plus slow drift), from a seeded RNG.

Both are sans-IO schedules: the caller passes the time, they never read a clock. Random draws
are made lazily in time order (the next blink or saccade is drawn when the previous one is
reached), so the result depends on the seed and on the times asked, not on how often they
are asked. Times must not go backwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kefu.ai_bridge.avatar.arkit import COUNT, EYE_LOOK, Weights

__all__ = ["BlinkConfig", "Blinker", "Gaze", "GazeConfig", "gaze_weights"]


@dataclass(frozen=True, slots=True)
class BlinkConfig:
    """When and how fast the eyes blink (seconds)."""

    min_interval_s: float = 2.0
    """Shortest time from one blink's start to the next."""
    max_interval_s: float = 6.0
    """Longest time from one blink's start to the next."""
    close_s: float = 0.05
    """Lids closing."""
    hold_s: float = 0.04
    """Lids closed: longer than a 30 fps frame, so every blink shows one closed frame."""
    open_s: float = 0.06
    """Lids opening."""

    def __post_init__(self) -> None:
        if not 0 < self.min_interval_s <= self.max_interval_s:
            raise ValueError("blink intervals must satisfy 0 < min <= max")
        if self.duration_s >= self.min_interval_s:
            raise ValueError("a blink must end before the next can start")

    @property
    def duration_s(self) -> float:
        return self.close_s + self.hold_s + self.open_s


class Blinker:
    """Both eyelids: closure in [0, 1] at any time, blinks every 2–6 s (uniform)."""

    def __init__(self, rng: np.random.Generator, start_s: float, config: BlinkConfig) -> None:
        self._rng = rng
        self._config = config
        self._current: float | None = None
        self._next = start_s + self._interval()

    def _interval(self) -> float:
        c = self._config
        return float(self._rng.uniform(c.min_interval_s, c.max_interval_s))

    @property
    def next_blink_s(self) -> float:
        """When the next blink (not yet started) starts."""
        return self._next

    def closure(self, now_s: float) -> float:
        """How closed the lids are at ``now_s`` (0 open, 1 closed)."""
        while now_s >= self._next:
            self._current = self._next
            self._next = self._current + self._interval()
        if self._current is None:
            return 0.0
        c = self._config
        t = now_s - self._current
        if t < 0 or t >= c.duration_s:
            return 0.0
        if t < c.close_s:
            return t / c.close_s
        if t < c.close_s + c.hold_s:
            return 1.0
        return 1.0 - (t - c.close_s - c.hold_s) / c.open_s


@dataclass(frozen=True, slots=True)
class GazeConfig:
    """Saccades (quick jumps between fixations) and drift (slow wander)."""

    min_fixation_s: float = 0.8
    """Shortest time the eyes rest on one point."""
    max_fixation_s: float = 3.0
    """Longest time the eyes rest on one point."""
    saccade_s: float = 0.04
    """Duration of the jump from one point to the next."""
    range_x: float = 0.14
    """Largest sideways fixation offset, in eyeLook weight."""
    range_y: float = 0.08
    """Largest vertical fixation offset, in eyeLook weight."""
    drift: float = 0.035
    """Amplitude of the slow wander, in eyeLook weight."""

    def __post_init__(self) -> None:
        if not 0 < self.saccade_s < self.min_fixation_s <= self.max_fixation_s:
            raise ValueError("gaze timings must satisfy 0 < saccade < min <= max fixation")


_DRIFT_HZ = (0.21, 0.37, 0.26, 0.43)  # x, x, y, y: incommensurate, so it never repeats


class Gaze:
    """Where the eyes look: (x, y) in eyeLook weight, x > 0 to the face's right, y > 0 up."""

    def __init__(self, rng: np.random.Generator, start_s: float, config: GazeConfig) -> None:
        self._rng = rng
        self._config = config
        self._start = start_s
        self._phases = rng.uniform(0.0, 2.0 * math.pi, size=len(_DRIFT_HZ))
        self._previous = (0.0, 0.0)
        self._target = (0.0, 0.0)
        self._jump_at = start_s
        self._next_jump = start_s + self._fixation()

    def _fixation(self) -> float:
        c = self._config
        return float(self._rng.uniform(c.min_fixation_s, c.max_fixation_s))

    def _point(self) -> tuple[float, float]:
        x, y = self._rng.uniform(-1.0, 1.0, size=2)
        return float(x), float(y)

    def direction(self, now_s: float, spread: float = 1.0) -> tuple[float, float]:
        """The gaze at ``now_s``; ``spread`` scales how far fixations stray from the centre
        (looking at the caller while listening: small; thinking while idle: 1)."""
        c = self._config
        while now_s >= self._next_jump:
            self._previous = self._target
            self._target = self._point()
            self._jump_at = self._next_jump
            self._next_jump = self._jump_at + self._fixation()
        progress = min(max((now_s - self._jump_at) / c.saccade_s, 0.0), 1.0)
        fx = self._previous[0] + (self._target[0] - self._previous[0]) * progress
        fy = self._previous[1] + (self._target[1] - self._previous[1]) * progress
        t = now_s - self._start
        wave = [
            math.sin(2.0 * math.pi * hz * t + phase)
            for hz, phase in zip(_DRIFT_HZ, self._phases, strict=True)
        ]
        x = spread * c.range_x * fx + c.drift * 0.5 * (wave[0] + wave[1])
        y = spread * c.range_y * fy + c.drift * 0.5 * (wave[2] + wave[3])
        return x, y


_LOOK_OUT_RIGHT = EYE_LOOK["eyeLookOutRight"]
_LOOK_IN_LEFT = EYE_LOOK["eyeLookInLeft"]
_LOOK_OUT_LEFT = EYE_LOOK["eyeLookOutLeft"]
_LOOK_IN_RIGHT = EYE_LOOK["eyeLookInRight"]
_LOOK_UP = (EYE_LOOK["eyeLookUpLeft"], EYE_LOOK["eyeLookUpRight"])
_LOOK_DOWN = (EYE_LOOK["eyeLookDownLeft"], EYE_LOOK["eyeLookDownRight"])


def gaze_weights(x: float, y: float) -> Weights:
    """A gaze direction as the eight eyeLook weights (both eyes turn together: looking to
    the face's right is the right eye out and the left eye in)."""
    out = np.zeros(COUNT, np.float32)
    side = min(abs(x), 1.0)
    if x > 0:
        out[[_LOOK_OUT_RIGHT, _LOOK_IN_LEFT]] = side
    elif x < 0:
        out[[_LOOK_OUT_LEFT, _LOOK_IN_RIGHT]] = side
    rise = min(abs(y), 1.0)
    if y > 0:
        out[list(_LOOK_UP)] = rise
    elif y < 0:
        out[list(_LOOK_DOWN)] = rise
    return out
