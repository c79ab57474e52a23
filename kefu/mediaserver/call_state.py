"""The call state machine, as a table.

::

    ringing, dialing        ──answer──────────────►  ai_active
    ai_active               ──takeover────────────►  human_active
    human_active            ──handback────────────►  ai_active
    ai_active, human_active ──transfer────────────►  transferring
    transferring            ──transfer_failed_ai──►  ai_active
    transferring            ──transfer_failed_human► human_active
    transferring            ──transfer_done───────►  ended
    every state but ended   ──hangup──────────────►  ended

Invariants:

* a call starts in ``ringing`` (it called us) or ``dialing`` (we called it, not yet answered:
  outbound calls, reserved) and finishes in ``ended``; ``ended`` is final;
* media flows only in ``ai_active``, ``human_active`` and ``transferring``;
* exactly one of the AI and a human speaks to the caller: ``ai_active`` the AI,
  ``human_active`` a human (the AI's output is held); ``takeover`` and ``handback`` are the
  only moves between the two;
* ``transferring`` is entered only by a REFER that was sent; it returns to where it came from
  when the transfer fails (``transfer_failed_ai`` / ``transfer_failed_human``, chosen by the
  caller of the table from the state it left) and ends the call when it succeeds;
* any state but ``ended`` can ``hangup`` (either side hung up, the trunk cancelled, a timer
  expired, kefu shut down);
* a transition is applied only after the action it stands for succeeded (the REFER was
  queued, the AI's output was held); a failed action leaves the state as it was.

Anything else raises :class:`kefu.errors.InvalidTransition`. :func:`allowed` asks first: the
call controller (:class:`kefu.mediaserver.call.Call`) turns a control request the table
refuses into :class:`kefu.errors.CallStateConflict` (HTTP 409 with the current state).
"""

from __future__ import annotations

from enum import StrEnum

from kefu.errors import InvalidTransition


class CallState(StrEnum):
    RINGING = "ringing"
    """An INVITE came in; not answered yet."""
    DIALING = "dialing"
    """We sent an INVITE (outbound call); not answered yet. Reserved: nothing dials today."""
    AI_ACTIVE = "ai_active"
    """Answered; the AI agent speaks to the caller."""
    HUMAN_ACTIVE = "human_active"
    """A human agent took over; the AI's output is held (it may still listen)."""
    TRANSFERRING = "transferring"
    """A REFER is on its way or in progress; media still flows."""
    ENDED = "ended"
    """Over; every resource released. Final."""


class CallInput(StrEnum):
    ANSWER = "answer"
    TAKEOVER = "takeover"
    HANDBACK = "handback"
    TRANSFER = "transfer"
    TRANSFER_FAILED_AI = "transfer_failed_ai"
    TRANSFER_FAILED_HUMAN = "transfer_failed_human"
    TRANSFER_DONE = "transfer_done"
    HANGUP = "hangup"


S, E = CallState, CallInput

TRANSITIONS: dict[tuple[CallState, CallInput], CallState] = {
    (S.RINGING, E.ANSWER): S.AI_ACTIVE,
    (S.DIALING, E.ANSWER): S.AI_ACTIVE,
    (S.AI_ACTIVE, E.TAKEOVER): S.HUMAN_ACTIVE,
    (S.HUMAN_ACTIVE, E.HANDBACK): S.AI_ACTIVE,
    (S.AI_ACTIVE, E.TRANSFER): S.TRANSFERRING,
    (S.HUMAN_ACTIVE, E.TRANSFER): S.TRANSFERRING,
    (S.TRANSFERRING, E.TRANSFER_FAILED_AI): S.AI_ACTIVE,
    (S.TRANSFERRING, E.TRANSFER_FAILED_HUMAN): S.HUMAN_ACTIVE,
    (S.TRANSFERRING, E.TRANSFER_DONE): S.ENDED,
    **{(state, E.HANGUP): S.ENDED for state in S if state is not S.ENDED},
}
"""(state, input) -> next state; a pair not listed is illegal."""

TRANSFER_FAILED: dict[CallState, CallInput] = {
    S.AI_ACTIVE: E.TRANSFER_FAILED_AI,
    S.HUMAN_ACTIVE: E.TRANSFER_FAILED_HUMAN,
}
"""The state a transfer started from -> the input that returns the call there."""


def allowed(state: CallState, event: CallInput) -> bool:
    """Whether the table has a transition from ``state`` on ``event``."""
    return (state, event) in TRANSITIONS


def next_state(state: CallState, event: CallInput) -> CallState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition("call", state.value, event.value) from None
