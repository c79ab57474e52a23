"""What a call's AI agent publishes (besides :class:`kefu.ai_bridge.trace.TurnTrace`).

Frozen dataclasses; :data:`kefu.mediaserver.events.EVENT_TYPES` gives each its JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AI_UNAVAILABLE", "BargeIn", "HandoffRequested", "Utterance"]

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
