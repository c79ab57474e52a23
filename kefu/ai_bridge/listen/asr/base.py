"""The one ASR interface every backend implements (Whisper, sherpa-onnx, HTTP, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from kefu.errors import LocalError, RemoteError

__all__ = [
    "AsrEngine",
    "AsrNotReady",
    "AsrRemoteError",
    "AsrResult",
    "PartialRecognizer",
]


class AsrNotReady(LocalError):
    """The engine's model is not loaded (see its ``error``); kefu keeps running without it."""


class AsrRemoteError(RemoteError):
    """A remote ASR service failed, timed out or answered something unusable."""


@dataclass(frozen=True, slots=True)
class AsrResult:
    """One transcription of one utterance."""

    text: str
    """Recognized words, stripped; empty when nothing was said."""
    language: str
    """Language code (ISO 639-1) the text is in."""
    confidence: float
    """0..1; for Whisper ``exp`` of the mean token log-probability."""
    decode_ms: float
    """Time the engine spent on this utterance (queueing excluded where measurable)."""


@runtime_checkable
class AsrEngine(Protocol):
    """A whole-utterance recognizer. Implementations must not block the event loop."""

    name: str
    languages: tuple[str, ...]
    ready: bool
    error: str | None

    async def transcribe(
        self,
        pcm16k: NDArray[np.int16],
        *,
        language: str | None = None,
        hotwords: Sequence[str] = (),
    ) -> AsrResult: ...


@runtime_checkable
class PartialRecognizer(Protocol):
    """Incremental recognizer for cues while the caller speaks (synchronous, cheap)."""

    def feed(self, pcm16k: NDArray[np.int16]) -> str | None:
        """Consume audio; return the hypothesis when it changed, else None."""
        ...

    def reset(self) -> None:
        """Start a new utterance."""
        ...
