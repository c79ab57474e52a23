"""The avatar's video (kefu/ai_bridge/avatar/video.py) with a stand-in renderer: frames only
while somebody wants them, one render in flight, skips counted, pts on the loop's clock, the
ladder's steps published and applied, the weights stopped only at audio-only."""

from __future__ import annotations

import asyncio
from typing import Any

import av
import numpy as np

from kefu.ai_bridge.avatar.arkit import INDEX
from kefu.ai_bridge.avatar.quality import Quality, Step
from kefu.ai_bridge.avatar.render_pool import Rendered
from kefu.ai_bridge.avatar.stream import AvatarStream
from kefu.ai_bridge.avatar.video import AvatarVideo, head_pose

PERIOD = 1 / 30


class FakePool:
    """Renders a grey frame of the asked size after ``delay`` seconds, reporting ``ms``."""

    ready = True

    def __init__(self, delay: float = 0.0, ms: float = 5.0) -> None:
        self.delay, self.ms = delay, ms
        self.calls: list[tuple[tuple[int, int], float]] = []

    async def render(self, weights: Any, head: Any, size: tuple[int, int]) -> Rendered:
        self.calls.append((size, float(weights[INDEX["jawOpen"]])))
        await asyncio.sleep(self.delay)
        frame = av.VideoFrame(size[0], size[1], "yuv420p")
        return Rendered(frame, self.ms)


async def _run(video: AvatarVideo, seconds: float, jaw: float = 0.3) -> None:
    """Tick at 30 fps on a virtual clock, letting the loop run the renders in real time."""
    weights = np.zeros(52, np.float32)
    weights[INDEX["jawOpen"]] = jaw
    t = 1000.0
    for _ in range(round(seconds * 30)):
        video.tick(t, weights)
        t += PERIOD
        await asyncio.sleep(PERIOD)


async def test_renders_only_while_wanted_and_stamps_frames_on_the_loop_clock() -> None:
    pool = FakePool()
    video = AvatarVideo(pool, owner_id="bot")  # type: ignore[arg-type]
    await _run(video, 0.5)
    assert pool.calls == []  # nobody asked for video: nothing rendered

    track = video.fanout.subscribe()
    frames: list[Any] = []

    async def read() -> None:
        while True:
            frames.append(await track.recv())

    reader = asyncio.get_running_loop().create_task(read())
    await _run(video, 1.0, jaw=0.6)
    assert len(pool.calls) >= 27 and {size for size, _ in pool.calls} == {(512, 512)}
    assert all(abs(jaw - 0.6) < 1e-6 for _, jaw in pool.calls)
    await asyncio.sleep(0.05)
    assert len(frames) >= 27
    pts = [f.pts for f in frames]
    assert pts == sorted(pts) and all(f.time_base.denominator == 90000 for f in frames)
    # the virtual clock restarted at the same origin: pts are 3000 ticks (1/30 s) apart
    assert {b - a for a, b in zip(pts, pts[1:], strict=False)} == {3000}
    assert video.frames_skipped == 0 and video.level is Quality.SD
    await video.close()
    await asyncio.wait_for(asyncio.gather(reader, return_exceptions=True), 1.0)
    assert track.readyState == "ended"  # the publisher closed: the subscriber's track ends


async def test_a_slow_renderer_skips_frames_then_steps_down_to_weights() -> None:
    steps: list[Step] = []
    pool = FakePool(delay=0.09, ms=80.0)  # three periods per frame
    video = AvatarVideo(pool, owner_id="bot", top=Quality.HD, on_step=steps.append)  # type: ignore[arg-type]
    video.fanout.subscribe()
    await _run(video, 5.4)  # a warm-up second, then two windows per step
    assert video.frames_skipped > video.frames_rendered > 0
    assert [(s.level, s.reason) for s in steps][:2] == [
        (Quality.SD, "frames_skipped"),
        (Quality.WEIGHTS, "frames_skipped"),
    ]
    assert {size for size, _ in pool.calls} <= {(1280, 720), (512, 512)}
    rendered = len(pool.calls)
    await _run(video, 0.5)
    assert len(pool.calls) == rendered  # at weights nothing is rendered
    assert video.sends_weights
    await video.close()


async def test_the_stream_feeds_the_video_the_frames_it_sends_and_stops_at_audio_only() -> None:
    class Track:
        queued_s = 0.0

        def media_s(self, now: float) -> float:
            return now

    sent: list[bytes] = []
    pool = FakePool()
    stream = AvatarStream(Track(), sent.append)
    stream.video = AvatarVideo(pool, owner_id="bot")  # type: ignore[arg-type]
    stream.video.fanout.subscribe()
    stream.start()
    await asyncio.sleep(0.5)
    assert len(sent) >= 12 and len(pool.calls) >= 12
    stream.video.ladder.level = Quality.AUDIO
    before = len(sent)
    await asyncio.sleep(0.3)
    assert len(sent) == before
    await stream.close()


def test_the_head_moves_a_little_and_nods_with_the_jaw() -> None:
    poses = np.array([head_pose(t / 30) for t in range(30 * 20)])
    assert np.all(np.abs(poses) < 0.1)  # radians: a small sway, never a turn away
    assert np.ptp(poses[:, 0]) > 0.03 and np.ptp(poses[:, 2]) > 0.01
    assert head_pose(3.0, jaw_open=0.8)[1] < head_pose(3.0, jaw_open=0.0)[1]
