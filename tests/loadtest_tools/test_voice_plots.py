"""``python -m loadtest voice`` draws its latency distribution and stage waterfall."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadtest.voice_plots import write_plots

pytest.importorskip("matplotlib")


def turn(name: str, ms: float | None, stages: dict[str, float] | None = None) -> dict:
    rec = {"question": name, "latency_ms": ms, "overlapped": False}
    if stages is not None:
        rec["trace"] = {"stages_ms": stages}
    return rec


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_a_run_with_traces_gets_both_pictures(tmp_path: Path) -> None:
    stages = {"endpoint": 200, "asr": 40, "dialog": 30, "tts": 90, "playout": 60, "response": 420}
    turns = [turn(f"q{i:02d}", 400 + 10 * i, stages) for i in range(12)]
    turns.append(turn("missed", None))
    summary = {"transport": "sip", "concurrency": 4, "p50_ms": 455.0, "p95_ms": 505.0}
    written = write_plots({**summary, "turn_records": turns}, tmp_path / "voice.json")
    assert [p.name for p in written] == ["voice.latency.png", "voice.waterfall.png"]
    assert png_size(written[0]) == (770, 440)  # 7 x 4 in at 110 dpi
    width, height = png_size(written[1])
    assert (width, height) == (770, 422)  # 0.22 in per traced turn (12) + 1.2 in


def test_no_traces_no_waterfall_and_no_turns_no_pictures(tmp_path: Path) -> None:
    turns = [turn("a", 500.0), turn("b", float(np.float64(610.0)))]
    written = write_plots({"transport": "webrtc", "turn_records": turns}, tmp_path / "r.json")
    assert [p.name for p in written] == ["r.latency.png"]
    assert write_plots({"turn_records": []}, tmp_path / "empty.json") == []
