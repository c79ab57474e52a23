"""CallAgent: one call's voice loop — ears (Listener), brain (DialogManager), voice (Voice).

Flow of a turn: the tap feeds the caller's audio to the Listener; its FinalTranscript starts
an answer task (dm.respond → sentences → Voice.synthesize → BotAudioTrack), which queues audio
as soon as the first chunk exists. Latency marks go to a TurnTracer; the trace of a turn is
finished when its audio has been played (an end marker reaching the sender) or interrupted.

Barge-in, as a small table over ``_Barge`` (at most one open at a time):

* bot busy (answer task alive or audio queued) + SpeechStarted → output paused at once;
* the caller's voice lasts ``barge_in_min_ms`` (checked on every fed frame, or when the turn
  ends not short) → queue flushed, answer task cancelled, BargeIn published, and the caller's
  turn is answered normally;
* the turn ends ``short`` before that (a backchannel: "uh-huh", "嗯") → output resumed where it
  stopped; the backchannel's transcript is ignored.

When a model the call needs is not loaded, the agent speaks an apology (or, with no voice at
all, plays a tone) and publishes HandoffRequested instead of listening.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.ai_bridge.frontend.aec import EchoCanceller
from kefu.ai_bridge.frontend.chain import CallerFrontEnd
from kefu.ai_bridge.frontend.denoise import Denoiser
from kefu.ai_bridge.listen.endpoint import EndpointConfig
from kefu.ai_bridge.listen.listener import (
    EndOfTurn,
    FinalTranscript,
    Listener,
    ListenEvent,
    SpeechStarted,
)
from kefu.ai_bridge.listen.vad import SileroVad
from kefu.ai_bridge.services import APOLOGY, NOT_CAUGHT, AiServices, AiSettings
from kefu.ai_bridge.trace import TurnTracer
from kefu.ai_bridge.tracks import BotAudioTrack, CallerAudioTap

__all__ = ["AI_UNAVAILABLE", "BargeIn", "CallAgent", "HandoffRequested", "Utterance"]

log = structlog.get_logger(__name__)

AI_UNAVAILABLE = "ai unavailable"


@dataclass(frozen=True, slots=True)
class HandoffRequested:
    """The call should go to a human (SIP REFER / workbench alert)."""

    call_id: str
    """Call to transfer."""
    reason: str
    """``ai unavailable``, ``caller asked``, ``ai error``."""
    detail: str = ""
    """What failed, for the workbench and logs."""
    at: float = 0.0
    """Loop time the request was made (after the bot's last words were played)."""


@dataclass(frozen=True, slots=True)
class BargeIn:
    """The caller interrupted the bot."""

    call_id: str
    """Call interrupted."""
    turn_id: int
    """The caller's turn that interrupted."""
    speech_start: float
    """Loop time the caller's voice began."""
    paused_at: float
    """Loop time the bot's output was paused."""
    stop_latency_ms: float
    """``paused_at - speech_start`` (budget: 250 ms)."""
    flushed_ms: float
    """Bot audio thrown away."""


@dataclass(frozen=True, slots=True)
class Utterance:
    """A line of the live transcript."""

    call_id: str
    """Call it belongs to."""
    turn_id: int
    """Caller turn it belongs to (0: the greeting)."""
    speaker: str
    """``caller`` or ``bot``."""
    text: str
    """What was said."""
    lang: str
    """Language of ``text``."""
    at: float
    """Loop time it became known."""


@dataclass(slots=True)
class _Barge:
    turn_id: int
    speech_start: float
    paused_at: float
    flushed: bool = False


class CallAgent:
    """The AI side of one call: reads ``inbound``, plays ``outbound``, publishes events."""

    def __init__(
        self,
        services: AiServices,
        call_id: str,
        inbound: MediaStreamTrack,
        *,
        publish: Callable[[object], None],
        settings: AiSettings | None = None,
        lang: str | None = None,
        paced_output: bool = True,
    ) -> None:
        self.services = services
        self.call_id = call_id
        self.inbound = inbound
        self.publish = publish
        self.settings = settings or services.settings
        self.lang = "zh" if (lang or self.settings.language).startswith("zh") else "en"
        self.outbound = BotAudioTrack(paced=paced_output, on_mark=self._on_mark)
        self.tracer = TurnTracer(
            call_id,
            metrics=services.metrics,
            interaction_log=services.interaction_log,
            publish=publish,
        )
        self.listener: Listener | None = None
        self.barge_ins: list[BargeIn] = []
        self.handoff: HandoffRequested | None = None
        self.unavailable: str | None = None
        """Why this call is not served by the AI (None while it is)."""
        self.backchannels = 0
        self._log = log.bind(call_id=call_id)
        self._tap: CallerAudioTap | None = None
        self.frontend: CallerFrontEnd | None = None
        self._events_task: asyncio.Task[None] | None = None
        self._answer_task: asyncio.Task[None] | None = None
        self._barge: _Barge | None = None
        self._ignored: set[int] = set()
        self._empties = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the per-call parts, queue the greeting and start listening."""
        loop = asyncio.get_running_loop()
        reason = self.services.unavailable(self.lang)
        vad: SileroVad | None = None
        if reason is None:
            vad = await loop.run_in_executor(None, SileroVad)
            if not vad.ready:
                reason = f"vad: {vad.error}"
        if reason is not None:
            self.unavailable = reason
            self._log.error("ai_unavailable", error=reason)
            self._run_answer(self._apologize(reason))
            return
        asr = self.services.asr_for(self.lang)
        assert asr is not None and vad is not None
        partials = None
        if self.settings.partials:
            from kefu.ai_bridge.listen.asr.partials import PocketsphinxPartials

            partials = await loop.run_in_executor(None, PocketsphinxPartials)
        self.listener = Listener(
            asr,
            config=EndpointConfig(end_silence_ms=self.settings.end_silence_ms),
            vad=vad,
            partials=partials if partials is not None and partials.ready else None,
            asr_language=self.lang,
            hotwords=self.settings.hotwords,
            clock=loop.time,
            call_id=self.call_id,
        )
        greeting = self.settings.greeting_zh if self.lang == "zh" else self.settings.greeting_en
        self._run_answer(self._say(greeting, 0))
        if self.settings.denoise or self.settings.echo_cancel:
            self.frontend = await loop.run_in_executor(None, self._build_frontend)
            if self.frontend.echo is not None:
                self.outbound.on_frame = self.frontend.push_far
        self._tap = CallerAudioTap(
            self.inbound, self._on_audio, call_id=self.call_id, frontend=self.frontend
        )
        self._tap.start()
        self._events_task = loop.create_task(self._run_events(), name=f"agent:{self.call_id}")

    def _build_frontend(self) -> CallerFrontEnd:
        """Denoise and/or cancel the bot's echo before the caller's audio reaches the VAD."""
        frontend = CallerFrontEnd(
            denoiser=Denoiser(16000, 16000, call_id=self.call_id)
            if self.settings.denoise
            else None,
            echo=EchoCanceller(16000, call_id=self.call_id) if self.settings.echo_cancel else None,
        )
        if not frontend.ready:
            self._log.warning("frontend_degraded", error=frontend.error)
        return frontend

    async def close(self) -> None:
        """Stop listening and speaking; finish open traces; forget the dialog state."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = [t for t in (self._answer_task, self._events_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._tap is not None:
            await self._tap.stop()
        if self.frontend is not None:
            self.frontend.close()
        if self.listener is not None:
            await self.listener.close()
        for turn_id in self.tracer.open_turns():
            self.tracer.finish(turn_id)
        self.outbound.stop()
        if self.services.dialog is not None:
            await self.services.dialog.end_call(self.call_id)
        if self.services.interaction_log is not None:
            await self.services.interaction_log.flush()

    # -- audio in --------------------------------------------------------------------------

    def _on_audio(self, pcm16k: np.ndarray, now: float) -> None:
        listener = self.listener
        if listener is None or self._closed:
            return
        listener.feed(pcm16k, now)
        self._check_barge()
        deadline = listener.get_timer()
        if deadline != self._timer_at:
            # The endpointer's timer only matters when audio stops (hold, DTX).
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = (
                None
                if deadline is None
                else asyncio.get_running_loop().call_at(deadline, self._on_timer)
            )

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        if self.listener is not None and not self._closed:
            self.listener.handle_timer(asyncio.get_running_loop().time())

    # -- listener events -------------------------------------------------------------------

    async def _run_events(self) -> None:
        assert self.listener is not None
        events = self.listener.events
        while True:
            event: ListenEvent = await events.get()
            try:
                if isinstance(event, SpeechStarted):
                    self._on_speech_started(event)
                elif isinstance(event, EndOfTurn):
                    self._on_end_of_turn(event)
                elif isinstance(event, FinalTranscript):
                    self._on_final(event)
            except Exception:  # one bad event must not stop the call's loop
                self._log.exception("agent_event_failed", event=type(event).__name__)

    def _busy(self) -> bool:
        task = self._answer_task
        return (task is not None and not task.done()) or self.outbound.queued_samples > 0

    def _on_speech_started(self, ev: SpeechStarted) -> None:
        if not self.settings.barge_in or self._barge is not None or not self._busy():
            return
        now = asyncio.get_running_loop().time()
        self.outbound.pause()
        self._barge = _Barge(ev.turn_id, ev.at, now)
        self._log.info("barge_in_paused", turn_id=ev.turn_id, ms=round((now - ev.at) * 1000))

    def _check_barge(self) -> None:
        b = self._barge
        if b is None or b.flushed or self.listener is None:
            return
        ep = self.listener.endpointer
        long_enough = ep.speech_audio_s >= self.settings.barge_in_min_ms / 1000
        # Strong voice right now, not the end-threshold hangover that trails a short "uh-huh".
        voiced = ep.last_probability >= ep.config.start_threshold
        if long_enough and voiced and ep.turn_id == b.turn_id and ep.state == "speech":
            self._barge_in(b)

    def _barge_in(self, b: _Barge) -> None:
        b.flushed = True
        dropped = self.outbound.flush()
        self.outbound.resume()
        if self._answer_task is not None:
            self._answer_task.cancel()
        for turn_id in self.tracer.open_turns():
            if turn_id != b.turn_id:
                self.tracer.finish(turn_id, barge_in=True)
        event = BargeIn(
            self.call_id,
            b.turn_id,
            b.speech_start,
            b.paused_at,
            round((b.paused_at - b.speech_start) * 1000, 1),
            round(1000 * dropped / self.outbound.sample_rate, 1),
        )
        self.barge_ins.append(event)
        if self.services.metrics is not None:
            self.services.metrics.observe_barge_in(b.paused_at - b.speech_start)
        self._log.info(
            "barge_in",
            turn_id=b.turn_id,
            stop_latency_ms=event.stop_latency_ms,
            flushed_ms=event.flushed_ms,
        )
        self.publish(event)

    def _on_end_of_turn(self, ev: EndOfTurn) -> None:
        b = self._barge
        if b is not None and b.turn_id == ev.turn_id:
            self._barge = None
            if not b.flushed:
                if ev.short:
                    self.outbound.resume()
                    self._ignored.add(ev.turn_id)
                    self.backchannels += 1
                    self._log.info("backchannel", turn_id=ev.turn_id)
                    return
                self._barge_in(b)
        marks = self.tracer.marks(ev.turn_id)
        marks.speech_end = ev.speech_end_at
        marks.end_of_turn = ev.at

    def _on_final(self, ev: FinalTranscript) -> None:
        if ev.turn_id in self._ignored:
            self._ignored.discard(ev.turn_id)
            self.tracer.discard(ev.turn_id)
            return
        text = ev.text.strip()
        if not text:
            self.tracer.discard(ev.turn_id)
            self._empties += 1
            if self._empties >= 2 and not self._busy():
                self._empties = 0
                self._run_answer(self._say(NOT_CAUGHT[self.lang], None))
            return
        self._empties = 0
        marks = self.tracer.marks(ev.turn_id)
        marks.asr_final = ev.at
        marks.transcript = text
        marks.lang = ev.language
        marks.decode_ms = ev.decode_ms
        marks.speculative = ev.speculative
        self.publish(Utterance(self.call_id, ev.turn_id, "caller", text, ev.language, ev.at))
        self._run_answer(self._answer(ev.turn_id, text))

    # -- speaking --------------------------------------------------------------------------

    def _run_answer(self, coro: object) -> None:
        """Start the one answer task, replacing (cancelling) any answer still in flight."""
        if self._answer_task is not None and not self._answer_task.done():
            self._answer_task.cancel()
        self._answer_task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]

    async def _answer(self, turn_id: int, text: str) -> None:
        loop = asyncio.get_running_loop()
        dialog = self.services.dialog
        assert dialog is not None
        marks = self.tracer.marks(turn_id)
        reply = None
        spoken: list[str] = []
        try:
            reply = await dialog.respond(self.call_id, text, lang=self.lang)
            marks.answer_chosen = loop.time()
            marks.intent, marks.source = reply.intent, reply.source
            async for sentence in reply.sentences:
                await self._speak(sentence, reply.lang, turn_id)
                spoken.append(sentence)
                marks.answer_text = " ".join(spoken)
            bot_line = " ".join(spoken)
            self.publish(Utterance(self.call_id, turn_id, "bot", bot_line, reply.lang, loop.time()))
            handoff = ("caller asked", reply.source) if reply.handoff else None
            await self.outbound.put(
                _EMPTY, self.outbound.sample_rate, mark=("end", turn_id, handoff)
            )
        except asyncio.CancelledError:
            # Replaced by a newer turn (a barge-in has already finished the trace).
            self.tracer.finish(turn_id)
            raise
        except Exception as exc:  # the brain or the voice broke mid-call: a human takes over
            self._log.exception("answer_failed", turn_id=turn_id)
            self.tracer.finish(turn_id)
            await self._apologize(f"{type(exc).__name__}: {exc}", reason="ai error")
        finally:
            if reply is not None:
                await reply.aclose()

    async def _speak(self, text: str, lang: str, turn_id: int | None) -> None:
        """Synthesize ``text`` into the outbound queue; the first chunk of a turn is marked."""
        voice = self.services.voice
        if voice is None:
            raise RuntimeError("no voice loaded")
        marks = self.tracer.marks(turn_id) if turn_id else None
        gen = voice.synthesize(text, lang=lang)
        async with contextlib.aclosing(gen):  # type: ignore[type-var]
            first = True
            async for chunk in gen:
                pcm = chunk.pcm
                if first:
                    # piper opens with ~60 ms of near-silence: the caller is waiting for it.
                    pcm = _trim_leading_quiet(pcm)
                    first = False
                mark = None
                if marks is not None and marks.first_tts_audio is None:
                    marks.first_tts_audio = asyncio.get_running_loop().time()
                    mark = ("start", turn_id)
                await self.outbound.put(pcm, chunk.sample_rate, mark=mark)

    async def _say(self, text: str, turn_id: int | None) -> None:
        """A fixed phrase (greeting, "didn't catch that"): no dialog, no trace."""
        try:
            await self._speak(text, self.lang, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log.warning("say_failed", error=str(exc))
            return
        self.publish(
            Utterance(
                self.call_id,
                turn_id or 0,
                "bot",
                text,
                self.lang,
                asyncio.get_running_loop().time(),
            )
        )

    async def _apologize(self, detail: str, *, reason: str = AI_UNAVAILABLE) -> None:
        """Apologize with whatever voice works (else a tone); hand off once it was played."""
        try:
            await self._speak(APOLOGY[self.lang], self.lang, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log.warning("apology_voice_failed", error=str(exc))
            await self.outbound.put(_tone(), self.outbound.sample_rate)
        await self.outbound.put(_EMPTY, self.outbound.sample_rate, mark=("handoff", reason, detail))

    # -- marks from the outbound track -----------------------------------------------------

    def _on_mark(self, mark: object, at: float) -> None:
        if not isinstance(mark, tuple):
            return
        kind = mark[0]
        if kind == "start":
            turn_id = mark[1]
            if self.tracer.is_open(turn_id):
                self.tracer.marks(turn_id).first_packet = at
        elif kind == "end":
            _, turn_id, handoff = mark
            self.tracer.finish(turn_id)
            if handoff is not None:
                self._request_handoff(handoff[0], handoff[1], at)
        elif kind == "handoff":
            self._request_handoff(mark[1], mark[2], at)

    def _request_handoff(self, reason: str, detail: str, at: float) -> None:
        event = HandoffRequested(self.call_id, reason, detail, at)
        self.handoff = event
        self._log.info("handoff_requested", reason=reason, detail=detail)
        self.publish(event)


_EMPTY = np.zeros(0, np.int16)


def _trim_leading_quiet(pcm: np.ndarray, threshold: int = 300, keep: int = 64) -> np.ndarray:
    """Drop leading samples below ``threshold`` (about -40 dBFS), keeping a short fade-in."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) >= threshold)
    if loud.size == 0:
        return pcm
    return pcm[max(0, int(loud[0]) - keep) :]


def _tone(rate: int = 22050) -> np.ndarray:
    """Two short 440 Hz beeps: the apology when no voice works at all."""
    t = np.arange(int(0.25 * rate)) / rate
    beep = (6000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    gap = np.zeros(int(0.15 * rate), np.int16)
    return np.concatenate((beep, gap, beep))
