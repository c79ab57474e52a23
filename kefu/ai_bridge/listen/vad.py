"""Silero VAD through onnxruntime, without importing the torch-bound ``silero_vad`` package.

The model is stateful: each 32 ms chunk (512 samples at 16 kHz) is fed together with the last
64 samples of the previous chunk (its "context") and a (2, 1, 128) recurrent state. Getting
the context wrong silently halves the probabilities, which is why it is kept here and not left
to callers.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

__all__ = ["CHUNK_SAMPLES", "SAMPLE_RATE", "SileroVad", "silero_model_path"]

SAMPLE_RATE = 16000
CHUNK_SAMPLES = 512
_CONTEXT_SAMPLES = 64

log = structlog.get_logger(__name__)


def silero_model_path() -> Path:
    """Locate ``silero_vad/data/silero_vad.onnx`` without importing the package (it needs torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package silero-vad is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise FileNotFoundError(f"silero VAD model missing at {path}")
    return path


class SileroVad:
    """One VAD stream: feed consecutive 512-sample chunks, get a speech probability each.

    One ``InferenceSession`` per instance with a single intra-op thread: a call is ~0.1-0.2 ms,
    far below the cost of waking a thread pool, and calls of many calls run in parallel.
    A model that fails to load leaves ``ready`` False and ``error`` set instead of raising.
    """

    def __init__(self, model_path: str | os.PathLike[str] | None = None) -> None:
        self.ready = False
        self.error: str | None = None
        self._session: Any = None
        self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT_SAMPLES, np.float32)
        self._sr = np.array(SAMPLE_RATE, np.int64)
        try:
            import onnxruntime as ort

            path = Path(model_path) if model_path is not None else silero_model_path()
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            self._session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self.ready = True
        except Exception as exc:  # a broken model must not take the server down
            self.error = f"silero VAD failed to load: {exc}"
            log.error("vad_load_failed", error=self.error)

    def reset(self) -> None:
        """Forget the recurrent state and context (start of a new stream)."""
        self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT_SAMPLES, np.float32)

    def probability(self, chunk: NDArray[np.int16]) -> float:
        """Speech probability of the next 512-sample, 16 kHz chunk of the stream."""
        if chunk.shape != (CHUNK_SAMPLES,):
            raise ValueError(f"VAD chunk must be {CHUNK_SAMPLES} samples, got {chunk.shape}")
        if self._session is None:
            return 0.0
        audio = chunk.astype(np.float32) / 32768.0
        x = np.concatenate((self._context, audio))[None, :]
        out, state = self._session.run(None, {"input": x, "state": self._state, "sr": self._sr})
        self._state = state
        self._context = audio[-_CONTEXT_SAMPLES:]
        return float(out[0, 0])
