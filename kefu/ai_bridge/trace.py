"""Per-turn latency marks: one frozen :class:`TurnTrace` per caller turn, three outlets.

All marks are event-loop times (``loop.time()``, seconds) so they subtract cleanly; a mark
that never happened (the caller barged in before the first packet) is None. The outlets:

* a structlog line ``turn`` with ``call_id`` and ``turn_id`` bound and each stage in ms;
* Prometheus histograms ``kefu_turn_<stage>_seconds`` (:class:`TurnMetrics`, one per process
  because a registry refuses a metric name twice);
* an append-only JSONL interaction log (:class:`InteractionLog`): lines are buffered and
  written by a one-thread executor, so the event loop never touches the disk.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from kefu.ai_bridge.events import BargeIn
from kefu.privacy.mask import mask_record
from kefu.privacy.seal import Sealer

__all__ = ["STAGES", "InteractionLog", "TurnMetrics", "TurnTrace", "TurnTracer"]

log = structlog.get_logger(__name__)

# name -> (from mark, to mark); "response" is the number the budget is written against.
STAGES: dict[str, tuple[str, str]] = {
    "response": ("speech_end", "first_packet"),
    "endpoint": ("speech_end", "end_of_turn"),
    "asr": ("end_of_turn", "asr_final"),
    "dialog": ("asr_final", "answer_chosen"),
    "tts": ("answer_chosen", "first_tts_audio"),
    "playout": ("first_tts_audio", "first_packet"),
}

# Latencies of a voice loop live between 10 ms and a few seconds.
_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0)


@dataclass(frozen=True, slots=True)
class EmotionReading:
    """The caller's emotion in one turn, as the trace and the interaction log carry it."""

    label: str
    """neutral, happy, sad, angry, fearful or surprised."""
    valence: float
    """-1 (negative) .. 1 (positive)."""
    arousal: float
    """-1 (calm, quiet) .. 1 (agitated, loud)."""
    confidence: float
    """0..1; 0 when nothing could be estimated."""

    @classmethod
    def of(cls, emotion: Any) -> EmotionReading:
        """From a :class:`kefu.ai_bridge.emotion.CallerEmotion`."""
        return cls(
            emotion.label,
            round(emotion.valence, 3),
            round(emotion.arousal, 3),
            round(emotion.confidence, 3),
        )


@dataclass(frozen=True, slots=True)
class TurnTrace:
    """Latency marks and content of one caller turn (times are ``loop.time()`` seconds)."""

    call_id: str
    """Call the turn belongs to."""
    turn_id: int
    """Turn number from the endpointer (1, 2, ...)."""
    speech_end: float | None
    """The caller's voice stopped (latency is measured from here)."""
    end_of_turn: float | None
    """The endpointer decided the turn was over."""
    asr_final: float | None
    """The final transcript was available."""
    answer_chosen: float | None
    """The dialog manager returned its Reply (first LLM sentence included)."""
    first_tts_audio: float | None
    """The first synthesized chunk of the answer existed."""
    first_packet: float | None
    """The first frame of the answer was handed to the sender ("on the wire")."""
    transcript: str
    """What the caller said (final ASR text)."""
    intent: str
    """Intent the dialog manager classified."""
    source: str
    """Where the answer came from: kb, llm, fallback, handoff, clarify, greeting."""
    answer_text: str
    """What the bot said (the sentences queued before any barge-in)."""
    barge_in: bool
    """The caller interrupted this answer."""
    lang: str = "en"
    """Language of the turn."""
    asr_decode_ms: float = 0.0
    """Engine time of the decode that produced the transcript."""
    speculative: bool = False
    """The transcript came from a decode started before the end of turn."""
    caller_emotion: EmotionReading | None = None
    """How the caller sounded in this turn (None: emotion off or not estimated)."""
    reply_emotion: str = "neutral"
    """The emotion the answer was spoken with."""
    escalation: str = ""
    """Why this turn handed the call to a human (``negative_emotion``, ``failed_answers``,
    ``explicit_request``), "" when it did not."""
    end_reason: str = ""
    """What ended the caller's turn: ``silence`` (the plain wait), ``semantic`` (the words,
    and voice, said it was complete), ``hesitation`` (they said it was not, and the longer
    wait ran out) or ``max_length`` (kefu/ai_bridge/listen/turn_end.py)."""

    def stage(self, name: str) -> float | None:
        """Seconds spent in a stage of :data:`STAGES`, or None if a mark is missing."""
        start, end = STAGES[name]
        a, b = getattr(self, start), getattr(self, end)
        return None if a is None or b is None else b - a

    @property
    def response_s(self) -> float | None:
        """Caller stopped → first bot audio packet."""
        return self.stage("response")

    def stages_ms(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for name in STAGES:
            s = self.stage(name)
            out[name] = None if s is None else round(s * 1000, 1)
        return out


class TurnMetrics:
    """Histograms of the turn stages; create once per process and share between calls."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stages: dict[str, Histogram] = {
            name: Histogram(
                f"kefu_turn_{name}_seconds",
                f"Turn stage {a} -> {b}",
                buckets=_BUCKETS,
                registry=self.registry,
            )
            for name, (a, b) in STAGES.items()
        }
        self.barge_in_stop = Histogram(
            "kefu_turn_barge_in_stop_seconds",
            "Caller speech start -> bot output paused",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.turns = Counter(
            "kefu_turns",
            "Caller turns answered, by answer source",
            ["source"],
            registry=self.registry,
        )

    def observe(self, trace: TurnTrace) -> None:
        for name, hist in self.stages.items():
            value = trace.stage(name)
            if value is not None and value >= 0:
                hist.observe(value)
        self.turns.labels(source=trace.source or "none").inc()

    def observe_barge_in(self, stop_latency_s: float) -> None:
        self.barge_in_stop.observe(max(0.0, stop_latency_s))

    def read(self, event: object) -> None:
        """A bus sink: finished turns and barge-ins become samples."""
        if isinstance(event, TurnTrace):
            self.observe(event)
        elif isinstance(event, BargeIn):
            self.observe_barge_in(event.stop_latency_ms / 1000)


class InteractionLog:
    """Append-only JSONL, one line per turn, written off the event loop.

    Lines wait in a bounded buffer; one writer thread appends them in order. A buffer that
    overflows (the disk stalls) drops the oldest lines and counts them in ``dropped``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        max_pending: int = 1000,
        mask: bool = False,
        sealer: Sealer | None = None,
    ) -> None:
        self.path = Path(path)
        self.max_pending = max_pending
        self.mask = mask
        """Mask personal data in every record (:mod:`kefu.privacy.mask`)."""
        self.sealer = sealer
        """Seal every line with SM4 (:mod:`kefu.privacy.seal`); None: in the clear."""
        self.dropped = 0
        self.written = 0
        self._pending: list[dict[str, Any]] = []
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="interaction-log")
        self._flushing: asyncio.Task[None] | None = None

    def read(self, event: object) -> None:
        """A bus sink: one line per finished turn (the trace and its stage durations)."""
        if isinstance(event, TurnTrace):
            record = asdict(event)
            record["stages_ms"] = event.stages_ms()
            self.write(record)

    def write(self, record: dict[str, Any]) -> None:
        """Buffer one record; the write happens in the background."""
        if len(self._pending) >= self.max_pending:
            self._pending.pop(0)
            self.dropped += 1
        self._pending.append(record)
        if self._flushing is None or self._flushing.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (sync use): lines wait for an explicit flush()
                return
            self._flushing = loop.create_task(self.flush(), name="interaction-log")

    async def flush(self) -> None:
        while self._pending:
            lines, self._pending = self._pending, []
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._append, lines)

    def _line(self, record: dict[str, Any]) -> str:
        """One record as its line: masked, then sealed, as configured (on the thread)."""
        if self.mask:
            record = mask_record(record)
        line = json.dumps(record, ensure_ascii=False, default=str)
        return self.sealer.seal_line(line) if self.sealer is not None else line

    def _append(self, records: list[dict[str, Any]]) -> None:
        lines = [self._line(record) for record in records]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One O_APPEND write per batch: the front and its room workers may share the file,
        # and Linux never interleaves two processes' single writes to a regular file.
        data = memoryview(("\n".join(lines) + "\n").encode())
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        self.written += len(lines)

    async def close(self) -> None:
        if self._flushing is not None and not self._flushing.done():
            await self._flushing
        await self.flush()
        self._executor.shutdown(wait=True)


class _Marks:
    """Mutable marks of a turn still in progress (internal to :class:`TurnTracer`)."""

    __slots__ = (
        "answer_chosen",
        "answer_text",
        "asr_final",
        "caller_emotion",
        "decode_ms",
        "end_of_turn",
        "end_reason",
        "escalation",
        "first_packet",
        "first_tts_audio",
        "intent",
        "lang",
        "reply_emotion",
        "source",
        "speculative",
        "speech_end",
        "transcript",
    )

    def __init__(self) -> None:
        self.speech_end: float | None = None
        self.end_of_turn: float | None = None
        self.asr_final: float | None = None
        self.answer_chosen: float | None = None
        self.first_tts_audio: float | None = None
        self.first_packet: float | None = None
        self.transcript = ""
        self.intent = ""
        self.source = ""
        self.answer_text = ""
        self.lang = "en"
        self.decode_ms = 0.0
        self.speculative = False
        self.caller_emotion: EmotionReading | None = None
        self.reply_emotion = "neutral"
        self.escalation = ""
        self.end_reason = ""


class TurnTracer:
    """Collects the marks of each turn of one call and emits a TurnTrace when it closes."""

    def __init__(
        self,
        call_id: str,
        *,
        publish: Callable[[object], None] | None = None,
    ) -> None:
        self.call_id = call_id
        self.publish = publish
        """Where finished traces go: the bus, whose readers include the metrics and the
        interaction log."""
        self.traces: list[TurnTrace] = []
        """Every finished trace of the call, in order (bounded by the call's turns)."""
        self._open: dict[int, _Marks] = {}
        self._log = log.bind(call_id=call_id)

    def marks(self, turn_id: int) -> _Marks:
        """The marks of ``turn_id`` (opened on first use)."""
        m = self._open.get(turn_id)
        if m is None:
            m = self._open[turn_id] = _Marks()
        return m

    def is_open(self, turn_id: int) -> bool:
        return turn_id in self._open

    def open_turns(self) -> list[int]:
        return list(self._open)

    def discard(self, turn_id: int) -> None:
        """Forget a turn that produced no answer (backchannel, empty transcript)."""
        self._open.pop(turn_id, None)

    def finish(self, turn_id: int, *, barge_in: bool = False) -> TurnTrace | None:
        m = self._open.pop(turn_id, None)
        if m is None:
            return None
        trace = TurnTrace(
            self.call_id,
            turn_id,
            m.speech_end,
            m.end_of_turn,
            m.asr_final,
            m.answer_chosen,
            m.first_tts_audio,
            m.first_packet,
            m.transcript,
            m.intent,
            m.source,
            m.answer_text,
            barge_in,
            m.lang,
            m.decode_ms,
            m.speculative,
            m.caller_emotion,
            m.reply_emotion,
            m.escalation,
            m.end_reason,
        )
        self.traces.append(trace)
        stages = trace.stages_ms()
        self._log.info(
            "turn",
            turn_id=turn_id,
            source=trace.source,
            intent=trace.intent,
            barge_in=barge_in,
            speculative=trace.speculative,
            end_reason=trace.end_reason,
            **{f"{k}_ms": v for k, v in stages.items()},
        )
        if self.publish is not None:
            self.publish(trace)
        return trace
