"""One call's avatar as a video: the face's weights each frame → a rendered, timed frame →
the room's :class:`~kefu.sfu.video.VideoFanout`.

:class:`AvatarVideo` is driven by the weights pump (:class:`~.stream.AvatarStream` calls
:meth:`AvatarVideo.tick` with the same weights it sends on the data channel, so the video and
the weights stream show the same face at the same instant). A frame is rendered only while a
subscriber wants video and the ladder (:mod:`.quality`) is at a video level, and at most one
render of a call is in flight: a frame due while the previous one is still rendering is
skipped (counted; it is what the ladder watches), never queued. Frames carry a 90 kHz ``pts``
on the event loop's clock, the clock the bot's audio is paced on.

On top of the 52 blendshapes the video gives the head a little life of its own (:func:`head_pose`:
slow sway, and a small nod that follows the jaw while speaking): the face is never frozen.
"""

from __future__ import annotations

import asyncio
import fractions
import math
from collections.abc import Callable

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.avatar.arkit import INDEX
from kefu.ai_bridge.avatar.quality import Quality, QualityConfig, QualityLadder, Step, Window
from kefu.ai_bridge.avatar.render_pool import Rendered, RenderPool
from kefu.sfu.video import VideoFanout

__all__ = ["VIDEO_TIME_BASE", "AvatarVideo", "head_pose"]

log = structlog.get_logger(__name__)

VIDEO_TIME_BASE = fractions.Fraction(1, 90000)
"""RTP's video clock (RFC 3551 §5)."""
_JAW = INDEX["jawOpen"]


def head_pose(t: float, jaw_open: float = 0.0) -> tuple[float, float, float]:
    """Yaw, pitch, roll (radians) at ``t`` seconds: incommensurate slow sines (never a
    repeating loop a viewer would notice) plus a nod that follows the jaw."""
    yaw = 0.045 * math.sin(2 * math.pi * 0.071 * t) + 0.02 * math.sin(2 * math.pi * 0.23 * t + 1.3)
    pitch = 0.025 * math.sin(2 * math.pi * 0.13 * t + 0.4) - 0.035 * jaw_open
    roll = 0.018 * math.sin(2 * math.pi * 0.057 * t + 2.1)
    return yaw, pitch, roll


class AvatarVideo:
    """The video of one call's avatar (see module doc)."""

    def __init__(
        self,
        pool: RenderPool,
        *,
        owner_id: str,
        fps: float = 30.0,
        top: Quality = Quality.SD,
        on_step: Callable[[Step], None] | None = None,
    ) -> None:
        self.pool = pool
        self.fanout = VideoFanout(owner_id)
        self.ladder = QualityLadder(QualityConfig(fps=fps, top=top))
        self.on_step = on_step
        self.frames_rendered = 0
        self.frames_skipped = 0
        self.render_errors = 0
        self._origin: float | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._jaw = 0.0
        self._window_start: float | None = None
        self._due = 0
        self._rendered = 0
        self._render_ms: list[float] = []
        self._lag_ms = 0.0
        self._watched = False
        self._closed = False

    @property
    def level(self) -> Quality:
        return self.ladder.level

    @property
    def sends_weights(self) -> bool:
        """False once the ladder reached audio only."""
        return self.ladder.level is not Quality.AUDIO

    def tick(self, now: float, weights: NDArray[np.float32], lag_s: float = 0.0) -> None:
        """The pump's frame at loop time ``now`` (``lag_s``: how late the pump woke)."""
        if self._closed:
            return
        if self._origin is None:
            self._origin = now
        if self._window_start is None:
            self._window_start = now
        self._lag_ms = max(self._lag_ms, lag_s * 1000.0)
        self._jaw += 0.3 * (float(weights[_JAW]) - self._jaw)
        if self.ladder.level.renders and self.fanout.wanted:
            self._due += 1
            if self._inflight is not None and not self._inflight.done():
                self.frames_skipped += 1
            else:
                pts = round((now - self._origin) * 90000)
                head = head_pose(now - self._origin, self._jaw)
                self._inflight = asyncio.get_running_loop().create_task(
                    self._render(weights.copy(), head, self.ladder.level.size, pts),
                    name="avatar-render",
                )
        if now - self._window_start >= 1.0:
            self._close_window(now)

    async def _render(
        self,
        weights: NDArray[np.float32],
        head: tuple[float, float, float],
        size: tuple[int, int],
        pts: int,
    ) -> None:
        try:
            rendered: Rendered = await self.pool.render(weights, head, size)
        except Exception:  # a failed frame must never reach the call's audio
            self.render_errors += 1
            if self.render_errors in (1, 100):
                log.warning("avatar_render_failed", exc_info=True)
            return
        if self._closed:
            return
        frame = rendered.frame
        frame.pts = pts
        frame.time_base = VIDEO_TIME_BASE
        self.fanout.publish(frame)
        self.frames_rendered += 1
        self._rendered += 1
        self._render_ms.append(rendered.render_ms)

    def _close_window(self, now: float) -> None:
        assert self._window_start is not None
        times = sorted(self._render_ms)
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))] if times else 0.0
        window = Window(now - self._window_start, self._due, self._rendered, p90, self._lag_ms)
        self._window_start, self._due, self._rendered = now, 0, 0
        self._render_ms, self._lag_ms = [], 0.0
        if not self.fanout.wanted and self.ladder.level.renders:
            self._watched = False
            return  # nobody watches: nothing to judge
        if not self._watched:
            self._watched = True
            return  # the first second of watching warms up (encoder start, first key frame)
        step = self.ladder.observe(window)
        if step is not None:
            log.info(
                "avatar_quality",
                quality=step.level.value,
                previous=step.previous.value,
                reason=step.reason,
            )
            if self.on_step is not None:
                self.on_step(step)

    async def close(self) -> None:
        self._closed = True
        self.fanout.close()
        task, self._inflight = self._inflight, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
