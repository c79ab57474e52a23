"""Events published on the bus, and their one JSON form (documented in docs/events.md).

Every event is a frozen dataclass carrying its ``call_id``. :func:`event_json` turns any of
them into ``{"v": 1, "type": "call.state_changed", "call_id": ..., "at": unix_time, ...}``:
the dataclass's fields, with the wire ``type`` looked up in :data:`EVENT_TYPES` and times the
AI stages took on the event loop's clock converted to UNIX time.

Version rule: adding a field, or a new event type, keeps ``v``; renaming or removing a field,
changing its meaning or type, or renaming a type bumps ``v`` (:data:`EVENT_VERSION`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

from kefu.ai_bridge.agent import BargeIn, HandoffRequested, Utterance
from kefu.ai_bridge.events import AvatarQualityChanged, CallerEmotionHeard, EscalationRaised
from kefu.ai_bridge.trace import TurnTrace

EVENT_VERSION = 1
"""``v`` of every event's JSON form."""


@dataclass(frozen=True, slots=True)
class CallEvent:
    call_id: str
    """kefu's call identifier (not the SIP Call-ID, which belongs to the trunk)."""
    at: float
    """Wall-clock time (time.time()) the event happened."""

    def as_dict(self) -> dict[str, Any]:
        return event_json(self)


@dataclass(frozen=True, slots=True)
class CallStarted(CallEvent):
    kind: str
    """How the caller came in: ``sip`` or ``webrtc``."""
    source: str
    """Where from: the trunk's ``transport:host:port`` for SIP, the browser's IP for WebRTC."""


@dataclass(frozen=True, slots=True)
class CallStateChanged(CallEvent):
    old: str
    """State before (``kefu.mediaserver.call_state.CallState`` values)."""
    new: str
    """State after."""
    reason: str
    """Why, in words (``answered``, ``REFER to sip:...``, ``bye``)."""


@dataclass(frozen=True, slots=True)
class DtmfReceived(CallEvent):
    digit: str
    """``0``-``9``, ``*``, ``#``, ``A``-``D``."""
    source: str
    """"rfc4733" or "info"."""


@dataclass(frozen=True, slots=True)
class TransferProgress(CallEvent):
    target: str
    """The REFER's target URI."""
    status: int
    """The sipfrag status from the REFER's NOTIFY (or the REFER's own final response)."""


@dataclass(frozen=True, slots=True)
class AgentWait(CallEvent):
    waiting: bool
    """True: the call now waits for a human agent; False: it stopped waiting."""
    reason: str
    """Why a human was asked for (``caller asked``, ``ai unavailable``, ``ai error``)."""
    position: int
    """Its place in the queue when it began waiting (1: first); 0 once it stopped."""
    outcome: str
    """How the wait ended: ``taken`` (an agent took over), ``timeout`` (the wait limit: the
    fallback runs), ``ended`` (the caller hung up); "" while waiting."""


@dataclass(frozen=True, slots=True)
class AgentNote(CallEvent):
    by: str
    """Who wrote it (the token's user)."""
    text: str
    """The note (at most 4,000 characters), kept with the interaction record."""


@dataclass(frozen=True, slots=True)
class CallAssigned(CallEvent):
    """A human-held call passed to another agent (:mod:`kefu.mediaserver.assign`)."""

    old: str
    """Who held it."""
    new: str
    """Who holds it now (they take it over to join it)."""
    by: str
    """Who passed it on: its holder, or a supervisor."""


@dataclass(frozen=True, slots=True)
class CallDialing(CallEvent):
    """kefu sent the INVITE of an outbound call (``POST /api/calls``, ``kefu call``)."""

    to: str
    """The called URI."""
    from_uri: str
    """kefu's From URI for the call."""
    media_mode: str
    """What the call runs once answered: ``ai``, ``echo`` or ``prompt``."""
    context: dict[str, Any]
    """The request's ``context`` object, as given (``{}`` when none)."""
    by: str
    """Who asked (the token's user)."""


@dataclass(frozen=True, slots=True)
class CallRinging(CallEvent):
    """A provisional response (180, 183...) to an outbound call's INVITE."""

    status: int
    reason: str
    early_media: bool
    """The response carried an SDP answer (early media)."""


@dataclass(frozen=True, slots=True)
class CallAnswered(CallEvent):
    """The outbound call was answered (2xx, ACK sent) and its media mode runs."""

    setup_ms: float
    """From the first INVITE sent to the 2xx, challenges and redirects included."""
    codec: str
    """The negotiated codec."""


@dataclass(frozen=True, slots=True)
class CallFailed(CallEvent):
    """The outbound call was not answered; ``call.ended`` follows."""

    status: int
    """The SIP status: the final response (486, 487 after a ring timeout, 401/407 when
    authentication failed, 408 without any answer), or 0 when kefu gave up on its own."""
    reason: str
    """Why, in words (the reason phrase or kefu's own, e.g. ``authentication failed:
    challenged again``)."""


@dataclass(frozen=True, slots=True)
class CallEnded(CallEvent):
    reason: str
    """Why (``bye``, ``api``, ``transferred``, ``max_call_seconds``, ``rejected 503``...)."""
    answered: bool
    """The call had been answered (ai_active was reached)."""


@dataclass(frozen=True, slots=True)
class RelayedEvent(CallEvent):
    """An event of a call a room worker or another node hosts, in the JSON form it was
    written (:mod:`kefu.mediaserver.worker_link`, :mod:`kefu.cluster.events_bridge`): this
    front's readers get it as it was; its sinks (metrics, interaction log) skip it, the
    process hosting the call already counted it."""

    body: dict[str, Any]
    node: str = ""
    """The node it came from; empty: this node (one of its room workers)."""


@dataclass(frozen=True, slots=True)
class EventType:
    """How one event class is written on the wire."""

    name: str
    """The JSON ``type``."""
    at: tuple[str, ...] = ("at",)
    """Fields that give the envelope's ``at``, first one set wins (else the time of writing)."""
    loop_times: tuple[str, ...] = ()
    """Fields holding event-loop times (``loop.time()``), written as UNIX times."""
    extra: Callable[[Any], dict[str, Any]] | None = None
    """Derived fields added to the JSON form."""


_TRACE_MARKS = (
    "speech_end",
    "end_of_turn",
    "asr_final",
    "answer_chosen",
    "first_tts_audio",
    "first_packet",
)

EVENT_TYPES: dict[type, EventType] = {
    CallStarted: EventType("call.started"),
    CallStateChanged: EventType("call.state_changed"),
    DtmfReceived: EventType("call.dtmf"),
    TransferProgress: EventType("call.transfer_progress"),
    AgentWait: EventType("call.agent_wait"),
    AgentNote: EventType("call.note"),
    CallAssigned: EventType("call.assigned"),
    CallEnded: EventType("call.ended"),
    CallDialing: EventType("call.dialing"),
    CallRinging: EventType("call.ringing"),
    CallAnswered: EventType("call.answered"),
    CallFailed: EventType("call.failed"),
    Utterance: EventType("transcript.final", loop_times=("at",)),
    BargeIn: EventType(
        "turn.barge_in", at=("paused_at",), loop_times=("speech_start", "paused_at")
    ),
    TurnTrace: EventType(
        "turn.trace",
        at=("first_packet", "asr_final", "end_of_turn"),
        loop_times=_TRACE_MARKS,
        extra=lambda trace: {"stages_ms": trace.stages_ms()},
    ),
    HandoffRequested: EventType("handoff.requested", loop_times=("at",)),
    CallerEmotionHeard: EventType("turn.emotion", loop_times=("at",)),
    EscalationRaised: EventType("call.escalation", loop_times=("at",)),
    AvatarQualityChanged: EventType("avatar.quality"),
}
"""Every event class the bus carries -> its wire form. A class missing here is not sent."""


def event_json(event: object, *, now: float | None = None) -> dict[str, Any]:
    """The JSON form of a bus event; KeyError for a class not in :data:`EVENT_TYPES`.

    ``now``: the current UNIX time (tests pin it); loop times are converted with the offset
    between ``time.time()`` and ``time.monotonic()`` (the clock of asyncio's and uvloop's
    ``loop.time()``).
    """
    if isinstance(event, RelayedEvent):
        return dict(event.body)
    kind = EVENT_TYPES[type(event)]
    assert is_dataclass(event) and not isinstance(event, type)
    wall = time.time() if now is None else now
    offset = wall - time.monotonic()
    body: dict[str, Any] = asdict(event)
    for name in kind.loop_times:
        value = body.get(name)
        if isinstance(value, int | float) and value:
            body[name] = round(value + offset, 3)
    at = round(wall, 3)
    for name in kind.at:
        value = body.get(name)
        if isinstance(value, int | float) and value:
            at = round(float(value), 3)
            break
    call_id = body.pop("call_id")
    body.pop("at", None)  # an ``at`` field is always the envelope's (first in ``kind.at``)
    out: dict[str, Any] = {"v": EVENT_VERSION, "type": kind.name, "call_id": call_id, "at": at}
    out.update(body)
    if kind.extra is not None:
        out.update(kind.extra(event))
    return out


def event_fields(cls: type) -> list[str]:
    """The fields an event class adds to the envelope (docs and tests list them)."""
    return [f.name for f in fields(cls) if f.name not in ("call_id", "at")]
