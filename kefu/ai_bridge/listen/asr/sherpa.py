"""Mandarin (or any language) ASR over an operator-given sherpa-onnx model directory.

No Chinese model ships inside a package, so this engine is only ready when the operator
installs ``sherpa-onnx`` and points ``model_dir`` at a downloaded model: a SenseVoice
(``model.onnx`` or ``model.int8.onnx`` + ``tokens.txt``, detected by "sense" in the directory
name or ``kind="sense_voice"``) or a Paraformer directory (same file names).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import structlog
from numpy.typing import NDArray

from .base import AsrNotReady, AsrResult, ThreadedAsrEngine

__all__ = ["SherpaOnnxAsr"]

log = structlog.get_logger(__name__)


class SherpaOnnxAsr(ThreadedAsrEngine):
    """Offline (whole-utterance) sherpa-onnx recognizer in a single-thread executor."""

    name = "sherpa-onnx"
    not_ready_message = "sherpa-onnx not loaded"

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None,
        *,
        kind: Literal["auto", "sense_voice", "paraformer"] = "auto",
        language: str = "zh",
        num_threads: int = 2,
    ) -> None:
        super().__init__((language,), thread_name_prefix="sherpa")
        self._language = language
        self._recognizer: Any = None
        try:
            self._recognizer = self._load(model_dir, kind, language, num_threads)
            self.ready = True
        except Exception as exc:  # a missing model must not take the server down
            self.error = str(exc)
            log.warning("asr_not_ready", engine=self.name, error=self.error)

    @staticmethod
    def _load(
        model_dir: str | os.PathLike[str] | None, kind: str, language: str, num_threads: int
    ) -> Any:
        if model_dir is None:
            raise AsrNotReady("sherpa-onnx: no model directory configured")
        root = Path(model_dir)
        if not root.is_dir():
            raise AsrNotReady(f"sherpa-onnx: model directory {root} does not exist")
        tokens = root / "tokens.txt"
        model = next(
            (root / n for n in ("model.int8.onnx", "model.onnx") if (root / n).is_file()), None
        )
        if model is None or not tokens.is_file():
            raise AsrNotReady(f"sherpa-onnx: {root} lacks model(.int8).onnx or tokens.txt")
        try:
            import sherpa_onnx
        except ImportError as exc:
            raise AsrNotReady("sherpa-onnx: package sherpa-onnx is not installed") from exc
        if kind == "auto":
            kind = "sense_voice" if "sense" in root.name.lower() else "paraformer"
        if kind == "sense_voice":
            return sherpa_onnx.OfflineRecognizer.from_sense_voice(
                model=str(model),
                tokens=str(tokens),
                num_threads=num_threads,
                language=language,
                use_itn=True,
            )
        return sherpa_onnx.OfflineRecognizer.from_paraformer(
            paraformer=str(model), tokens=str(tokens), num_threads=num_threads
        )

    def _decode(
        self, pcm16k: NDArray[np.int16], language: str | None, hotwords: Sequence[str]
    ) -> AsrResult:
        t0 = time.perf_counter()
        stream = self._recognizer.create_stream()
        stream.accept_waveform(16000, pcm16k.astype(np.float32) / 32768.0)
        self._recognizer.decode_stream(stream)
        text = str(stream.result.text).strip()
        # sherpa-onnx offline results carry no score; report neutral confidence.
        return AsrResult.since(t0, text, self._language, 1.0 if text else 0.0)
