"""Where avatar frames are rendered: a child process that owns the OpenGL context.

moderngl holds the GIL while it draws and reads back (measured: a thread rendering 512×512
frames flat out made the event loop's 5 ms sleeps 10 ms late at p95), and a 12 ms frame 30
times a second would take a third of the event loop's time from the calls' audio. So every
render of every call of this process goes to one child process (``python -m
kefu.ai_bridge.avatar.render_pool FD``, over a socket pair): the event loop hands one
conversation thread the 52 weights and a head pose (208 bytes), the child renders, converts
to ``yuv420p`` (once, for every subscriber's encoder) and sends the planes back (393 KB at
512×512), and the thread rebuilds an ``av.VideoFrame`` from them. The child uses the box's
other core, and the calls' audio never waits for a picture.

:meth:`RenderPool.start` starts the child, which loads the head (an operator's GLB from
``ai.avatar_model``, or the default parametric head when that fails: the reason is kept in
:attr:`RenderPool.note`), probes EGL and sends back the head in the browser's format. Without
EGL, or if the child dies, the pool is not ready (:attr:`RenderPool.error`) and avatars fall
back to weights only; ``/readyz`` shows why. The child ends when the pool is closed or when
this process goes away (its pipe closes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import av
import numpy as np
import structlog
from numpy.typing import NDArray

__all__ = ["RenderPool", "Rendered", "head_wire"]

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 120.0
"""The child imports numpy, av and moderngl and builds the head: seconds on a loaded box."""
ANTIALIAS = "none"
"""Measured on this project's 2-core box at 512×512 with speech-like weights, llvmpipe on one
thread: 10 ms a frame without antialiasing, 16 ms with FXAA, 39 ms with 4x MSAA. A video call
at 30 fps is a third of a core without; the edges of a 512 px head are acceptable."""
RENDER_TIMEOUT_S = 5.0
"""A frame not back by then means the child is stuck: it is stopped, video stops."""


@dataclass(frozen=True, slots=True)
class Rendered:
    frame: av.VideoFrame
    """``yuv420p``; the caller sets ``pts`` and ``time_base``."""
    render_ms: float
    """Render and colour conversion, in the child."""


class RenderPool:
    """The process's avatar renderer (see module doc)."""

    def __init__(
        self,
        process: Any = None,
        conn: Connection | None = None,
        *,
        wire: bytes = b"",
        note: str | None = None,
        error: str | None = None,
    ) -> None:
        self.note = note
        """Why an operator's avatar file was not used (None: it was, or none was given)."""
        self.error = error
        """Why nothing can be rendered (None: rendering works)."""
        self.rendered = 0
        self._process = process
        self._conn = conn
        self._wire = wire
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="avatar")

    @classmethod
    def start(cls, model_path: str | None = None) -> RenderPool:
        """Start the render process and wait until it is ready (blocking: use an executor)."""
        mine, theirs = socket.socketpair()
        env = {**os.environ, "LP_NUM_THREADS": os.environ.get("LP_NUM_THREADS", "1")}
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno()), model_path or ""],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except OSError as exc:
            mine.close()
            return cls(error=f"cannot start the render process: {exc}")
        finally:
            theirs.close()
        parent = Connection(mine.detach())
        try:
            if not parent.poll(START_TIMEOUT_S):
                raise EOFError(f"not ready within {START_TIMEOUT_S:g} s")
            _, error, note, wire = parent.recv()
        except (EOFError, OSError) as exc:
            error, note, wire = f"render process failed to start: {exc}", None, b""
        pool = cls(process, parent, wire=wire, note=note, error=error)
        if note:
            log.warning("avatar_model_refused", path=model_path, error=note)
        if error:
            log.warning("avatar_video_unavailable", error=error)
            pool._stop_child()
        return pool

    @property
    def ready(self) -> bool:
        return self.error is None

    def status(self) -> str:
        """What /readyz shows."""
        if self.error is not None:
            return f"weights only: {self.error}"
        return "ready" if not self.note else f"ready (default head: {self.note})"

    def wire(self) -> bytes:
        """The head in the browser's format (docs/avatar-mesh.md), as the child built it."""
        return self._wire

    async def render(
        self, weights: NDArray[np.float32], head: tuple[float, float, float], size: tuple[int, int]
    ) -> Rendered:
        """Render one frame in the child (RuntimeError when rendering is unavailable)."""
        if self.error is not None:
            raise RuntimeError(self.error)
        data = np.ascontiguousarray(weights, np.float32).tobytes()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._ask, data, head, size)

    def close(self) -> None:
        """Stop the child (blocking, bounded) and the conversation thread."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._stop_child()

    # -- the conversation thread -------------------------------------------------------------

    def _ask(
        self, data: bytes, head: tuple[float, float, float], size: tuple[int, int]
    ) -> Rendered:
        conn = self._conn
        if self.error is not None or conn is None:
            raise RuntimeError(self.error or "no render process")
        try:
            conn.send((data, tuple(head), tuple(size)))
            if not conn.poll(RENDER_TIMEOUT_S):
                raise TimeoutError(f"no frame within {RENDER_TIMEOUT_S:g} s")
            reply = conn.recv()
            if reply[0] == "error":
                raise RuntimeError(f"render failed: {reply[1]}")
            _, (width, height), lengths, render_ms = reply
            planes = conn.recv_bytes()
        except (EOFError, OSError, TimeoutError) as exc:
            self.error = f"render process lost: {exc}"
            log.error("avatar_render_process_lost", error=self.error)
            self._stop_child()
            raise RuntimeError(self.error) from exc
        frame = av.VideoFrame(width, height, "yuv420p")
        at = 0
        for plane, length in zip(frame.planes, lengths, strict=True):
            plane.update(planes[at : at + length])
            at += length
        self.rendered += 1
        return Rendered(frame, render_ms)

    def _stop_child(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
            conn.close()
        process, self._process = self._process, None
        if process is not None:
            try:
                process.wait(2.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(2.0)


def _serve(conn: Connection, model_path: str | None) -> None:
    """The render process: load, report, then render until told to stop or orphaned (the
    socket closes when the server goes away, however it went)."""
    try:
        from kefu.ai_bridge.avatar.head_gltf import load_head
        from kefu.ai_bridge.avatar.render import FaceRenderer, probe

        mesh, note = load_head(model_path)
        wire = mesh.to_wire()
        error = probe()
    except Exception as exc:  # reported to the parent, which falls back to weights
        conn.send(("ready", f"{type(exc).__name__}: {exc}", None, b""))
        return
    renderers: dict[tuple[int, int], Any] = {}
    if error is None:
        try:  # the default size is ready before the first call asks (no first-frame stall)
            renderers[(512, 512)] = FaceRenderer(mesh, width=512, height=512, antialias=ANTIALIAS)
            renderers[(512, 512)].render(np.zeros(52, np.float32), (0.0, 0.0, 0.0))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    conn.send(("ready", error, note, wire))
    if error is not None:
        return
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request is None:
            break
        data, head, size = request
        started = time.perf_counter()
        try:
            renderer = renderers.get(size)
            if renderer is None:
                renderer = renderers[size] = FaceRenderer(
                    mesh, width=size[0], height=size[1], antialias=ANTIALIAS
                )
            rgb = renderer.render(np.frombuffer(data, np.float32), head)
            yuv = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            planes = [bytes(plane) for plane in yuv.planes]
        except Exception as exc:  # one bad frame is reported, the process goes on
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        render_ms = (time.perf_counter() - started) * 1000.0
        conn.send(("frame", size, [len(p) for p in planes], render_ms))
        conn.send_bytes(b"".join(planes))
    for renderer in renderers.values():
        renderer.close()


@functools.lru_cache(maxsize=2)
def head_wire(model_path: str | None) -> bytes:
    """The head a process without a renderer would use, in the browser's format (blocking)."""
    from kefu.ai_bridge.avatar.head_gltf import load_head

    mesh, _ = load_head(model_path)
    return mesh.to_wire()


if __name__ == "__main__":  # the render process: FD [MODEL_PATH]
    _serve(Connection(int(sys.argv[1])), sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None)
