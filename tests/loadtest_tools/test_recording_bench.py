"""loadtest.recording_bench: the per-call-minute arithmetic, WAV lengths and pairing."""

from __future__ import annotations

import wave
from pathlib import Path

from loadtest.recording_bench import match_lengths, per_call_minute, wav_files


def test_per_call_minute() -> None:
    off = {"relay_cpu_pct": 10.0, "close_cpu_s": 0.1}
    on = {"relay_cpu_pct": 20.0, "close_cpu_s": 0.6}
    # 50 calls of 30 s: 25 call-minutes; 10 % of a core over 50 calls = 0.002 core-s/s each.
    costs = per_call_minute(off, on, 50, 48_000_000, 50 * 30.0)
    assert costs["extra_core_s_per_call_minute"] == 0.12
    assert costs["close_extra_core_ms_per_call"] == 10.0
    assert costs["total_core_s_per_call_minute"] == 0.14  # + 0.5 core-s over 25 minutes
    assert costs["bytes_per_call_minute"] == 1_920_000


def test_match_lengths_pairs_by_length() -> None:
    ok = match_lengths([20.5, 21.0, 20.0], [20.02, 21.01, 20.49], tolerance=0.05)
    assert ok["ok"] and ok["worst_abs_diff_s"] == 0.02
    assert not match_lengths([20.0, 21.0], [20.0], tolerance=1.0)["ok"]  # a call lost its file
    assert not match_lengths([20.0], [18.0], tolerance=0.5)["ok"]


def test_wav_files(tmp_path: Path) -> None:
    day = tmp_path / "2026-12-05"
    day.mkdir()
    with wave.open(str(day / "abc.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(4 * 8000 * 2))
    (day / "def.wav.part").write_bytes(b"unfinished")
    [info] = wav_files(tmp_path)
    assert info["seconds"] == 2.0 and info["channels"] == 2 and info["rate"] == 8000
    assert info["bytes"] == 44 + 4 * 16000
