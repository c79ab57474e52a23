"""``python -m loadtest webrtc --weights OUT.jsonl``: one JSON line per avatar frame received,
its arrival time, sequence, media timestamp and the 52 weights by ARKit name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from kefu.ai_bridge.avatar.arkit import BLENDSHAPES, COUNT
from kefu.ai_bridge.avatar.wire import FrameEncoder, FrameFlags
from loadtest.webrtc import add_arguments, write_weights


def test_weights_lines_decode_to_52_named_values(tmp_path: Path) -> None:
    encoder = FrameEncoder()
    rng = np.random.default_rng(1)
    frames = [
        (1_700_000_000.0 + i / 30, encoder.encode(rng.random(COUNT).astype(np.float32), 33 * i))
        for i in range(5)
    ]
    frames.insert(2, (1_700_000_000.05, b"not a frame"))
    frames.append(
        (1_700_000_001.0, encoder.encode(np.ones(COUNT, np.float32), 7, FrameFlags.RESET))
    )
    out = tmp_path / "w.jsonl"
    assert write_weights(frames, out) == (6, 1)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 6
    for i, line in enumerate(lines):
        assert list(line) == ["t", "seq", "ts_ms", *BLENDSHAPES]
        assert line["seq"] == i
        assert all(0.0 <= line[name] <= 1.0 for name in BLENDSHAPES)
    assert lines[0]["t"] == 1_700_000_000.0 and lines[1]["ts_ms"] == 33
    assert all(lines[-1][name] == 1.0 for name in BLENDSHAPES)


def test_weights_flag_is_parsed() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--target", "http://h:1", "--wav", "a.wav", "--record", "b.wav"]
    assert parser.parse_args(base).weights is None
    assert parser.parse_args([*base, "--weights", "out.jsonl"]).weights == "out.jsonl"


async def test_the_recording_says_when_its_first_sample_arrived(tmp_path: Path) -> None:
    import wave

    from loadtest.webrtc_client import WebRtcClient

    client = WebRtcClient()
    try:
        client._recorded[1] = [np.full(960, 1000, np.int16)]  # one 20 ms frame at 48 kHz
        client.record_to(tmp_path / "heard.wav")
        assert not (tmp_path / "heard.wav.times").exists()  # nothing arrived: no time to tell
        client.first_audio_at = 1_700_000_000.25
        client.record_to(tmp_path / "heard.wav")
    finally:
        await client.close()
    assert (tmp_path / "heard.wav.times").read_text() == "1700000000.250000\n"
    with wave.open(str(tmp_path / "heard.wav")) as w:
        assert (w.getframerate(), w.getnframes()) == (48000, 960)
