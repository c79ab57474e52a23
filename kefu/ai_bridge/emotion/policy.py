"""What the caller's emotion changes: the tone of the reply, and when to call a human.

Reply tone. The TTS renders only ``neutral happy sad angry fearful surprised``
(:mod:`kefu.ai_bridge.speak.emotion`), so the tones a human agent would choose are mapped:

==============  ============  ===========================================================
intended tone   TTS emotion   why
==============  ============  ===========================================================
calm            neutral       steady rate and pitch
reassuring      neutral       calm; "happy" would sound dismissive of a worry
empathetic      sad           slower, softer, narrower pitch (piper 1.2× length, 0.75 gain)
apologetic      sad           the same, for "sorry, I didn't get that" and errors
warm            happy         greetings and goodbyes to a caller who is not upset
==============  ============  ===========================================================

The bot never answers in "angry", "fearful" or "surprised". Per caller mood (the label when
its confidence is at least ``min_confidence``, else neutral; "surprised" with negative
valence counts as worried):

=========  ========  =======  =======  ========  =====  =======  =======
mood       greeting  answer   clarify  fallback  error  handoff  goodbye
=========  ========  =======  =======  ========  =====  =======  =======
neutral    happy     neutral  neutral  sad       sad    neutral  happy
happy      happy     happy    neutral  sad       sad    neutral  happy
surprised  happy     neutral  neutral  sad       sad    neutral  happy
sad        neutral   sad      sad      sad       sad    sad      neutral
fearful    neutral   neutral  neutral  sad       sad    neutral  neutral
angry      neutral   neutral  sad      sad       sad    sad      neutral
=========  ========  =======  =======  ========  =====  =======  =======

Escalation. :class:`EscalationPolicy` hands the call to a human on, in this order of
precedence: an explicit request, ``failed_answers`` failed answers in a row, or
``negative_turns`` consecutive turns with valence below ``negative_valence`` at confidence
of at least ``negative_confidence``. Every decision is logged (``emotion.escalation``) with
``call_id`` and ``turn_id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from kefu.ai_bridge.emotion.tracker import TrackerState
from kefu.ai_bridge.emotion.values import CallerEmotion, EmotionError

__all__ = [
    "REASONS",
    "REPLY_KINDS",
    "EscalationDecision",
    "EscalationPolicy",
    "EscalationSettings",
    "caller_mood",
    "reply_emotion",
]

log = structlog.get_logger(__name__)

REPLY_KINDS: tuple[str, ...] = (
    "greeting",
    "answer",
    "clarify",
    "fallback",
    "error",
    "handoff",
    "goodbye",
)

_TABLE: dict[str, tuple[str, ...]] = {
    # mood:      greeting   answer     clarify    fallback error  handoff    goodbye
    "neutral": ("happy", "neutral", "neutral", "sad", "sad", "neutral", "happy"),
    "happy": ("happy", "happy", "neutral", "sad", "sad", "neutral", "happy"),
    "surprised": ("happy", "neutral", "neutral", "sad", "sad", "neutral", "happy"),
    "sad": ("neutral", "sad", "sad", "sad", "sad", "sad", "neutral"),
    "fearful": ("neutral", "neutral", "neutral", "sad", "sad", "neutral", "neutral"),
    "angry": ("neutral", "neutral", "sad", "sad", "sad", "sad", "neutral"),
}

REASONS = ("explicit_request", "failed_answers", "negative_emotion", "")


def caller_mood(caller: CallerEmotion, min_confidence: float = 0.4) -> str:
    """The mood the reply table is indexed by (see module doc)."""
    if caller.confidence < min_confidence:
        return "neutral"
    if caller.label == "surprised" and caller.valence < -0.2:
        return "fearful"
    return caller.label


def reply_emotion(caller: CallerEmotion, reply_kind: str, min_confidence: float = 0.4) -> str:
    """The TTS emotion for a reply of ``reply_kind`` to a caller feeling ``caller``."""
    try:
        column = REPLY_KINDS.index(reply_kind)
    except ValueError:
        raise EmotionError(
            f"unknown reply kind {reply_kind!r}; expected one of {', '.join(REPLY_KINDS)}"
        ) from None
    return _TABLE[caller_mood(caller, min_confidence)][column]


@dataclass(frozen=True, slots=True)
class EscalationSettings:
    """When the AI hands a call to a human."""

    negative_turns: int = 3
    """Consecutive negative turns that count as sustained negative emotion (0: never)."""
    negative_valence: float = -0.4
    """A turn is negative when its valence is below this..."""
    negative_confidence: float = 0.5
    """...and its confidence at least this."""
    failed_answers: int = 2
    """Failed answers (fallbacks, not-understood) in a row that escalate (0: never)."""
    on_explicit_request: bool = True
    """Escalate when the caller asks for a human."""

    def __post_init__(self) -> None:
        if self.negative_turns < 0 or self.failed_answers < 0:
            raise EmotionError("negative_turns and failed_answers must be >= 0")
        if not -1.0 <= self.negative_valence <= 1.0:
            raise EmotionError(f"negative_valence must be in [-1, 1], got {self.negative_valence}")
        if not 0.0 <= self.negative_confidence <= 1.0:
            raise EmotionError(
                f"negative_confidence must be in [0, 1], got {self.negative_confidence}"
            )


@dataclass(frozen=True, slots=True)
class EscalationDecision:
    """Whether to hand the call to a human now, and why."""

    escalate: bool
    reason: str
    """``explicit_request``, ``failed_answers``, ``negative_emotion`` or ``""``."""
    negative_streak: int = 0
    """Consecutive negative turns as the settings count them."""
    failed_in_row: int = 0


class EscalationPolicy:
    """Applies :class:`EscalationSettings` to a call's tracker state (pure, logs only)."""

    def __init__(self, settings: EscalationSettings | None = None, logger: Any = None) -> None:
        self.settings = settings or EscalationSettings()
        self.log = logger if logger is not None else log

    def decide(
        self,
        tracker_state: TrackerState,
        failed_in_row: int,
        explicit_request: bool,
        *,
        call_id: str = "",
        turn_id: str | int = "",
    ) -> EscalationDecision:
        s = self.settings
        streak = tracker_state.negative_streak(s.negative_valence, s.negative_confidence)
        if explicit_request and s.on_explicit_request:
            reason = "explicit_request"
        elif s.failed_answers and failed_in_row >= s.failed_answers:
            reason = "failed_answers"
        elif s.negative_turns and streak >= s.negative_turns:
            reason = "negative_emotion"
        else:
            reason = ""
        decision = EscalationDecision(bool(reason), reason, streak, failed_in_row)
        self.log.info(  # every decision, escalating or not, is kept
            "emotion.escalation",
            call_id=call_id,
            turn_id=turn_id,
            escalate=decision.escalate,
            reason=reason,
            negative_streak=streak,
            failed_in_row=failed_in_row,
            explicit_request=explicit_request,
            valence=round(tracker_state.valence, 3),
            label=tracker_state.label,
        )
        return decision
