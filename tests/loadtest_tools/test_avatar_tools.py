"""The avatar's measuring tools on synthetic pictures and rows (no server, no sockets)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadtest.avatar_calls import summarize
from loadtest.avatar_plots import plot_timeline
from loadtest.avatar_sync import lipsync_offset, video_mouth
from loadtest.video_record import Y4mRecorder, read_y4m


def _frames(opening: np.ndarray) -> np.ndarray:
    """128x128 luma frames: a mouth (dark box) opening by ``opening`` in the lower middle, and
    a bright 'hair' edge near the side that sways on its own (it must not be taken for it)."""
    frames = np.full((len(opening), 128, 128), 180, np.uint8)
    for k, o in enumerate(opening):
        h = int(round(o * 12))
        frames[k, 90 : 90 + h, 56:72] = 30
        x = 8 + int(4 * np.sin(k / 3.0))
        frames[k, 64:128, x : x + 3] = 250
    return frames


def test_the_video_mouth_follows_the_opening_not_the_swaying_edge() -> None:
    t = np.arange(300) / 30.0
    opening = np.clip(np.sin(2 * np.pi * 1.3 * t), 0, None) * (t > 2)
    signal = video_mouth(_frames(opening))
    assert np.corrcoef(signal, opening)[0, 1] > 0.9


def test_a_mouth_late_by_100_ms_is_measured_late() -> None:
    rate, t0 = 16000, 1000.0
    t = np.arange(int(rate * 8)) / rate
    voiced = (np.sin(2 * np.pi * 0.9 * t) > 0.2) & (t > 1)
    audio = (voiced * 6000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)
    times = t0 + np.arange(8 * 30) / 30.0
    mouth = np.interp(times - 0.1 - t0, t, voiced.astype(float))  # shows what was said 0.1 s ago
    got = lipsync_offset(audio, rate, t0, times, mouth)
    assert abs(got["offset_ms"] - 100) <= 20 and got["r_at_offset"] > 0.8


def test_the_y4m_recording_round_trips_and_scales_a_resized_frame(tmp_path: Path) -> None:
    import av

    recorder = Y4mRecorder(tmp_path / "v.y4m")
    for k, size in enumerate([(64, 48), (64, 48), (128, 96)]):
        rgb = np.full((size[1], size[0], 3), 40 * (k + 1), np.uint8)
        recorder.add(av.VideoFrame.from_ndarray(rgb, format="rgb24"), 100.0 + k)
    recorder.close()
    recorder.add(av.VideoFrame(64, 48, "yuv420p"), 200.0)  # after close: ignored
    lumas, times = read_y4m(tmp_path / "v.y4m")
    assert lumas.shape == (3, 48, 64) and times == [100.0, 101.0, 102.0]
    assert lumas[0].mean() < lumas[1].mean() < lumas[2].mean()


def test_summary_counts_calls_at_frame_rate_and_offsets(tmp_path: Path) -> None:
    rows = [
        {"ok": True, "video_fps": 29.8, "video_offset_ms": -40, "weights_offset_ms": -90},
        {"ok": True, "video_fps": 22.0, "video_offset_ms": 20, "weights_offset_ms": -110},
        {"ok": False, "error": "refused"},
    ]
    got = summarize(rows, "video")  # type: ignore[arg-type]
    assert (got["calls"], got["ok"], got["calls_at_25fps"], got["fps_min"]) == (3, 2, 1, 0.0)
    assert got["video_offset_ms_p50"] == -10.0 and got["video_offset_ms_abs_p95"] == 39.0
    audio = (np.sin(np.arange(16000 * 3) / 10.0) * 3000).astype(np.int16)
    times = 10.0 + np.arange(90) / 30.0
    out = plot_timeline(tmp_path / "t.png", audio, 16000, 10.0, [("jaw", times, times % 1)])
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
