"""The avatar's video as a test client received it: a Y4M file plus arrival times.

``OUT.y4m`` is YUV4MPEG2 (``C420jpeg``, the size of the first frame received; a later frame
of another size, after a quality step, is scaled to it) and ``OUT.y4m.times`` holds one
float per frame: its arrival time (``time.time()``, seconds), the clock of ``--weights`` and
of ``--record``'s ``.times``. Frames are written as they arrive, so a long call costs no
memory; at most ``max_frames`` are kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["Y4mRecorder", "read_y4m"]


class Y4mRecorder:
    def __init__(self, path: str | Path, *, fps: int = 30, max_frames: int = 30 * 600) -> None:
        self.path = Path(path)
        self.fps = fps
        self.max_frames = max_frames
        self.frames = 0
        self.size: tuple[int, int] | None = None
        self._video: IO[bytes] | None = None
        self._times: IO[str] | None = None
        self._closed = False

    def add(self, frame: Any, arrival: float) -> None:
        """Append one received ``av.VideoFrame`` (ignored once closed or full)."""
        if self._closed or self.frames >= self.max_frames:
            return
        if self.size is None:
            self.size = (frame.width, frame.height)
            self._video = self.path.open("wb")
            self._times = Path(f"{self.path}.times").open("w")
            width, height = self.size
            self._video.write(
                f"YUV4MPEG2 W{width} H{height} F{self.fps}:1 Ip A1:1 C420jpeg\n".encode()
            )
        assert self._video is not None and self._times is not None
        width, height = self.size
        yuv = frame.reformat(width=width, height=height, format="yuv420p")
        self._video.write(b"FRAME\n")
        sizes = ((width, height), (width // 2, height // 2), (width // 2, height // 2))
        for plane, (w, h) in zip(yuv.planes, sizes, strict=True):
            rows = np.frombuffer(plane, np.uint8).reshape(-1, plane.line_size)[:h, :w]
            self._video.write(rows.tobytes())
        self._times.write(f"{arrival:.6f}\n")
        self.frames += 1

    def close(self) -> None:
        self._closed = True
        for handle in (self._video, self._times):
            if handle is not None:
                handle.close()
        self._video = self._times = None


def read_y4m(path: str | Path) -> tuple[np.ndarray, list[float]]:
    """The luma planes (frames × height × width, uint8) and the arrival times of a recording."""
    data = Path(path).read_bytes()
    header, _, body = data.partition(b"\n")
    fields = {f[:1]: f[1:] for f in header.split()[1:]}
    width, height = int(fields[b"W"]), int(fields[b"H"])
    frame_size = width * height * 3 // 2
    step = len(b"FRAME\n") + frame_size
    count = len(body) // step
    lumas = np.empty((count, height, width), np.uint8)
    for k in range(count):
        start = k * step + len(b"FRAME\n")
        lumas[k] = np.frombuffer(body, np.uint8, width * height, start).reshape(height, width)
    times_path = Path(f"{path}.times")
    times = [float(x) for x in times_path.read_text().split()] if times_path.exists() else []
    return lumas, times[:count]
