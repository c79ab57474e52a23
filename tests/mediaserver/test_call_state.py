import pytest

from kefu.errors import InvalidTransition
from kefu.mediaserver.call_state import CallInput, CallState, next_state


def test_happy_path():
    s = next_state(CallState.RINGING, CallInput.ANSWER)
    assert s is CallState.AI_ACTIVE
    s = next_state(s, CallInput.TAKEOVER)
    assert s is CallState.HUMAN_ACTIVE
    s = next_state(s, CallInput.HANDBACK)
    assert next_state(s, CallInput.HANGUP) is CallState.ENDED


def test_transfer_failure_returns_to_origin():
    s = next_state(CallState.HUMAN_ACTIVE, CallInput.TRANSFER)
    assert next_state(s, CallInput.TRANSFER_FAILED_HUMAN) is CallState.HUMAN_ACTIVE
    assert next_state(s, CallInput.TRANSFER_DONE) is CallState.ENDED


@pytest.mark.parametrize("event", list(CallInput))
def test_ended_is_final(event):
    with pytest.raises(InvalidTransition):
        next_state(CallState.ENDED, event)


def test_cannot_take_over_a_ringing_call():
    with pytest.raises(InvalidTransition) as info:
        next_state(CallState.RINGING, CallInput.TAKEOVER)
    assert info.value.state == "ringing"
