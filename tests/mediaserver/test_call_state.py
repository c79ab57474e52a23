"""The call state table, cell by cell: every state × every input, written out independently."""

import pytest

from kefu.errors import InvalidTransition
from kefu.mediaserver.call_state import (
    TRANSFER_FAILED,
    TRANSITIONS,
    CallInput,
    CallState,
    allowed,
    next_state,
)

S, E = CallState, CallInput

EXPECTED: dict[CallState, dict[CallInput, CallState]] = {
    S.RINGING: {E.ANSWER: S.AI_ACTIVE, E.HANGUP: S.ENDED},
    S.DIALING: {E.ANSWER: S.AI_ACTIVE, E.HANGUP: S.ENDED},
    S.AI_ACTIVE: {E.TAKEOVER: S.HUMAN_ACTIVE, E.TRANSFER: S.TRANSFERRING, E.HANGUP: S.ENDED},
    S.HUMAN_ACTIVE: {E.HANDBACK: S.AI_ACTIVE, E.TRANSFER: S.TRANSFERRING, E.HANGUP: S.ENDED},
    S.TRANSFERRING: {
        E.TRANSFER_FAILED_AI: S.AI_ACTIVE,
        E.TRANSFER_FAILED_HUMAN: S.HUMAN_ACTIVE,
        E.TRANSFER_DONE: S.ENDED,
        E.HANGUP: S.ENDED,
    },
    S.ENDED: {},
}
"""What each state does on each input; an input missing from a state's row is illegal."""

CELLS = [(state, event) for state in CallState for event in CallInput]


def test_the_expectation_covers_every_state() -> None:
    assert set(EXPECTED) == set(CallState)


@pytest.mark.parametrize(("state", "event"), CELLS, ids=[f"{s}-{e}" for s, e in CELLS])
def test_every_state_and_input(state: CallState, event: CallInput) -> None:
    expected = EXPECTED[state].get(event)
    assert allowed(state, event) is (expected is not None)
    if expected is None:
        with pytest.raises(InvalidTransition) as info:
            next_state(state, event)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "call",
            state.value,
            event.value,
        )
    else:
        assert next_state(state, event) is expected


def test_the_table_has_nothing_beyond_the_expectation() -> None:
    assert len(TRANSITIONS) == sum(len(row) for row in EXPECTED.values())


def test_a_failed_transfer_returns_to_where_it_started() -> None:
    for origin in (S.AI_ACTIVE, S.HUMAN_ACTIVE):
        during = next_state(origin, E.TRANSFER)
        assert next_state(during, TRANSFER_FAILED[origin]) is origin


def test_ended_is_reachable_from_every_state_and_final() -> None:
    for state in CallState:
        if state is not S.ENDED:
            assert next_state(state, E.HANGUP) is S.ENDED
    assert not any(allowed(S.ENDED, event) for event in CallInput)
