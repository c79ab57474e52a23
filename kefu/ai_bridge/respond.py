"""The bot's half of a call: turn stages → dialog → speech → speech taps → the outbound track.

One answer task at a time (a newer one cancels the older). Latency marks go to the call's
:class:`TurnTracer`; a turn's trace is finished when its audio has been played (an end marker
reaching the sender), when it is cancelled, or when it fails. A stage the pipeline does not
have is skipped: no speech stage means the answer is published as text only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.emotion.call import CallEmotion, reply_kind
from kefu.ai_bridge.emotion.values import CallerEmotion
from kefu.ai_bridge.events import AI_UNAVAILABLE, HandoffRequested, Utterance
from kefu.ai_bridge.pipeline import Pipeline
from kefu.ai_bridge.services import APOLOGY
from kefu.ai_bridge.stages import CallerTurn, SpeechStage, SpeechTap
from kefu.ai_bridge.trace import EmotionReading, TurnTracer
from kefu.ai_bridge.tracks import BotAudioTrack

__all__ = ["Responder"]

log = structlog.get_logger(__name__)

_EMPTY = np.zeros(0, np.int16)


class Responder:
    """Speaks for one call into ``outbound``; ``pipeline`` may be set once it is built."""

    def __init__(
        self,
        call_id: str,
        lang: str,
        outbound: BotAudioTrack,
        tracer: TurnTracer,
        publish: Callable[[object], None],
    ) -> None:
        self.call_id = call_id
        self.lang = lang
        self.outbound = outbound
        self.tracer = tracer
        self.publish = publish
        self.pipeline: Pipeline | None = None
        """The call's stages (turn stages, dialog, speech taps) once built."""
        self.speech: SpeechStage | None = None
        """The voice (the pipeline's speech stage; before it is built, the greeting's)."""
        self.text_only = False
        """No speech stage on purpose: answers are published, not spoken."""
        self.emotion_sinks: tuple[Callable[[str], None], ...] = ()
        """Told the tone of each reply before it is synthesized (the avatar's face)."""
        self.taps: tuple[SpeechTap, ...] = ()
        """Speech taps bound to this call's media, after the pipeline's (the room avatar:
        it needs the outbound track and the room, and sees the greeting too)."""
        self.record: Callable[[str, str, str], None] | None = None
        """``(speaker, text, lang)`` into the call's dialog history: the answers spoken."""
        self.task: asyncio.Task[None] | None = None
        self.handoff: HandoffRequested | None = None
        self.emotion: CallEmotion | None = None
        """The call's emotion (caller per turn, reply tone, escalation); None: off."""
        self._log = log.bind(call_id=call_id)
        outbound.on_mark = self._on_mark

    @property
    def busy(self) -> bool:
        """An answer is in flight or the bot's audio is queued."""
        task = self.task
        return (task is not None and not task.done()) or self.outbound.queued_samples > 0

    def run(self, coro: Coroutine[Any, Any, None]) -> None:
        """Start the one answer task, replacing (cancelling) any answer still in flight."""
        self.cancel()
        self.task = asyncio.get_running_loop().create_task(coro)

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # -- answers ---------------------------------------------------------------------------

    async def answer(self, turn: CallerTurn) -> None:
        pipeline = self.pipeline
        assert pipeline is not None and pipeline.dialog is not None
        loop = asyncio.get_running_loop()
        turn_id = turn.turn_id
        marks = self.tracer.marks(turn_id)
        reply = None
        spoken: list[str] = []
        emotion = self.emotion
        # The caller's emotion is estimated on its own thread while the dialog works.
        feeling = emotion.begin(turn_id, turn.text, turn.lang) if emotion is not None else None
        try:
            for stage in pipeline.turn_stages:
                turn = await stage(turn)
            reply = await pipeline.dialog.respond(turn)
            marks.answer_chosen = loop.time()
            marks.intent, marks.source = reply.intent, reply.source
            tone = "neutral"
            if emotion is not None and feeling is not None:
                heard = await _settled(feeling)
                tone = emotion.tone(heard, reply_kind(reply.source, reply.intent))
                marks.caller_emotion = EmotionReading.of(heard) if heard is not None else None
                marks.reply_emotion = tone
            async for sentence in reply.sentences:
                await self.speak(sentence, reply.lang, turn_id, emotion=tone)
                spoken.append(sentence)
                marks.answer_text = " ".join(spoken)
            handoff = ("caller asked", reply.source) if reply.handoff else None
            escalation = (
                emotion.after_reply(turn_id, reply.source, reply.handoff)
                if emotion is not None
                else None
            )
            if escalation is not None:
                marks.escalation = escalation.reason
                if handoff is None:  # the caller did not ask: offer the colleague now
                    line = ESCALATE[escalation.reason][reply.lang]
                    await self.speak(line, reply.lang, turn_id, emotion="sad")
                    spoken.append(line)
                    marks.answer_text = " ".join(spoken)
                    handoff = ("escalation", escalation.reason)
            bot_line = " ".join(spoken)
            self.publish(Utterance(self.call_id, turn_id, "bot", bot_line, reply.lang, loop.time()))
            if self.record is not None:
                self.record("bot", bot_line, reply.lang)
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
            await self.apologize(f"{type(exc).__name__}: {exc}", reason="ai error")
        finally:
            if reply is not None:
                await reply.aclose()

    async def speak(
        self, text: str, lang: str, turn_id: int | None, *, emotion: str = "neutral"
    ) -> None:
        """Synthesize ``text`` into the outbound queue; the first chunk of a turn is marked.

        Without a speech stage (text-only) nothing is queued: the text is published by the
        caller of this method.
        """
        speech = self.speech
        if speech is None:
            if self.text_only:
                return
            raise RuntimeError("no voice loaded")
        taps = (*(self.pipeline.speech_taps if self.pipeline is not None else ()), *self.taps)
        for sink in self.emotion_sinks:
            sink(emotion)
        marks = self.tracer.marks(turn_id) if turn_id else None
        loop = asyncio.get_running_loop()
        async for chunk in speech.synthesize(text, lang=lang, emotion=emotion):
            for tap in taps:
                chunk = tap(chunk, turn_id)
            mark = None
            if marks is not None and marks.first_tts_audio is None:
                marks.first_tts_audio = loop.time()
                mark = ("start", turn_id)
            await self.outbound.put(chunk.pcm, chunk.sample_rate, mark=mark)

    async def say(self, text: str, turn_id: int | None, *, lang: str | None = None) -> None:
        """A fixed phrase (greeting, "didn't catch that"): no dialog, no trace; in the call's
        language unless ``lang`` says."""
        lang = lang or self.lang
        try:
            await self.speak(text, lang, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log.warning("say_failed", error=str(exc))
            return
        loop = asyncio.get_running_loop()
        self.publish(Utterance(self.call_id, turn_id or 0, "bot", text, lang, loop.time()))

    async def apologize(self, detail: str, *, reason: str = AI_UNAVAILABLE) -> None:
        """Apologize with whatever voice works (else a tone); hand off once it was played."""
        try:
            await self.speak(APOLOGY[self.lang], self.lang, None)
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


def _tone(rate: int = 22050) -> NDArray[np.int16]:
    """Two short 440 Hz beeps: the apology when no voice works at all."""
    t = np.arange(int(0.25 * rate)) / rate
    beep = (6000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    gap = np.zeros(int(0.15 * rate), np.int16)
    return np.concatenate((beep, gap, beep))


ESCALATE = {
    "negative_emotion": {
        "en": "I'm sorry this has been so frustrating. Let me get a colleague for you right away.",
        "zh": "非常抱歉让您不愉快了，我马上为您转接人工客服。",
    },
    "failed_answers": {
        "en": "I'm sorry I couldn't help with that. Let me connect you with a colleague.",
        "zh": "抱歉没能帮到您，我为您转接人工客服。",
    },
    "explicit_request": {
        "en": "Of course. Let me connect you with a colleague.",
        "zh": "好的，我为您转接人工客服。",
    },
}
"""What the bot says when it escalates a call the caller did not ask to hand over."""


async def _settled(task: asyncio.Task[CallerEmotion]) -> CallerEmotion | None:
    """The emotion estimate, or None if it failed (a turn never fails on emotion)."""
    try:
        return await task
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("emotion_failed", error=f"{type(exc).__name__}: {exc}")
        return None
