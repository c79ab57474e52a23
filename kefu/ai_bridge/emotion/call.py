"""One call's emotion: the caller's per turn, the reply's tone, and when to escalate.

The agent keeps each turn's audio (:meth:`CallEmotion.hold_audio`), the responder starts the
estimate when the transcript is final (:meth:`CallEmotion.begin`, on the estimator's own
thread, so it runs while the dialog chooses the answer and adds no latency of its own), picks
the reply's TTS emotion from it (:meth:`CallEmotion.tone`), and after the reply asks whether
the call should go to a human (:meth:`CallEmotion.after_reply`). Every estimate is published
as a :class:`~kefu.ai_bridge.events.CallerEmotionHeard` event and every escalation as an
:class:`~kefu.ai_bridge.events.EscalationRaised` alert.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.emotion.estimator import EmotionEstimator
from kefu.ai_bridge.emotion.policy import (
    EscalationDecision,
    EscalationPolicy,
    EscalationSettings,
    reply_emotion,
)
from kefu.ai_bridge.emotion.tracker import EmotionTracker
from kefu.ai_bridge.emotion.values import CallerEmotion
from kefu.ai_bridge.events import CallerEmotionHeard, EscalationRaised
from kefu.ai_bridge.settings import AiSettings

__all__ = ["CallEmotion", "call_emotion", "reply_kind"]

log = structlog.get_logger(__name__)

_KEEP_TURNS = 4
"""Turns whose audio waits for their transcript (older ones are dropped)."""


def reply_kind(source: str, intent: str) -> str:
    """The :data:`~kefu.ai_bridge.emotion.policy.REPLY_KINDS` entry of a dialog reply."""
    if source in ("kb", "llm"):
        return "answer"
    if source in ("fallback", "handoff", "clarify"):
        return source
    return "goodbye" if intent == "goodbye" else "greeting"


class CallEmotion:
    """The emotion state of one call (see the module doc)."""

    def __init__(
        self,
        estimator: EmotionEstimator,
        call_id: str,
        *,
        publish: Callable[[object], None],
        executor: concurrent.futures.Executor | None = None,
        escalation: EscalationSettings | None = None,
    ) -> None:
        self.estimator = estimator
        self.call_id = call_id
        self.publish = publish
        self.executor = executor
        self.tracker = EmotionTracker()
        self.policy = EscalationPolicy(escalation or EscalationSettings(), logger=log)
        self.failed_in_row = 0
        """Fallback answers in a row (the dialog did not know)."""
        self.escalated: EscalationDecision | None = None
        """The escalation that handed the call over (at most one per call)."""
        self._audio: dict[int, NDArray[np.int16]] = {}
        self._last: dict[int, CallerEmotion] = {}

    def hold_audio(self, turn_id: int, pcm16k: NDArray[np.int16]) -> None:
        """The turn's audio, kept until its transcript is final."""
        self._audio[turn_id] = pcm16k
        for old in sorted(self._audio)[:-_KEEP_TURNS]:
            del self._audio[old]

    def begin(self, turn_id: int, text: str, lang: str) -> asyncio.Task[CallerEmotion]:
        """Start estimating the caller's emotion in ``turn_id`` (off the event loop)."""
        pcm = self._audio.pop(turn_id, None)
        tracker = self.tracker

        def estimate() -> CallerEmotion:
            return self.estimator.estimate(
                text,
                lang,
                pcm,
                baseline=tracker.baseline,
                previous_valence=tracker.previous_valence,
            )

        async def run() -> CallerEmotion:
            loop = asyncio.get_running_loop()
            emotion = await loop.run_in_executor(self.executor, estimate)
            tracker.update(emotion)
            self._last[turn_id] = emotion
            self.publish(
                CallerEmotionHeard(
                    self.call_id,
                    turn_id,
                    emotion.label,
                    round(emotion.valence, 3),
                    round(emotion.arousal, 3),
                    round(emotion.confidence, 3),
                    emotion.text_label,
                    None if emotion.prosody_arousal is None else round(emotion.prosody_arousal, 3),
                    tracker.state.label,
                    loop.time(),
                )
            )
            return emotion

        return asyncio.get_running_loop().create_task(run(), name=f"emotion:{turn_id}")

    def tone(self, emotion: CallerEmotion | None, kind: str) -> str:
        """The TTS emotion of a reply of ``kind`` to this caller."""
        return reply_emotion(emotion or CallerEmotion.unknown(), kind)

    def after_reply(self, turn_id: int, source: str, explicit: bool) -> EscalationDecision | None:
        """Count the answer; the escalation to raise now, if any (once per call)."""
        self.failed_in_row = self.failed_in_row + 1 if source == "fallback" else 0
        if self.escalated is not None:
            return None
        decision = self.policy.decide(
            self.tracker.state,
            self.failed_in_row,
            explicit,
            call_id=self.call_id,
            turn_id=str(turn_id),
        )
        if not decision.escalate:
            return None
        self.escalated = decision
        emotion = self._last.get(turn_id)
        self.publish(
            EscalationRaised(
                self.call_id,
                turn_id,
                decision.reason,
                decision.negative_streak,
                decision.failed_in_row,
                self.tracker.state.label,
                round(self.tracker.state.valence, 3),
                emotion.label if emotion is not None else "neutral",
                asyncio.get_running_loop().time(),
            )
        )
        return decision


def escalation_settings(settings: AiSettings) -> EscalationSettings:
    """The ``ai.escalate_*`` settings as the policy's."""
    return EscalationSettings(
        negative_turns=settings.escalate_negative_turns,
        negative_valence=-settings.escalate_negative_valence,
        negative_confidence=settings.escalate_negative_confidence,
        failed_answers=settings.escalate_failed_answers,
    )


def call_emotion(
    services: Any, settings: AiSettings, call_id: str, publish: Callable[[object], None]
) -> CallEmotion | None:
    """A call's emotion over the process's estimator; None when ``ai.emotion`` is off or the
    estimator did not load (the call is answered in a neutral voice, never escalated on
    emotion)."""
    estimator = getattr(services, "emotion", None)
    if not settings.emotion or estimator is None or not estimator.ready:
        return None
    return CallEmotion(
        estimator,
        call_id,
        publish=publish,
        executor=getattr(services, "emotion_executor", None),
        escalation=escalation_settings(settings),
    )
