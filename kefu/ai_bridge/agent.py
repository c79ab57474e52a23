"""CallAgent: one call's AI, driving the stages its pipeline was composed of.

Flow: the tap feeds the caller's audio (through the front end, if any) to the listen stage;
its events come back on a control lane that never drops (:mod:`kefu.ai_bridge.lane`). A final
transcript is published and, unless a human has the call, answered by the
:class:`~kefu.ai_bridge.respond.Responder` (turn stages → dialog → speech → taps → outbound).

Who has the floor is the table of :mod:`kefu.ai_bridge.barge`: barge-in (the caller's voice
over the bot pauses its output at once; voice that lasts ``barge_in_min_ms`` flushes it and
cancels the answer; a short "uh-huh" resumes it), takeover (:meth:`CallAgent.pause`: the AI is
silenced, keeps transcribing, answers nothing) and hand-back (:meth:`CallAgent.resume`: the AI
speaks next only after the caller's next turn).

During a takeover :meth:`CallAgent.hear_agent` also transcribes the human agent
(:mod:`kefu.ai_bridge.agent_voice`). The dialog state's history
(:class:`~kefu.ai_bridge.history.HistoryWriter`) gets every line, the caller's and the agent's
during the takeover included, so the AI takes the call back with the conversation so far.

Control inputs from outside the call (pause, resume, close) are applied at once, on the
caller's stack: nothing queues them, so nothing can drop or reorder them.

When a model the call needs is not loaded, the agent speaks an apology (or, with no voice at
all, plays a tone) and publishes HandoffRequested instead of listening.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.ai_bridge.agent_voice import AgentHearing, AgentVoice
from kefu.ai_bridge.barge import Floor, FloorAction, FloorInput, FloorMachine
from kefu.ai_bridge.call_language import CallLanguage, serveable_mode
from kefu.ai_bridge.emotion.call import call_emotion
from kefu.ai_bridge.events import AI_UNAVAILABLE, BargeIn, HandoffRequested, Utterance
from kefu.ai_bridge.history import HistoryWriter
from kefu.ai_bridge.listen.listener import (
    EndOfTurn,
    FinalTranscript,
    ListenEvent,
    SpeechStarted,
    SpeechSustained,
)
from kefu.ai_bridge.pipeline import (
    Pipeline,
    PipelineSpec,
    PipelineUnavailable,
    StageContext,
    StageRegistry,
    build_pipeline,
    check_names,
    missing,
)
from kefu.ai_bridge.respond import Responder
from kefu.ai_bridge.services import NOT_CAUGHT, AiServices, AiSettings
from kefu.ai_bridge.stages import (
    CallerTurn,
    DialogStage,
    FrontEndStage,
    ListenDriver,
    ListenStage,
    VoiceSpeech,
)
from kefu.ai_bridge.trace import TurnTracer
from kefu.ai_bridge.tracks import BotAudioTrack, CallerAudioTap
from kefu.ai_bridge.unheard import UnheardTurns

if TYPE_CHECKING:
    from kefu.ai_bridge.avatar.stream import AvatarStream

__all__ = [
    "AI_UNAVAILABLE",
    "BargeIn",
    "CallAgent",
    "HandoffRequested",
    "PipelineSpec",
    "Utterance",
]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Held:
    turn_id: int
    """The caller turn that spoke over the bot."""
    speech_start: float
    """Loop time its voice began."""
    paused_at: float
    """Loop time the bot's output was paused."""


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
        pipeline: PipelineSpec | None = None,
        registry: StageRegistry | None = None,
    ) -> None:
        self.services = services
        self.call_id = call_id
        self.inbound = inbound
        self.publish = publish
        self.settings = settings or services.settings
        self.language = CallLanguage.start(
            serveable_mode(services, lang or self.settings.language),
            services.voice.language_of(self.settings.greeting_auto[0])
            if services.voice is not None and self.settings.greeting_auto
            else "zh",
        )
        """The call's language mode and the language it is answered in (:mod:`.call_language`)."""
        self.spec = pipeline or PipelineSpec.from_settings(self.settings)
        """Which stages this call runs."""
        self.registry = registry
        check_names(self.spec, registry)  # a misspelt stage fails here, not mid-call
        self.outbound = BotAudioTrack(paced=paced_output)
        self.tracer = TurnTracer(call_id, publish=publish)
        self.responder = Responder(call_id, self.lang, self.outbound, self.tracer, publish)
        self.history = HistoryWriter(call_id, self._dialog)
        """Lines the dialog did not answer itself, into its state (:mod:`.history`)."""
        self.responder.record = self.history.add
        self.pipeline: Pipeline | None = None
        self.floor = FloorMachine()
        """Barge-in and takeover state (:mod:`kefu.ai_bridge.barge`)."""
        self.barge_ins: list[BargeIn] = []
        self.unavailable: str | None = None
        """Why this call is not served by the AI (None while it is)."""
        self.backchannels = 0
        self._log = log.bind(call_id=call_id)
        self._tap: CallerAudioTap | None = None
        self._driver: ListenDriver | None = None
        self._hearing = AgentHearing(
            StageContext(services, self.settings, call_id, self.language.mode),
            publish=publish,
            turn_id=self._caller_turn,
            record=self.history.add,
        )
        self._events_task: asyncio.Task[None] | None = None
        self.avatar: AvatarStream | None = None
        """The room avatar's weights stream (:meth:`attach_avatar`); None: no avatar."""
        self._held: _Held | None = None
        self._ignored: set[int] = set()  # backchannels: transcript dropped
        self._answer_after = 0  # turns up to this one began before the hand-back: not answered
        self._unheard = UnheardTurns()
        self._closed = False

    # -- what others read ------------------------------------------------------------------

    @property
    def listener(self) -> ListenStage | None:
        return self.pipeline.listen if self.pipeline is not None else None

    @property
    def frontend(self) -> FrontEndStage | None:
        return self.pipeline.frontend if self.pipeline is not None else None

    @property
    def agent_voice(self) -> AgentVoice | None:
        """The human agent's voice being transcribed (:meth:`hear_agent`), if any."""
        return self._hearing.voice

    def _dialog(self) -> DialogStage | None:
        return self.pipeline.dialog if self.pipeline is not None else None

    def _caller_turn(self) -> int:
        return self.listener.turn_id if self.listener is not None else 0

    @property
    def handoff(self) -> HandoffRequested | None:
        return self.responder.handoff

    @property
    def paused(self) -> bool:
        """A human agent has the call (:meth:`pause`)."""
        return self.floor.state is Floor.PAUSED

    @property
    def busy(self) -> bool:
        """An answer is in flight or the bot's audio is queued."""
        return self.responder.busy

    @property
    def _answer_task(self) -> asyncio.Task[None] | None:
        return self.responder.task

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Queue the greeting, compose the call's stages and start listening."""
        loop = asyncio.get_running_loop()
        spec, services = self.spec, self.services
        reason = missing(services, spec, self.language.mode)
        if reason is not None:
            self._degrade(reason)
            return
        self.responder.text_only = not spec.speak
        if spec.speak and services.voice is not None:
            self.responder.speech = VoiceSpeech(services.voice)
        if spec.answer and not self.paused:  # a human may have taken the call already
            self.responder.run(self._greet())
        ctx = StageContext(services, self.settings, self.call_id, self.language.mode)
        try:
            pipeline = await build_pipeline(ctx, spec, registry=self.registry, clock=loop.time)
        except PipelineUnavailable as exc:
            self.outbound.flush()  # the greeting's start, if any
            self._degrade(str(exc))
            return
        if self._closed:
            await pipeline.close(self.call_id)
            return
        self.pipeline = self.responder.pipeline = pipeline
        self.responder.speech = pipeline.speech
        self.responder.emotion = call_emotion(services, self.settings, self.call_id, self.publish)
        if pipeline.frontend is not None:
            self.outbound.on_frame = pipeline.frontend.push_far
        self._driver = ListenDriver(pipeline.listen)
        self._tap = CallerAudioTap(
            self.inbound, self._driver.feed, call_id=self.call_id, frontend=pipeline.frontend
        )
        self._tap.start()
        self._events_task = loop.create_task(self._run_events(), name=f"agent:{self.call_id}")

    async def _greet(self) -> None:
        s, voice = self.settings, self.services.voice
        if self.language.mode != "auto" or voice is None:
            await self.responder.say(s.greeting_zh if self.lang == "zh" else s.greeting_en, 0)
            return
        for line in s.greeting_auto:  # each line in its own language's voice
            await self.responder.say(line, 0, lang=voice.language_of(line))

    def _follow_language(self, turn_id: int, language: str, text: str) -> None:
        """An ``auto`` call hears the caller's language (:mod:`.call_language`)."""
        state = self.language
        if state.observe(language, text):
            self.responder.lang = state.current
            self._log.info(
                "call_language", turn_id=turn_id, language=state.current, switches=state.switches
            )
        if self.listener is not None:
            self.listener.asr_language = state.hint

    @property
    def lang(self) -> str:
        """The language the call is answered in now (``en`` or ``zh``)."""
        return self.language.current

    def attach_avatar(self, avatar: AvatarStream) -> None:
        """Drive ``avatar`` from this call's speech and floor (before :meth:`start`)."""
        self.avatar, self.responder.taps = avatar, (avatar.tap,)
        self.responder.emotion_sinks = (avatar.reply_emotion,)

    def _degrade(self, reason: str) -> None:
        self.unavailable = reason
        self._log.error("ai_unavailable", error=reason)
        voice = self.services.voice
        self.responder.speech = VoiceSpeech(voice) if voice is not None else None
        self.responder.text_only = False
        if not self.paused:
            self.responder.run(self.responder.apologize(reason))

    async def close(self) -> None:
        """Hang up: stop listening and speaking; finish open traces; forget the dialog state."""
        if self._closed:
            return
        self._closed = True
        self.floor.apply(FloorInput.HANGUP, self._act)
        if self._driver is not None:
            self._driver.close()
        self.responder.cancel()
        tasks = [t for t in (self.responder.task, self._events_task) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._tap is not None:
            await self._tap.stop()
        await self._hearing.close()
        await self.history.close()  # before the state is forgotten: nothing writes it back
        for turn_id in self.tracer.open_turns():
            self.tracer.finish(turn_id)
        self.outbound.stop()
        if self.avatar is not None:
            await self.avatar.close()
        if self.pipeline is not None:
            await self.pipeline.close(self.call_id)
        elif self.services.dialog is not None:
            await self.services.dialog.end_call(self.call_id)
        if self.services.interaction_log is not None:
            await self.services.interaction_log.flush()

    # -- takeover --------------------------------------------------------------------------

    def pause(self) -> None:
        """A human agent takes the call: the AI stops speaking at once (its queued audio and
        the answer in flight are dropped) and answers nothing until :meth:`resume`; it keeps
        transcribing and publishing what the caller says. Raises
        :class:`kefu.errors.InvalidTransition` when already paused or closed."""
        self.floor.apply(FloorInput.TAKEOVER, self._act)
        self._log.info("agent_paused")

    def resume(self) -> None:
        """The human hands the call back: the AI listens and answers again, from the caller's
        next turn on. A turn begun before the hand-back stays unanswered, even when its
        transcript arrives after it (the caller spoke to the human). Raises
        :class:`kefu.errors.InvalidTransition` when not paused."""
        self.floor.apply(FloorInput.HANDBACK, self._act)
        self._answer_after = self._caller_turn()
        self._unheard.reset()
        self._log.info("agent_resumed", answer_after=self._answer_after)

    def hear_agent(self, track: MediaStreamTrack, who: str) -> None:
        """Transcribe a human agent's voice: ``track`` is any audio track (any rate, layout),
        e.g. the mix of the agents the caller hears; ``who`` names them in the logs. Each
        final is published as an :class:`Utterance` with speaker ``agent`` (``turn_id``: the
        caller's current turn, 0 before any) and added to the dialog history; none is ever
        answered. Replaces a track already being heard; a no-op once the call is closed."""
        if not self._closed:
            self._hearing.hear(track, who)

    def stop_hearing_agent(self) -> None:
        """Stop transcribing the human agent (idempotent; :meth:`close` does it too)."""
        self._hearing.stop()

    # -- the control lane ------------------------------------------------------------------

    async def _run_events(self) -> None:
        assert self.listener is not None
        events = self.listener.events
        while True:
            event: ListenEvent = await events.get()
            try:
                if isinstance(event, SpeechStarted):
                    self._on_speech_started(event)
                elif isinstance(event, SpeechSustained):
                    self._on_sustained(event)
                elif isinstance(event, EndOfTurn):
                    self._on_end_of_turn(event)
                elif isinstance(event, FinalTranscript):
                    self._on_final(event)
            except Exception:  # one bad event must not stop the call's loop
                self._log.exception("agent_event_failed", event=type(event).__name__)

    def _on_speech_started(self, ev: SpeechStarted) -> None:
        self._unheard.started(ev.turn_id, ev.at)
        if self.avatar is not None:
            self.avatar.caller_started()
        over_bot = self.settings.barge_in and not self.paused and self.busy
        self.floor.apply(
            FloorInput.VOICE_OVER_BOT if over_bot else FloorInput.VOICE,
            lambda a: self._act(a, ev.turn_id, ev.at),
        )

    def _on_sustained(self, ev: SpeechSustained) -> None:
        self.floor.apply(FloorInput.SUSTAINED, lambda a: self._act(a, ev.turn_id))

    def _on_end_of_turn(self, ev: EndOfTurn) -> None:
        if self.avatar is not None:
            self.avatar.caller_stopped()
        self._unheard.ended(ev.turn_id, ev.speech_end_at)
        if self.responder.emotion is not None and ev.audio is not None and not ev.short:
            self.responder.emotion.hold_audio(ev.turn_id, ev.audio)
        action = self.floor.apply(
            FloorInput.END_SHORT if ev.short else FloorInput.END,
            lambda a: self._act(a, ev.turn_id),
        )
        if action is FloorAction.BACKCHANNEL:
            return
        marks = self.tracer.marks(ev.turn_id)
        marks.speech_end = ev.speech_end_at
        marks.end_of_turn = ev.at
        marks.end_reason = ev.reason

    def _act(self, action: FloorAction, turn_id: int = 0, at: float = 0.0) -> None:
        """Carry out what the floor table says (before it moves)."""
        if self.avatar is not None:
            self.avatar.on_floor(action)  # the mouth follows the audio: rest, close, resume
        if action is FloorAction.HOLD:
            self.outbound.pause()
            held = self._held = _Held(turn_id, at, asyncio.get_running_loop().time())
            self._log.info(
                "barge_in_paused",
                turn_id=turn_id,
                ms=round((held.paused_at - held.speech_start) * 1000),
            )
        elif action is FloorAction.BARGE_IN:
            self._barge_in()
        elif action is FloorAction.BACKCHANNEL:
            self._held = None
            self.outbound.resume()
            self._ignored.add(turn_id)
            self.backchannels += 1
            self._log.info("backchannel", turn_id=turn_id)
        elif action is FloorAction.SILENCE:
            self._held = None
            self.outbound.flush()
            self.outbound.resume()
            self.responder.cancel()

    def _barge_in(self) -> None:
        held, self._held = self._held, None
        assert held is not None
        dropped = self.outbound.flush()
        self.outbound.resume()
        self.responder.cancel()
        for turn_id in self.tracer.open_turns():
            if turn_id != held.turn_id:
                self.tracer.finish(turn_id, barge_in=True)
        stop_s = held.paused_at - held.speech_start
        event = BargeIn(
            self.call_id,
            held.turn_id,
            held.speech_start,
            held.paused_at,
            round(stop_s * 1000, 1),
            round(1000 * dropped / self.outbound.sample_rate, 1),
        )
        self.barge_ins.append(event)
        self._log.info(
            "barge_in",
            turn_id=held.turn_id,
            stop_latency_ms=event.stop_latency_ms,
            flushed_ms=event.flushed_ms,
        )
        self.publish(event)

    def _on_final(self, ev: FinalTranscript) -> None:
        turn_id = ev.turn_id
        if turn_id in self._ignored:
            self._ignored.discard(turn_id)
            self.tracer.discard(turn_id)
            return
        dialog = self._dialog()
        human_turn = turn_id <= self._answer_after  # begun before the hand-back
        answering = dialog is not None and not (human_turn or self.paused)
        text = ev.text.strip()
        if not text:
            self.tracer.discard(turn_id)
            if answering and self._unheard.ask_again(turn_id) and not self.busy:
                self._log.info("asked_to_repeat", turn_id=turn_id)
                self.responder.run(self.responder.say(NOT_CAUGHT[self.lang], None))
            return
        self._unheard.heard(turn_id)
        self.publish(Utterance(self.call_id, turn_id, "caller", text, ev.language, ev.at))
        if not answering:
            self.tracer.discard(turn_id)  # nobody answers it: no turn trace
            if dialog is not None:  # said to the human: part of the conversation all the same
                self.history.add("caller", text, ev.language)
            return
        self._follow_language(turn_id, ev.language, text)
        marks = self.tracer.marks(turn_id)
        marks.asr_final = ev.at
        marks.transcript = text
        marks.lang = ev.language
        marks.decode_ms = ev.decode_ms
        marks.speculative = ev.speculative
        turn = CallerTurn(self.call_id, turn_id, text, self.lang, ev.at)
        self.responder.run(self.responder.answer(turn))
