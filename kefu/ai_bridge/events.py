"""What a call's AI agent publishes (besides :class:`kefu.ai_bridge.trace.TurnTrace`).

Frozen dataclasses; :data:`kefu.mediaserver.events.EVENT_TYPES` gives each its JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AI_UNAVAILABLE",
    "AvatarQualityChanged",
    "BargeIn",
    "CallerEmotionHeard",
    "EscalationRaised",
    "HandoffRequested",
    "Utterance",
]

AI_UNAVAILABLE = "ai unavailable"
"""``HandoffRequested.reason`` when a model the call needs is not loaded."""


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
    """Caller turn it belongs to (0: the greeting; an agent's line: the caller's current
    turn, 0 before the caller said anything)."""
    speaker: str
    """``caller``, ``bot`` or ``agent`` (a human agent during a takeover)."""
    text: str
    """What was said."""
    lang: str
    """Language of ``text``."""
    at: float
    """Loop time it became known."""


@dataclass(frozen=True, slots=True)
class CallerEmotionHeard:
    """The caller's emotion in one turn (:mod:`kefu.ai_bridge.emotion`)."""

    call_id: str
    """Call it belongs to."""
    turn_id: int
    """Caller turn."""
    label: str
    """neutral, happy, sad, angry, fearful or surprised."""
    valence: float
    """-1 (negative) .. 1 (positive)."""
    arousal: float
    """-1 (calm) .. 1 (agitated)."""
    confidence: float
    """0..1 (0: nothing could be estimated)."""
    text_label: str
    """What the words alone said."""
    prosody_arousal: float | None
    """What the voice alone said (None: no audio)."""
    call_label: str
    """The call's mood so far (smoothed over its turns)."""
    at: float
    """Loop time it was known."""


@dataclass(frozen=True, slots=True)
class EscalationRaised:
    """The AI is handing the call to a human because of how it is going: an alert."""

    call_id: str
    """Call it belongs to."""
    turn_id: int
    """Caller turn that tipped it."""
    reason: str
    """``negative_emotion``, ``failed_answers`` or ``explicit_request``."""
    negative_turns: int
    """Consecutive negative turns at the time."""
    failed_answers: int
    """Fallback answers in a row at the time."""
    call_label: str
    """The call's smoothed mood."""
    call_valence: float
    """The call's smoothed valence."""
    last_label: str
    """The last turn's emotion."""
    at: float
    """Loop time it was raised."""


@dataclass(frozen=True, slots=True)
class AvatarQualityChanged:
    """The avatar stepped down or up its ladder (docs/avatar.md, Degradation)."""

    call_id: str
    level: str
    """``720p``, ``512``, ``weights`` or ``audio``."""
    previous: str
    reason: str
    """``frames_skipped``, ``render_slow``, ``loop_lag`` (down) or ``headroom`` (up)."""
    at: float
    """Wall-clock time (time.time())."""
