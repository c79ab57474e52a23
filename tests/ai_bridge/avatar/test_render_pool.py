"""The render process (kefu/ai_bridge/avatar/render_pool.py): a real child renders the face
off this process's GIL, and when it is lost the pool says so and stops, never hangs a call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import INDEX
from kefu.ai_bridge.avatar.head_mesh import HeadMesh
from kefu.ai_bridge.avatar.render import probe
from kefu.ai_bridge.avatar.render_pool import RenderPool


@pytest.fixture(scope="module")
def egl() -> None:
    reason = probe()
    if reason is not None:
        pytest.skip(f"no offscreen OpenGL here: {reason}")


def _mouth_gap(rgb: np.ndarray) -> int:
    """Dark pixels (the inside of an open mouth) in the lower middle of the face."""
    h, w = rgb.shape[:2]
    box = rgb[int(h * 0.55) : int(h * 0.75), int(w * 0.4) : int(w * 0.6)].astype(int)
    return int((box.sum(axis=2) < 150).sum())


async def test_the_child_renders_frames_and_a_lost_child_stops_video(egl: None) -> None:
    loop = asyncio.get_running_loop()
    pool = await loop.run_in_executor(None, RenderPool.start, None)
    try:
        assert pool.ready and pool.status() == "ready", pool.status()
        mesh = HeadMesh.from_wire(pool.wire())  # the browser gets the head the child renders
        assert mesh.vertex_count > 1000 and len(mesh.morphs) == 52
        closed = np.zeros(52, np.float32)
        open_ = closed.copy()
        open_[INDEX["jawOpen"]] = 0.8
        shut = await pool.render(closed, (0.0, 0.0, 0.0), (512, 512))
        wide = await pool.render(open_, (0.0, 0.0, 0.0), (512, 512))
        assert (shut.frame.width, shut.frame.height, shut.frame.format.name) == (
            512,
            512,
            "yuv420p",
        )
        assert shut.render_ms > 0
        rgb_shut = shut.frame.to_ndarray(format="rgb24")
        rgb_wide = wide.frame.to_ndarray(format="rgb24")
        assert _mouth_gap(rgb_wide) > _mouth_gap(rgb_shut) + 200  # the jaw really opened
        hd = await pool.render(closed, (0.1, 0.0, 0.0), (1280, 720))
        assert (hd.frame.width, hd.frame.height) == (1280, 720)

        pool._process.kill()  # the child dies (OOM killer, a driver crash...)
        with pytest.raises(RuntimeError, match="render process lost"):
            await pool.render(closed, (0.0, 0.0, 0.0), (512, 512))
        assert not pool.ready and pool.status().startswith("weights only: render process lost")
        with pytest.raises(RuntimeError):
            await pool.render(closed, (0.0, 0.0, 0.0), (512, 512))
    finally:
        await loop.run_in_executor(None, pool.close)
    pool.close()  # twice: nothing left to stop


async def test_an_unusable_avatar_file_falls_back_to_the_default_head(
    egl: None, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.glb"
    bad.write_bytes(b"glTF" + b"\x00" * 40)
    loop = asyncio.get_running_loop()
    pool = await loop.run_in_executor(None, RenderPool.start, str(bad))
    try:
        assert pool.ready and pool.note, pool.status()
        assert pool.status().startswith("ready (default head: ")
        frame = await pool.render(np.zeros(52, np.float32), (0.0, 0.0, 0.0), (512, 512))
        assert frame.frame.width == 512
    finally:
        await loop.run_in_executor(None, pool.close)
