"""The degradation ladder (kefu/ai_bridge/avatar/quality.py): its table, step by step."""

from __future__ import annotations

import pytest

from kefu.ai_bridge.avatar.quality import Quality, QualityConfig, QualityLadder, Window

FPS = 30.0
OK = Window(1.0, 30, 30, 6.0, 2.0)
"""A second of every frame rendered in 6 ms with the loop on time."""


def _windows(ladder: QualityLadder, window: Window, count: int) -> list[tuple[str, str]]:
    steps = []
    for _ in range(count):
        step = ladder.observe(window)
        if step is not None:
            steps.append((step.level.value, step.reason))
    return steps


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        (Window(1.0, 30, 20, 20.0, 2.0), "frames_skipped"),
        (Window(1.0, 30, 30, 33.0, 2.0), "render_slow"),
        (Window(1.0, 30, 30, 6.0, 90.0), "loop_lag"),
    ],
)
def test_two_overloaded_windows_step_down_once_with_the_reason(window: Window, reason: str) -> None:
    ladder = QualityLadder(QualityConfig(fps=FPS, top=Quality.HD))
    assert ladder.observe(window) is None  # one bad second is not a trend
    step = ladder.observe(window)
    assert step is not None and (step.previous, step.level, step.reason) == (
        Quality.HD,
        Quality.SD,
        reason,
    )
    assert ladder.observe(OK) is None


def test_a_bad_window_between_good_ones_changes_nothing() -> None:
    ladder = QualityLadder(QualityConfig(fps=FPS))
    bad = Window(1.0, 30, 10, 40.0, 2.0)
    for _ in range(5):
        assert ladder.observe(bad) is None
        assert ladder.observe(OK) is None
    assert ladder.level is Quality.SD


def test_down_to_audio_only_under_a_drowning_loop_and_back_up_with_growing_patience() -> None:
    ladder = QualityLadder(QualityConfig(fps=FPS, top=Quality.SD))
    slow = Window(1.0, 30, 30, 40.0, 2.0)
    assert _windows(ladder, slow, 2) == [("weights", "render_slow")]
    # at weights nothing renders: only the loop lag can push it further down
    assert _windows(ladder, Window(1.0, 0, 0, 0.0, 100.0), 4) == []
    assert _windows(ladder, Window(1.0, 0, 0, 0.0, 400.0), 2) == [("audio", "loop_lag")]
    quiet = Window(1.0, 0, 0, 0.0, 3.0)
    # two steps down so far: each step up waits 10 s × 4
    assert _windows(ladder, quiet, 39) == []
    assert _windows(ladder, quiet, 1) == [("weights", "headroom")]
    assert _windows(ladder, quiet, 40) == [("512", "headroom")]
    assert ladder.level is Quality.SD
    assert _windows(ladder, OK, 200) == []  # never above the configured top


def test_headroom_needs_every_frame_fast_and_a_punctual_loop() -> None:
    ladder = QualityLadder(QualityConfig(fps=FPS, top=Quality.HD))
    assert _windows(ladder, Window(1.0, 30, 30, 33.0, 2.0), 2) == [("512", "render_slow")]
    almost = Window(1.0, 30, 30, 14.0, 2.0)  # fine, but not 40 % of the 33 ms period
    assert _windows(ladder, almost, 60) == []
    lagging = Window(1.0, 30, 30, 6.0, 20.0)
    assert _windows(ladder, lagging, 60) == []
    assert _windows(ladder, OK, 20) == [("720p", "headroom")]
    assert Quality.HD.size == (1280, 720) and Quality.SD.size == (512, 512)
    assert not Quality.WEIGHTS.renders and Quality.WEIGHTS.size == (0, 0)


def test_each_step_is_counted_in_the_metrics() -> None:
    from kefu.ai_bridge.events import AvatarQualityChanged
    from kefu.mediaserver.metrics import Metrics

    metrics = Metrics()
    metrics.count_event(AvatarQualityChanged("room:r1", "weights", "512", "frames_skipped", 1.0))
    metrics.count_event(AvatarQualityChanged("room:r2", "weights", "512", "frames_skipped", 2.0))
    metrics.count_event(object())  # any other event: nothing
    text = metrics.render().decode()
    line = 'kefu_avatar_quality_steps_total{level="weights",reason="frames_skipped"} 2.0'
    assert line in text
