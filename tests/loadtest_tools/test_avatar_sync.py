"""``python -m loadtest avatar-sync``: the lip-sync offset is found where it was put."""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

from loadtest.__main__ import main
from loadtest.avatar_sync import lipsync_offset

RATE = 16000


def speech_like(seconds: float, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Syllable-long bursts of a 200 Hz tone (150 ms slots, on or off at random) and their
    on/off envelope per sample."""
    rng = np.random.default_rng(seed)
    on = np.repeat(rng.random(int(seconds / 0.15)) > 0.5, int(0.15 * RATE))
    t = np.arange(len(on)) / RATE
    return (on * 6000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16), on


@pytest.mark.parametrize("lag_ms", [-80, 0, 50])
def test_the_offset_put_into_the_mouth_is_found(lag_ms: int) -> None:
    audio, on = speech_like(6.0)
    t0 = 1_700_000_000.0
    frame_times = t0 + np.arange(0, 6.0, 1 / 30)
    # The mouth opens where the voice was lag_ms earlier (positive: the mouth comes later).
    idx = np.clip(((frame_times - t0 - lag_ms / 1000) * RATE).astype(int), 0, len(on) - 1)
    jaw = on[idx].astype(np.float64) * 0.6
    result = lipsync_offset(audio, RATE, t0, frame_times, jaw)
    assert abs(result["offset_ms"] - lag_ms) <= 20, result
    assert result["r_at_offset"] > 0.6 and result["fps"] == pytest.approx(30.0, abs=0.1)


def test_the_command_reads_what_loadtest_webrtc_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audio, on = speech_like(4.0, seed=5)
    t0 = 1_700_000_000.0
    with wave.open(str(tmp_path / "heard.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(audio.tobytes())
    (tmp_path / "heard.wav.times").write_text(f"{t0:.6f}\n")
    lines = []
    for k in range(120):
        t = t0 + k / 30
        lines.append(
            json.dumps({"t": t, "jawOpen": 0.5 * float(on[min(len(on) - 1, int(k / 30 * RATE))])})
        )
    (tmp_path / "w.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["avatar-sync", str(tmp_path / "heard.wav"), str(tmp_path / "w.jsonl")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert abs(result["offset_ms"]) <= 20 and result["frames"] == 120


def test_too_little_overlap_is_a_clear_error() -> None:
    audio, _ = speech_like(0.5)
    with pytest.raises(ValueError, match="overlap by less than a second"):
        lipsync_offset(audio, RATE, 0.0, np.arange(0, 0.5, 1 / 30), np.zeros(15))
