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
