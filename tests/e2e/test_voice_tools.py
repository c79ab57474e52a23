"""The timing arithmetic of loadtest.voice, on synthetic audio (no sockets, no models)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadtest.pcap import write_wav
from loadtest.voice import (
    ASR_RATE,
    Heard,
    Question,
    build_script,
    load_questions,
    speech_bounds,
)
from loadtest.voice_report import barge_in_report, summarize, turns_of


def tone(seconds: float, rate: int = ASR_RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)


def padded(lead: float, voiced: float, tail: float) -> np.ndarray:
    z = np.zeros
    return np.concatenate([z(int(lead * ASR_RATE), np.int16), tone(voiced), z(int(tail * 16000))])


def test_speech_bounds_find_the_voiced_span_to_a_frame() -> None:
    start, end = speech_bounds(padded(0.3, 1.0, 0.5), ASR_RATE)
    assert abs(start - 0.3) <= 0.02 and abs(end - 1.3) <= 0.02


def test_script_places_questions_after_the_lead_and_gaps() -> None:
    q = Question("a", padded(0.1, 1.0, 0.1), "a")
    script = build_script([q, q], lead_s=5.0, gap_s=4.0)
    first, second = script.placed
    assert first.start_s == 5.0 and abs(first.speech_end_s - 6.1) <= 0.02
    assert second.start_s == 5.0 + 1.2 + 4.0
    assert abs(script.seconds - (second.start_s + 1.2 + 4.0)) < 1e-3


def test_load_questions_reads_refs_and_resamples(tmp_path: Path) -> None:
    write_wav(tmp_path / "00.wav", tone(0.5, 8000), 8000)
    (tmp_path / "refs.tsv").write_text("00.wav\tHello there\n")
    [q] = load_questions(tmp_path)
    assert q.text == "Hello there" and abs(len(q.pcm) - 8000) <= 16


def heard_with(frames: list[tuple[float, float]], ends: list[float], starts: list[float]) -> Heard:
    q = Question("q", padded(0.0, 1.0, 0.0), "q")
    script = build_script([q] * len(ends), lead_s=1.0, gap_s=5.0)
    h = Heard(script, list(ends), list(starts))
    h.frames = frames
    return h


def test_latency_is_speech_end_to_first_voiced_bot_frame() -> None:
    # Bot frames every 20 ms: silent until 10.7 s, voiced from then on.
    frames = [(10 + i * 0.02, 0.0 if 10 + i * 0.02 < 10.7 else 2000.0) for i in range(100)]
    h = heard_with(frames, [10.0], [9.0])
    [turn] = turns_of([h], None)
    assert turn["latency_ms"] == 700.0 and not turn["overlapped"]
    assert summarize([turn])["p50_ms"] == 700.0


def test_barge_in_stop_is_the_start_of_the_first_half_second_of_silence() -> None:
    # The bot talks until 20.18 s, the caller cut in at 20.0 s; silence for 1 s, then talks.
    frames = [(19 + i * 0.02, 2000.0) for i in range(60)]
    frames += [(20.2 + i * 0.02, 0.0) for i in range(50)]
    frames += [(21.2 + i * 0.02, 2000.0) for i in range(50)]
    h = heard_with(frames, [15.0, 21.0], [14.0, 20.0])
    report = barge_in_report([h])
    assert report["rows"][0]["bot_was_talking"]
    assert abs(report["stop_p50_ms"] - 180.0) < 1.0
