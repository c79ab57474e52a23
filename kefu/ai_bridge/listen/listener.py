"""The per-call ears: endpointer + partials + ASR with speculative decoding.

Speculative decoding: the endpointer offers the utterance after ~0.1 s of silence
(:class:`VoicePaused`); we start the ASR then, while the caller may still resume. If they do,
the result is discarded; if the turn ends with the same audio (same ``revision``), the
speculative result *is* the final, so the transcript lands at (or within a few ms of) the end
of turn instead of one decode later. The speculative result, with the turn's audio, is also
the semantic end-of-turn cue (:mod:`.turn_end`): a finished question or statement shortens
the silence wait, a caller who stopped mid-sentence gets a longer one.

Threading: ``feed`` runs on the event loop (VAD is ~0.2 ms per 32 ms chunk); pocketsphinx
partials and ASR run in executors, so the loop never blocks on inference.

Lanes (:class:`kefu.ai_bridge.lane.Lane`): ``events`` carries the turn's control events
(:class:`SpeechStarted`, :class:`SpeechSustained`, :class:`EndOfTurn`,
:class:`FinalTranscript`), which are never dropped, in order with the partial transcripts,
which a stalled consumer loses oldest first (``dropped``). The partial recognizer's audio
lane drops audio chunks when it falls behind (``partials_dropped``) but never the end-of-turn
marker that resets it, and a new turn's first chunk stays where it was queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from ..lane import Lane
from .asr.base import AsrEngine, AsrResult, PartialRecognizer
from .asr.schedule import DecodeTicket
from .endpoint import (
    EndpointConfig,
    Endpointer,
    EndpointEvent,
    TurnEnded,
    VadModel,
    VoicePaused,
    VoiceResumed,
    VoiceStarted,
)
from .turn_end import TurnCue, TurnJudgement, judge_turn

Judge = Callable[[str, "NDArray[np.int16] | None"], TurnJudgement]
"""Text and audio of a turn so far -> its end-of-turn cue (:func:`.turn_end.judge_turn`)."""

__all__ = [
    "EndOfTurn",
    "FinalTranscript",
    "ListenEvent",
    "Listener",
    "PartialTranscript",
    "SpeechStarted",
    "SpeechSustained",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    turn_id: int
    """Turn opened (ids increase by one per call)."""
    at: float
    """Time the caller's voice began (barge-in cue)."""


@dataclass(frozen=True, slots=True)
class SpeechSustained:
    turn_id: int
    """Turn whose voice has lasted ``sustained_ms`` (once per turn at most)."""
    at: float
    """Time of the audio chunk that crossed it (the caller is audibly talking then)."""


@dataclass(frozen=True, slots=True)
class PartialTranscript:
    turn_id: int
    """Turn the words belong to."""
    text: str
    """Rough words so far (pocketsphinx); for cues, never for answers."""
    at: float
    """Time the hypothesis was available."""


@dataclass(frozen=True, slots=True)
class EndOfTurn:
    turn_id: int
    """Turn that ended."""
    at: float
    """Time the end was decided."""
    speech_end_at: float
    """Time the caller's voice stopped (latency is measured from here)."""
    short: bool
    """Backchannel-length voice ("uh-huh", "嗯"): do not treat as barge-in."""
    reason: str = "silence"
    """``silence``, ``semantic`` or ``max_length``."""
    audio: NDArray[np.int16] | None = field(default=None, repr=False, compare=False)
    """The turn's voice (16 kHz), for what else listens to it (the caller's emotion)."""


@dataclass(frozen=True, slots=True)
class FinalTranscript:
    turn_id: int
    """Turn transcribed."""
    text: str
    """Recognized words (may be empty)."""
    language: str
    """Language of ``text``."""
    confidence: float
    """0..1 from the engine."""
    at: float
    """Time the transcript was available."""
    decode_ms: float
    """Engine time for the decode that produced it."""
    speculative: bool
    """True when the decode started before the end of turn and was reused."""


ListenEvent = SpeechStarted | SpeechSustained | PartialTranscript | EndOfTurn | FinalTranscript


def is_control(event: ListenEvent) -> bool:
    """Every listen event but a partial transcript steers the call: it is never dropped."""
    return not isinstance(event, PartialTranscript)


_PartialItem = tuple[int, "NDArray[np.int16] | None"]
"""(turn_id, audio); None: the turn ended (reset the recognizer). Only audio is droppable."""


def _is_turn_end(item: _PartialItem) -> bool:
    return item[1] is None


class Listener:
    """Feed 16 kHz mono int16 (any chunk size) with ``feed``; read ``events``."""

    def __init__(
        self,
        asr: AsrEngine,
        *,
        config: EndpointConfig | None = None,
        vad: VadModel | None = None,
        partials: PartialRecognizer | None = None,
        asr_language: str | None = None,
        hotwords: Sequence[str] = (),
        speculative: bool = True,
        judge: Judge | None = judge_turn,
        queue_size: int = 64,
        sustained_ms: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        partials_executor: Executor | None = None,
        call_id: str | None = None,
    ) -> None:
        self.asr = asr
        self.endpointer = Endpointer(config, vad)
        self.partials = partials
        self.asr_language = asr_language
        self.hotwords: tuple[str, ...] = tuple(hotwords)
        self.speculative = speculative
        self.judge = judge
        """Runs off the event loop (it measures pitch); None: silence alone ends turns."""
        self.likely_end: Callable[[str], None] | None = None
        """Told the words of a turn the cue says is ending (complete or a statement), before
        the end of turn: the dialog can start on them (:meth:`DialogManager.prefetch`)."""
        self.events: Lane[ListenEvent] = Lane(queue_size, is_control=is_control)
        """Control events (never dropped) and partial transcripts (at most ``queue_size``)."""
        self.sustained_s = None if sustained_ms is None else sustained_ms / 1000
        """Voice that makes a turn :class:`SpeechSustained` (None: never emitted)."""
        self._sustained_turn = 0
        self._clock = clock
        self._log = log.bind(call_id=call_id)
        self._closed = False
        # Speculative decode in flight or done: (turn_id, revision, task).
        self._spec: tuple[int, int, asyncio.Task[AsrResult], DecodeTicket] | None = None
        """The speculative decode in flight: (turn, revision, its task, its ticket)."""
        self._finals: set[asyncio.Task[None]] = set()
        self._judging: set[asyncio.Task[None]] = set()
        self._partials_exec = partials_executor
        self._partial_q: Lane[_PartialItem] = Lane(100, is_control=_is_turn_end)
        self._partial_task: asyncio.Task[None] | None = None
        if partials is not None:
            self._partial_task = asyncio.get_running_loop().create_task(self._run_partials())

    # -- input -----------------------------------------------------------------------------

    def feed(self, pcm16k: NDArray[np.int16], now: float) -> None:
        """Consume caller audio whose last sample arrived at ``now`` (``clock`` time)."""
        if self._closed:
            return
        was_in_turn = self.endpointer.in_turn
        events = self.endpointer.feed(pcm16k, now)
        if was_in_turn and self.endpointer.in_turn:
            self._push_partial_audio(self.endpointer.turn_id, pcm16k)
        self._handle(events)
        if self.sustained_s is not None and self._sustained_turn != self.endpointer.turn_id:
            self._check_sustained(now)

    @property
    def turn_id(self) -> int:
        """The open turn's id, or the last one's when none is open (0: none yet)."""
        return self.endpointer.turn_id

    @property
    def dropped(self) -> int:
        """Partial transcripts a stalled consumer lost (control events are never dropped)."""
        return self.events.dropped

    @property
    def partials_dropped(self) -> int:
        """Audio chunks the partial recognizer fell too far behind to see."""
        return self._partial_q.dropped

    def _check_sustained(self, now: float) -> None:
        ep = self.endpointer
        assert self.sustained_s is not None
        # Strong voice right now, not the end-threshold hangover that trails a short "uh-huh".
        if (
            ep.state == "speech"
            and ep.speech_audio_s >= self.sustained_s
            and ep.last_probability >= ep.config.start_threshold
        ):
            self._sustained_turn = ep.turn_id
            self._emit(SpeechSustained(ep.turn_id, now))

    def get_timer(self) -> float | None:
        """Deadline for :meth:`handle_timer` (only matters when audio stops arriving)."""
        return self.endpointer.get_timer()

    def handle_timer(self, now: float) -> None:
        self._handle(self.endpointer.handle_timer(now))

    async def close(self) -> None:
        """Cancel every decode and partial in flight; no events follow."""
        self._closed = True
        tasks: list[asyncio.Task[Any]] = [*self._finals, *self._judging]
        if self._spec is not None:
            tasks.append(self._spec[2])
        if self._partial_task is not None:
            tasks.append(self._partial_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._spec = None
        self._finals.clear()
        self.endpointer.reset()

    # -- endpointer events -----------------------------------------------------------------

    def _handle(self, events: list[EndpointEvent]) -> None:
        for ev in events:
            if isinstance(ev, VoiceStarted):
                self._cancel_spec()
                self._emit(SpeechStarted(ev.turn_id, ev.at))
                self._push_partial_audio(ev.turn_id, ev.audio)
            elif isinstance(ev, VoicePaused):
                if self.speculative:
                    self._start_spec(ev)
            elif isinstance(ev, VoiceResumed):
                self._cancel_spec()
            elif isinstance(ev, TurnEnded):
                self._end_turn(ev)

    def _start_spec(self, ev: VoicePaused) -> None:
        self._cancel_spec()
        ticket = DecodeTicket(urgent=False)  # it waits behind every turn that has ended
        task = asyncio.get_running_loop().create_task(self._transcribe(ev.audio, ticket))
        task.add_done_callback(functools.partial(self._on_spec_done, ev))
        self._spec = (ev.turn_id, ev.revision, task, ticket)

    def _on_spec_done(self, ev: VoicePaused, task: asyncio.Task[AsrResult]) -> None:
        if task.cancelled() or task.exception() is not None or self.judge is None:
            return
        if self._closed or not self._is_current(ev):
            return
        judging = asyncio.get_running_loop().create_task(self._judge(ev, task.result().text))
        self._judging.add(judging)
        judging.add_done_callback(self._judging.discard)

    async def _judge(self, ev: VoicePaused, text: str) -> None:
        judge = self.judge
        if judge is None:
            return
        loop = asyncio.get_running_loop()
        try:
            verdict = await loop.run_in_executor(None, judge, text, ev.audio)
        except Exception as exc:  # a failed judgement leaves the plain silence wait
            self._log.warning("turn_cue_failed", turn_id=ev.turn_id, error=str(exc))
            return
        if not self._is_current(ev):
            return  # the caller went on meanwhile: this audio is no longer the turn
        self._log.debug(
            "turn_cue", turn_id=ev.turn_id, cue=verdict.cue.value, why=verdict.why,
            pitch_st=None if verdict.pitch_st is None else round(verdict.pitch_st, 2),
        )  # fmt: skip
        self.endpointer.hint(ev.turn_id, verdict.cue)
        if self.likely_end is not None and verdict.cue in (TurnCue.COMPLETE, TurnCue.STATEMENT):
            self.likely_end(text)

    def _is_current(self, ev: VoicePaused) -> bool:
        spec = self._spec
        return spec is not None and spec[0] == ev.turn_id and spec[1] == ev.revision

    def _cancel_spec(self) -> None:
        if self._spec is not None:
            self._spec[2].cancel()
            self._spec = None

    def _end_turn(self, ev: TurnEnded) -> None:
        self._emit(EndOfTurn(ev.turn_id, ev.at, ev.speech_end_at, ev.short, ev.reason, ev.audio))
        self._push_partial_audio(ev.turn_id, None)
        spec = self._spec
        self._spec = None
        if spec is not None and spec[0] == ev.turn_id and spec[1] == ev.revision:
            task, speculative = spec[2], True
            if task.done() and not task.cancelled() and task.exception() is None:
                self._emit_final(ev.turn_id, task.result(), True)
                return
            spec[3].promote()  # the caller now waits for it: ahead of others' speculation
        else:
            if spec is not None:
                spec[2].cancel()
            urgent = DecodeTicket(urgent=True)
            task = asyncio.get_running_loop().create_task(self._transcribe(ev.audio, urgent))
            speculative = False
        final = asyncio.get_running_loop().create_task(
            self._await_final(ev.turn_id, task, speculative)
        )
        self._finals.add(final)
        final.add_done_callback(self._finals.discard)

    async def _transcribe(self, audio: NDArray[np.int16], ticket: DecodeTicket) -> AsrResult:
        return await self.asr.transcribe(
            audio, language=self.asr_language, hotwords=self.hotwords, ticket=ticket
        )

    async def _await_final(
        self, turn_id: int, task: asyncio.Task[AsrResult], speculative: bool
    ) -> None:
        try:
            result = await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception as exc:  # ASR failure: the turn gets an empty transcript, not a crash
            self._log.warning("asr_failed", turn_id=turn_id, error=str(exc))
            result = AsrResult("", self.asr_language or "en", 0.0, 0.0)
        self._emit_final(turn_id, result, speculative)

    def _emit_final(self, turn_id: int, result: AsrResult, speculative: bool) -> None:
        self._log.info(
            "asr_final",
            turn_id=turn_id,
            decode_ms=round(result.decode_ms, 1),
            speculative=speculative,
            chars=len(result.text),
        )
        self._emit(
            FinalTranscript(
                turn_id,
                result.text,
                result.language,
                result.confidence,
                self._clock(),
                result.decode_ms,
                speculative,
            )
        )

    # -- output ----------------------------------------------------------------------------

    def _emit(self, event: ListenEvent) -> None:
        if self._closed:
            return
        if not self.events.put(event):
            # A stalled consumer loses the oldest partial transcript, never a turn's control.
            self._log.warning("listen_partial_dropped", dropped=self.events.dropped)

    # -- partials --------------------------------------------------------------------------

    def _push_partial_audio(self, turn_id: int, pcm: NDArray[np.int16] | None) -> None:
        if self._partial_task is None:
            return
        self._partial_q.put((turn_id, None if pcm is None else pcm.copy()))

    async def _run_partials(self) -> None:
        assert self.partials is not None
        loop = asyncio.get_running_loop()
        recognizer = self.partials
        while True:
            turn_id, pcm = await self._partial_q.get()
            batch = [pcm]
            # Batch what piled up so one executor hop serves many 20 ms chunks. A chunk of
            # another turn is left at the head of the lane (never re-queued behind later
            # chunks) and ends this batch's turn.
            while batch[-1] is not None:
                head = self._partial_q.peek()
                if head is None:
                    break
                if head[0] != turn_id:
                    batch.append(None)
                    break
                batch.append(self._partial_q.get_nowait()[1])
            audio_parts = [b for b in batch if b is not None]
            if audio_parts:
                audio = np.concatenate(audio_parts)
                text = await loop.run_in_executor(self._partials_exec, recognizer.feed, audio)
                if text and self.endpointer.turn_id == turn_id and self.endpointer.in_turn:
                    self._emit(PartialTranscript(turn_id, text, self._clock()))
            if batch[-1] is None:
                await loop.run_in_executor(self._partials_exec, recognizer.reset)
