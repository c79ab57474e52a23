"""The call state machine, as a table.

Invariants:
* every call starts in ``ringing`` and finishes in ``ended``; ``ended`` is final;
* media flows only in ``ai_active``, ``human_active`` and ``transferring``;
* ``transferring`` is entered only by a REFER; it returns to where it came from when the
  transfer fails (``transfer_failed``) and ends the call when it succeeds;
* any state can ``hangup`` (either side hung up, the trunk cancelled, a timer expired).

Anything else raises :class:`kefu.errors.InvalidTransition`.
"""

from __future__ import annotations

from enum import StrEnum

from kefu.errors import InvalidTransition


class CallState(StrEnum):
    RINGING = "ringing"
    AI_ACTIVE = "ai_active"
    HUMAN_ACTIVE = "human_active"
    TRANSFERRING = "transferring"
    ENDED = "ended"


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
    (S.AI_ACTIVE, E.TAKEOVER): S.HUMAN_ACTIVE,
    (S.HUMAN_ACTIVE, E.HANDBACK): S.AI_ACTIVE,
    (S.AI_ACTIVE, E.TRANSFER): S.TRANSFERRING,
    (S.HUMAN_ACTIVE, E.TRANSFER): S.TRANSFERRING,
    (S.TRANSFERRING, E.TRANSFER_FAILED_AI): S.AI_ACTIVE,
    (S.TRANSFERRING, E.TRANSFER_FAILED_HUMAN): S.HUMAN_ACTIVE,
    (S.TRANSFERRING, E.TRANSFER_DONE): S.ENDED,
    **{(state, E.HANGUP): S.ENDED for state in S if state is not S.ENDED},
}


def next_state(state: CallState, event: CallInput) -> CallState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition("call", state.value, event.value) from None
