"""The floor table (barge-in, takeover): every state × input, and the lane it is fed from."""

from __future__ import annotations

import asyncio

import pytest

from kefu.ai_bridge.barge import (
    TRANSITIONS,
    Floor,
    FloorAction,
    FloorInput,
    FloorMachine,
    allowed,
    next_step,
)
from kefu.ai_bridge.lane import Lane
from kefu.errors import InvalidTransition

S, In, A = Floor, FloorInput, FloorAction

# The whole table written out: every (state, input) pair, None = illegal.
EXPECTED: dict[Floor, dict[FloorInput, tuple[Floor, FloorAction] | None]] = {
    S.CLEAR: {
        In.VOICE: (S.CLEAR, A.NONE),
        In.VOICE_OVER_BOT: (S.HELD, A.HOLD),
        In.SUSTAINED: (S.CLEAR, A.NONE),
        In.END: (S.CLEAR, A.NONE),
        In.END_SHORT: (S.CLEAR, A.NONE),
        In.TAKEOVER: (S.PAUSED, A.SILENCE),
        In.HANDBACK: None,
        In.HANGUP: (S.CLOSED, A.STOP),
    },
    S.HELD: {
        In.VOICE: None,
        In.VOICE_OVER_BOT: None,
        In.SUSTAINED: (S.BARGED, A.BARGE_IN),
        In.END: (S.CLEAR, A.BARGE_IN),
        In.END_SHORT: (S.CLEAR, A.BACKCHANNEL),
        In.TAKEOVER: (S.PAUSED, A.SILENCE),
        In.HANDBACK: None,
        In.HANGUP: (S.CLOSED, A.STOP),
    },
    S.BARGED: {
        In.VOICE: None,
        In.VOICE_OVER_BOT: None,
        In.SUSTAINED: None,
        In.END: (S.CLEAR, A.NONE),
        In.END_SHORT: (S.CLEAR, A.NONE),
        In.TAKEOVER: (S.PAUSED, A.SILENCE),
        In.HANDBACK: None,
        In.HANGUP: (S.CLOSED, A.STOP),
    },
    S.PAUSED: {
        In.VOICE: (S.PAUSED, A.NONE),
        In.VOICE_OVER_BOT: (S.PAUSED, A.NONE),
        In.SUSTAINED: (S.PAUSED, A.NONE),
        In.END: (S.PAUSED, A.NONE),
        In.END_SHORT: (S.PAUSED, A.NONE),
        In.TAKEOVER: None,
        In.HANDBACK: (S.CLEAR, A.NONE),
        In.HANGUP: (S.CLOSED, A.STOP),
    },
    S.CLOSED: dict.fromkeys(In),
}


def test_expected_covers_every_pair() -> None:
    assert set(EXPECTED) == set(Floor)
    assert all(set(row) == set(FloorInput) for row in EXPECTED.values())
    listed = {(s, i) for s, row in EXPECTED.items() for i, step in row.items() if step}
    assert listed == set(TRANSITIONS)


@pytest.mark.parametrize("state", list(Floor))
@pytest.mark.parametrize("event", list(FloorInput))
def test_every_state_and_input(state: Floor, event: FloorInput) -> None:
    expected = EXPECTED[state][event]
    machine = FloorMachine()
    machine.state = state
    ran: list[FloorAction] = []
    if expected is None:
        assert not allowed(state, event)
        with pytest.raises(InvalidTransition) as info:
            machine.apply(event, ran.append)
        assert (info.value.machine, info.value.state, info.value.event) == (
            "floor",
            state.value,
            event.value,
        )
        assert machine.state is state and ran == []
    else:
        assert allowed(state, event) and next_step(state, event) == expected
        assert machine.apply(event, ran.append) is expected[1]
        assert machine.state is expected[0] and ran == [expected[1]]


@pytest.mark.parametrize(("state", "event"), sorted(TRANSITIONS))
def test_failed_action_leaves_the_state(state: Floor, event: FloorInput) -> None:
    machine = FloorMachine()
    machine.state = state

    def broken(action: FloorAction) -> None:
        raise RuntimeError("output is gone")

    with pytest.raises(RuntimeError):
        machine.apply(event, broken)
    assert machine.state is state


def test_closed_is_final() -> None:
    assert not any(allowed(Floor.CLOSED, i) for i in FloorInput)


def test_barge_in_then_backchannel_then_takeover_story() -> None:
    machine, ran = FloorMachine(), []
    for event in (
        In.VOICE_OVER_BOT,  # the caller starts over the bot: held
        In.END_SHORT,  # "uh-huh": resume
        In.VOICE_OVER_BOT,
        In.SUSTAINED,  # a real interruption
        In.END,
        In.TAKEOVER,
        In.VOICE,  # the caller talks to the human
        In.END,
        In.HANDBACK,
        In.HANGUP,
    ):
        machine.apply(event, ran.append)
    assert ran == [
        A.HOLD,
        A.BACKCHANNEL,
        A.HOLD,
        A.BARGE_IN,
        A.NONE,
        A.SILENCE,
        A.NONE,
        A.NONE,
        A.NONE,
        A.STOP,
    ]
    assert machine.state is Floor.CLOSED


# -- the lane ---------------------------------------------------------------------------------


def _lane(max_data: int = 2) -> Lane[str]:
    return Lane(max_data, is_control=lambda item: item.isupper())


def test_lane_never_drops_control_and_keeps_order() -> None:
    lane = _lane()
    for item in ("a", "START", "b", "c", "END", "d", "FINAL", "e"):
        lane.put(item)
    # data is bounded to 2 (oldest dropped); control items all stay, in their places
    assert list(lane) == ["START", "END", "d", "FINAL", "e"]
    assert lane.dropped == 3 and lane.high_water == 5
    assert [lane.get_nowait() for _ in range(len(lane))] == ["START", "END", "d", "FINAL", "e"]
    with pytest.raises(asyncio.QueueEmpty):
        lane.get_nowait()


def test_lane_of_control_only_grows() -> None:
    lane = _lane(1)
    for i in range(1000):
        assert lane.put(f"C{i}") is True
    assert lane.qsize() == 1000 and lane.dropped == 0


def test_lane_put_reports_a_drop() -> None:
    lane = _lane(1)
    assert lane.put("a") is True
    assert lane.put("b") is False and list(lane) == ["b"]


async def test_lane_get_waits_for_a_put() -> None:
    lane = _lane()
    getter = asyncio.ensure_future(lane.get())
    await asyncio.sleep(0)
    assert not getter.done()
    lane.put("X")
    assert await asyncio.wait_for(getter, 1) == "X"
    assert lane.peek() is None and lane.empty()


def test_lane_refuses_no_room() -> None:
    with pytest.raises(ValueError, match="max_data"):
        Lane(0, is_control=bool)
