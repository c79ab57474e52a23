"""The one ASR interface every backend implements (Whisper, sherpa-onnx, HTTP, ...)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from kefu.errors import LocalError, RemoteError

from .schedule import DecodeQueue, DecodeTicket

__all__ = [
    "AsrEngine",
    "AsrEngineBase",
    "AsrNotReady",
    "AsrRemoteError",
    "AsrResult",
    "PartialRecognizer",
    "ThreadedAsrEngine",
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
    language_prob: float = 1.0
    """How sure the engine is of ``language`` (Whisper's language identification; 1.0 when
    the language was given and not checked)."""

    @classmethod
    def since(cls, started: float, text: str, language: str, confidence: float) -> AsrResult:
        """A result whose ``decode_ms`` runs from ``started`` (a perf_counter()) to now."""
        return cls(text, language, confidence, (time.perf_counter() - started) * 1000)


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
        ticket: DecodeTicket | None = None,
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


class AsrEngineBase:
    """What every backend shares: the readiness flags and the guard in :meth:`transcribe`.

    A backend that cannot load sets ``error`` and stays not ``ready``; kefu keeps running
    and :meth:`transcribe` raises :class:`AsrNotReady` instead of touching the model.
    """

    name: str = "asr"
    not_ready_message: str = "asr engine not loaded"
    """The AsrNotReady message when the engine is not ready but recorded no ``error``."""

    def __init__(self, languages: tuple[str, ...]) -> None:
        self.ready = False
        self.error: str | None = None
        self.languages = languages

    async def transcribe(
        self,
        pcm16k: NDArray[np.int16],
        *,
        language: str | None = None,
        hotwords: Sequence[str] = (),
        ticket: DecodeTicket | None = None,
    ) -> AsrResult:
        """Transcribe one utterance (the :class:`AsrEngine` contract). ``ticket`` says how
        urgent it is where decodes queue (:mod:`.schedule`; None: urgent)."""
        self.check_ready()
        return await self._transcribe(pcm16k, language, tuple(hotwords), ticket)

    def check_ready(self) -> None:
        if not self.ready:
            raise AsrNotReady(self.error or self.not_ready_message)

    async def _transcribe(
        self,
        pcm16k: NDArray[np.int16],
        language: str | None,
        hotwords: tuple[str, ...],
        ticket: DecodeTicket | None = None,
    ) -> AsrResult:
        raise NotImplementedError


class ThreadedAsrEngine(AsrEngineBase):
    """A local model decoded on one worker thread, so calls queue, not thrash; a caller
    waiting for an answer goes first (:mod:`.schedule`)."""

    def __init__(self, languages: tuple[str, ...], thread_name_prefix: str) -> None:
        super().__init__(languages)
        self.decodes = DecodeQueue(thread_name_prefix)

    async def _transcribe(
        self,
        pcm16k: NDArray[np.int16],
        language: str | None,
        hotwords: tuple[str, ...],
        ticket: DecodeTicket | None = None,
    ) -> AsrResult:
        # A private copy: the caller's buffer may be reused while the decode is queued.
        audio = np.asarray(pcm16k, dtype=np.int16).reshape(-1).copy()
        future = self.decodes.submit(lambda: self._decode(audio, language, hotwords), ticket)
        return await asyncio.wrap_future(future)

    def _decode(
        self, pcm16k: NDArray[np.int16], language: str | None, hotwords: Sequence[str]
    ) -> AsrResult:
        """Blocking decode of one utterance, on the executor's thread."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop the worker thread (pending decodes are cancelled)."""
        self.decodes.close()
