"""``python -m loadtest avatar-render``: a few frames through the renderer and both encoders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import INDEX
from loadtest.__main__ import main
from loadtest.avatar_render import speech_weights


def test_the_weights_talk_and_blink() -> None:
    w = speech_weights(180)
    assert w.shape == (180, 52) and w.dtype == np.float32
    assert 0.0 <= w.min() and w.max() <= 1.0
    jaw = w[:, INDEX["jawOpen"]]
    assert jaw.max() > 0.3 and jaw.std() > 0.05  # the mouth moves
    assert w[:, INDEX["eyeBlinkLeft"]].max() > 0.9  # at least one blink in 6 s
    assert np.array_equal(w, speech_weights(180))  # seeded


def test_the_command_renders_and_encodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kefu.ai_bridge.avatar.render import probe

    reason = probe()
    if reason is not None:
        pytest.skip(f"no EGL rendering here: {reason}")
    out = tmp_path / "render.json"
    args = ["avatar-render", "--frames", "4", "--sizes", "64x64,96x64", "--json", str(out)]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    assert printed["frames"] == 4 and printed["mesh"]["triangles"] > 1000
    for size in ("64x64", "96x64"):
        result = printed["sizes"][size]
        assert set(result["ms"]) == {"render", "convert", "vp8", "h264"}
        assert all(
            result["ms"][stage]["p95"] >= result["ms"][stage]["p50"] > 0 for stage in result["ms"]
        )
        assert result["bytes_per_frame"]["vp8"] > 0 and result["bytes_per_frame"]["h264"] > 0
        assert result["max_fps_one_core"] > 0
