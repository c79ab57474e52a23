"""The one streaming TTS interface every voice engine implements.

An engine turns a reply into a stream of :class:`TtsChunk`, one per clause, so the first
packet can leave while the rest of the answer is still being synthesised. Synthesis is
CPU-bound and runs in the engine's own single-thread executor; the async side only awaits.

Cancellation contract (barge-in): synthesis is driven by the consumer. When the consumer
stops iterating (``aclose()``, ``break``) or its task is cancelled, the pending clause future
is cancelled and no further clause is submitted. At most one clause that has already
started in the executor runs to completion and its result is discarded (a C call cannot be
interrupted halfway).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.speak.clause_executor import background as background_job
from kefu.ai_bridge.speak.clause_executor import first_clause
from kefu.errors import LocalError

if TYPE_CHECKING:  # text.py imports this module, so only the type can come from there
    from kefu.ai_bridge.speak.text import Segment

StyleT = TypeVar("StyleT")

EMOTIONS: tuple[str, ...] = ("neutral", "happy", "sad", "angry", "fearful", "surprised")
"""The six emotions every engine accepts; anything else is rejected with ``TtsError``."""


class TtsError(LocalError, ValueError):
    """A TTS request was invalid (unknown emotion, bad rate) or the engine is not ready."""


@dataclass(frozen=True, slots=True)
class PhonemeMark:
    """One phoneme and where it sounds inside its chunk (drives the avatar's visemes)."""

    phoneme: str
    """The phoneme symbol: IPA for piper, espeak mnemonic or IPA for espeak-ng."""
    start_ms: float
    """Start, in milliseconds from the first sample of the chunk."""
    duration_ms: float
    """How long the phoneme sounds, in milliseconds."""


@dataclass(frozen=True, slots=True)
class TtsChunk:
    """The audio of one clause (or one pause), ready to be packetised."""

    pcm: NDArray[np.int16] = field(repr=False)
    """Mono signed 16-bit samples."""
    sample_rate: int
    """Samples per second of ``pcm`` (22050 for both embedded engines)."""
    text: str
    """The clause this audio speaks (empty for a pure pause)."""
    phonemes: tuple[PhonemeMark, ...] = ()
    """Phoneme timings relative to the chunk start, in order."""
    is_last: bool = False
    """True on the final chunk of one ``synthesize()`` call."""

    @property
    def duration_ms(self) -> float:
        """Length of the audio in milliseconds."""
        return 1000.0 * len(self.pcm) / self.sample_rate

    @property
    def nbytes(self) -> int:
        """Bytes of PCM held (the cache's budget unit)."""
        return int(self.pcm.nbytes)


@runtime_checkable
class TtsEngine(Protocol):
    """What the router, the cache and the outbound track rely on."""

    @property
    def name(self) -> str: ...

    @property
    def languages(self) -> tuple[str, ...]: ...

    @property
    def sample_rate(self) -> int: ...

    @property
    def ready(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    def synthesize(
        self, text: str, *, emotion: str = "neutral", rate: float = 1.0, background: bool = False
    ) -> AsyncIterator[TtsChunk]:
        """``background``: nobody waits for it (rendered ahead for the cache): it yields the
        engine to every other request."""
        ...


def check_request(emotion: str, rate: float) -> None:
    """Reject what no engine can honour, before any work is queued."""
    if emotion not in EMOTIONS:
        raise TtsError(f"unknown emotion {emotion!r}; expected one of {', '.join(EMOTIONS)}")
    if not 0.25 <= rate <= 4.0:
        raise TtsError(f"rate {rate} outside 0.25..4.0")


def silence_chunk(pause_ms: float, sample_rate: int, *, is_last: bool = False) -> TtsChunk:
    """A pause as audio, so the outbound track keeps its pacing through SSML breaks."""
    samples = round(sample_rate * pause_ms / 1000.0)
    return TtsChunk(
        pcm=np.zeros(samples, dtype=np.int16),
        sample_rate=sample_rate,
        text="",
        is_last=is_last,
    )


LEAD_THRESHOLD = 300
"""Sample magnitude (about -40 dBFS) below which a reply's first samples count as silence."""
LEAD_KEEP_MS = 5.0
"""Silence kept before the first audible sample, so a soft onset is not clipped."""


def trim_lead(chunk: TtsChunk) -> TtsChunk:
    """Drop the silence a voice puts before its first phoneme (piper: 25-45 ms).

    Applied to the first clause of a reply only: there it is pure waiting for the caller,
    while between clauses it is part of the pause. Phoneme marks move with the audio.
    """
    loud = np.flatnonzero(np.abs(chunk.pcm.astype(np.int32)) > LEAD_THRESHOLD)
    if not loud.size:
        return chunk
    cut = int(loud[0]) - round(chunk.sample_rate * LEAD_KEEP_MS / 1000.0)
    if cut <= 0:
        return chunk
    cut_ms = 1000.0 * cut / chunk.sample_rate
    marks: list[PhonemeMark] = []
    for mark in chunk.phonemes:
        end = mark.start_ms + mark.duration_ms
        if end <= cut_ms:
            continue
        start = max(mark.start_ms - cut_ms, 0.0)
        marks.append(PhonemeMark(mark.phoneme, start, end - cut_ms - start))
    return TtsChunk(
        chunk.pcm[cut:].copy(), chunk.sample_rate, chunk.text, tuple(marks), chunk.is_last
    )


def _render_trimmed(render: Callable[[], TtsChunk]) -> TtsChunk:
    return trim_lead(render())


_SENTENCE_END = ".!?。！？"
_CLAUSE_END = ",;:，；：、"


def trailing_gap_ms(clause: str, sentence_ms: float, clause_ms: float) -> float:
    """The pause a neural voice (which stops right at its last phoneme) needs after
    ``clause``: ``sentence_ms`` after a full stop, ``clause_ms`` after a comma, else none."""
    tail = clause.rstrip("\"')]）】」』”’ ")
    if tail and tail[-1] in _SENTENCE_END:
        return sentence_ms
    if tail and tail[-1] in _CLAUSE_END:
        return clause_ms
    return 0.0


def with_last_flag(chunk: TtsChunk, is_last: bool) -> TtsChunk:
    if chunk.is_last == is_last:
        return chunk
    return TtsChunk(chunk.pcm, chunk.sample_rate, chunk.text, chunk.phonemes, is_last)


async def run_jobs(
    executor: concurrent.futures.Executor,
    jobs: Sequence[Callable[[], TtsChunk]],
    *,
    lookahead: int = 1,
) -> AsyncIterator[TtsChunk]:
    """Run clause jobs in ``executor`` in order, yielding each result as it is ready.

    ``lookahead`` jobs are submitted ahead of the consumer so a consumer that paces itself
    to real time finds the next clause already rendered; the executor has one thread, so
    the extra submission costs no parallelism, only (on cancel) at most ``lookahead``
    clauses of wasted work, of which the ones not yet started are cancelled outright.
    """
    loop = asyncio.get_running_loop()
    pending: list[asyncio.Future[TtsChunk]] = []
    next_job = 0
    try:
        while next_job < len(jobs) or pending:
            while next_job < len(jobs) and len(pending) <= lookahead:
                pending.append(loop.run_in_executor(executor, jobs[next_job]))
                next_job += 1
            chunk = await pending.pop(0)
            is_last = next_job >= len(jobs) and not pending
            yield with_last_flag(chunk, is_last)
    finally:
        for fut in pending:
            fut.cancel()


class ClauseEngine(ABC, Generic[StyleT]):
    """The plumbing both embedded engines share: one clause per job on one worker thread.

    A subclass says how it loads, which executor runs its jobs, how it cuts text into
    clauses, how a clause's prosody becomes its ``StyleT`` and how it renders a clause;
    the ready guard, the clause jobs and the streaming (:func:`run_jobs`) live here.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready = False
        self.error: str | None = None

    @property
    @abstractmethod
    def sample_rate(self) -> int: ...

    @property
    @abstractmethod
    def worker(self) -> concurrent.futures.Executor:
        """The single-thread executor that loads the engine and renders its clauses."""

    @abstractmethod
    def load(self) -> None:
        """Load the voice (blocking); sets ``ready``, or ``error`` on failure."""

    @abstractmethod
    def render(self, clause: str, style: StyleT, pause_ms: float = 0.0) -> TtsChunk:
        """Synthesise one clause into a chunk (blocking)."""

    @abstractmethod
    def plan(self, text: str, emotion: str, rate: float) -> list[Segment]:
        """``text`` (plain or SSML) as clauses and pauses, in speaking order."""

    @abstractmethod
    def style(self, segment: Segment) -> StyleT:
        """The engine's parameters for the prosody of ``segment``."""

    async def start(self) -> None:
        """Load without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(self.worker, self.load)

    def jobs(
        self, text: str, *, emotion: str = "neutral", rate: float = 1.0, background: bool = False
    ) -> list[Callable[[], TtsChunk]]:
        """The clause jobs for ``text`` (plain or SSML), in speaking order."""
        check_request(emotion, rate)
        jobs: list[Callable[[], TtsChunk]] = []
        for seg in self.plan(text, emotion, rate):
            if seg.text:
                job = partial(self.render, seg.text, self.style(seg), seg.pause_ms)
                jobs.append(first_clause(partial(_render_trimmed, job)) if not jobs else job)
            else:
                jobs.append(partial(silence_chunk, seg.pause_ms, self.sample_rate))
        return [background_job(j) for j in jobs] if background else jobs

    def close(self) -> None:
        """Stop the worker thread; clause jobs not yet started are cancelled."""
        self.worker.shutdown(wait=False, cancel_futures=True)

    async def synthesize(
        self, text: str, *, emotion: str = "neutral", rate: float = 1.0, background: bool = False
    ) -> AsyncIterator[TtsChunk]:
        if not self.ready:
            raise TtsError(f"{self.name} is not ready: {self.error or 'not loaded'}")
        jobs = self.jobs(text, emotion=emotion, rate=rate, background=background)
        async for chunk in run_jobs(self.worker, jobs):
            yield chunk
