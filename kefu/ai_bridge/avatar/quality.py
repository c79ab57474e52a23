"""The avatar's degradation ladder: 720p → 512 → weights only → audio only, and back.

Sans-IO: :class:`QualityLadder` is told, once a window (a second), how the avatar's video did
(:class:`Window`: frames due, frames rendered, render time, how late the event loop woke the
frame pump) and answers with a :class:`Step` when the level changes. The caller applies it:
renders at the new size, stops rendering, or stops the weights too. Audio never waits for any
of this: it is paced on its own track, and this only ever takes work away from it.

| level | overloaded (2 windows in a row) | headroom (``up_after_s`` of windows in a row) |
| --- | --- | --- |
| 720p | → 512 | stays |
| 512 | → weights | → 720p (if configured) |
| weights | → audio (loop lag only) | → 512 |
| audio | stays | → weights |

Overloaded at a video level: fewer than ``min_rendered`` of the due frames rendered, or the
render's p90 above ``over_budget`` (95 %) of the frame period, or the loop woke the pump more
than ``lag_down_ms`` late. At weights: loop lag above ``lag_audio_ms``. Headroom: every frame
rendered, p90 under ``headroom`` of the period and lag under ``lag_ok_ms`` (at weights and
audio, only the lag can be judged). A step up after a step down waits twice as long each
time (up to 8×), so a box at its limit does not flap.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["LADDER", "Quality", "QualityConfig", "QualityLadder", "Step", "Window"]


class Quality(enum.Enum):
    HD = "720p"
    SD = "512"
    WEIGHTS = "weights"
    AUDIO = "audio"

    @property
    def renders(self) -> bool:
        return self in (Quality.HD, Quality.SD)

    @property
    def size(self) -> tuple[int, int]:
        """Width and height of the rendered video (0×0 where nothing is rendered)."""
        return {Quality.HD: (1280, 720), Quality.SD: (512, 512)}.get(self, (0, 0))


LADDER = (Quality.HD, Quality.SD, Quality.WEIGHTS, Quality.AUDIO)
"""Best first."""


@dataclass(frozen=True, slots=True)
class QualityConfig:
    fps: float = 30.0
    top: Quality = Quality.SD
    """The best level allowed (``ai.avatar_size``)."""
    min_rendered: float = 0.8
    over_budget: float = 0.95
    headroom: float = 0.4
    lag_down_ms: float = 60.0
    lag_audio_ms: float = 250.0
    lag_ok_ms: float = 15.0
    up_after_s: float = 10.0
    down_after: int = 2
    """Overloaded windows in a row before a step down (one GC pause is not a trend)."""


@dataclass(frozen=True, slots=True)
class Window:
    """What happened over one window."""

    seconds: float
    due: int
    """Frames the pump asked for while video was wanted."""
    rendered: int
    render_p90_ms: float
    loop_lag_ms: float
    """The worst lateness of the frame pump's wake-ups."""


@dataclass(frozen=True, slots=True)
class Step:
    previous: Quality
    level: Quality
    reason: str
    """``frames_skipped``, ``render_slow``, ``loop_lag`` or ``headroom``."""


class QualityLadder:
    """One avatar's level (see module doc)."""

    def __init__(self, config: QualityConfig | None = None) -> None:
        self.config = config or QualityConfig()
        self.level = self.config.top
        self._bad = 0
        self._good_s = 0.0
        self._backoff = 1.0

    def observe(self, window: Window) -> Step | None:
        reason = self._overload(window)
        if reason is not None:
            self._good_s = 0.0
            self._bad += 1
            if self._bad >= self.config.down_after:
                self._bad = 0
                return self._move(+1, reason)
            return None
        self._bad = 0
        if self._headroom(window):
            self._good_s += window.seconds
            if self._good_s >= self.config.up_after_s * self._backoff:
                self._good_s = 0.0
                return self._move(-1, "headroom")
        else:
            self._good_s = 0.0
        return None

    def _overload(self, w: Window) -> str | None:
        c = self.config
        if self.level.renders:
            if w.due and w.rendered < c.min_rendered * w.due:
                return "frames_skipped"
            if w.rendered and w.render_p90_ms > c.over_budget * 1000.0 / c.fps:
                return "render_slow"
            if w.loop_lag_ms > c.lag_down_ms:
                return "loop_lag"
        elif self.level is Quality.WEIGHTS and w.loop_lag_ms > c.lag_audio_ms:
            return "loop_lag"
        return None

    def _headroom(self, w: Window) -> bool:
        c = self.config
        if w.loop_lag_ms >= c.lag_ok_ms:
            return False
        if self.level.renders and w.due:
            return w.rendered >= w.due - 1 and w.render_p90_ms < c.headroom * 1000.0 / c.fps
        return True

    def _move(self, direction: int, reason: str) -> Step | None:
        index = LADDER.index(self.level) + direction
        if index < LADDER.index(self.config.top) or index >= len(LADDER):
            return None
        previous, self.level = self.level, LADDER[index]
        if direction > 0:
            self._backoff = min(8.0, self._backoff * 2)
        return Step(previous, self.level, reason)
