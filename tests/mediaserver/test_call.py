"""The call controller: each operation checks the table, acts, and only then moves the state.

One fake at one seam: the caller's leg (:class:`kefu.mediaserver.call.Leg`) and, for takeover,
the AI agent's output track and the RTP endpoint that plays it.
"""

from __future__ import annotations

from typing import Any

import pytest

from kefu.errors import CallStateConflict
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.events import CallStateChanged
from kefu.mediaserver.media import Silence

S = CallState


class FakeLeg:
    def __init__(self, fail: Exception | None = None) -> None:
        self.fail = fail
        self.refers: list[str] = []
        self.hangups = 0

    def refer(self, target: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.refers.append(target)

    def hangup(self) -> None:
        self.hangups += 1


class FakeOutbound:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> int:
        self.flushes += 1
        return 0


class FakeAgent:
    def __init__(self) -> None:
        self.outbound = FakeOutbound()
        self.paused = False

    def pause(self) -> None:
        assert not self.paused, "paused twice"
        self.paused = True

    def resume(self) -> None:
        assert self.paused, "resumed while not paused"
        self.paused = False

    def stop_hearing_agent(self) -> None:
        self.hearing = None

    def hear_agent(self, track: Any, who: str) -> None:
        self.hearing = (track, who)


class FakeEndpoint:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.playing: Any = None

    def play(self, track: Any) -> None:
        if self.fail:
            raise OSError("socket closed")
        self.playing = track


def make_call(state: CallState, leg: FakeLeg | None = None) -> tuple[Call, list[object]]:
    bus = EventBus()
    seen: list[object] = []
    bus.publish = seen.append  # type: ignore[method-assign]
    call = Call("leg-1", bus, "udp:127.0.0.1:5060", caller=leg or FakeLeg())
    call.state = state
    return call, seen


def with_agent(call: Call, endpoint: FakeEndpoint) -> FakeAgent:
    agent = FakeAgent()
    call.agent = agent  # type: ignore[assignment]
    call.endpoint = endpoint  # type: ignore[assignment]
    endpoint.playing = agent.outbound
    return agent


# --- transfer ------------------------------------------------------------------------------


@pytest.mark.parametrize("origin", [S.AI_ACTIVE, S.HUMAN_ACTIVE])
def test_transfer_sends_the_refer_then_moves(origin: CallState) -> None:
    leg = FakeLeg()
    call, seen = make_call(origin, leg)
    call.transfer("sip:queue@vcc")
    assert leg.refers == ["sip:queue@vcc"]
    assert call.state is S.TRANSFERRING and call.transfer_target == "sip:queue@vcc"
    (event,) = seen
    assert isinstance(event, CallStateChanged)
    assert (event.call_id, event.old, event.new) == (call.id, origin.value, "transferring")
    assert event.reason == "REFER to sip:queue@vcc"


@pytest.mark.parametrize("origin", [S.AI_ACTIVE, S.HUMAN_ACTIVE])
def test_a_refer_that_cannot_be_sent_changes_nothing(origin: CallState) -> None:
    call, seen = make_call(origin, FakeLeg(fail=RuntimeError("no dialog")))
    with pytest.raises(RuntimeError):
        call.transfer("sip:queue@vcc")
    assert call.state is origin
    assert call.transfer_target is None and call.transfer_from is None
    assert seen == []


@pytest.mark.parametrize("origin", [S.AI_ACTIVE, S.HUMAN_ACTIVE])
def test_a_failed_transfer_returns_to_its_origin(origin: CallState) -> None:
    call, seen = make_call(origin)
    call.transfer("sip:queue@vcc")
    call.transfer_failed(486)
    assert call.state is origin
    assert [(e.old, e.new) for e in seen] == [  # type: ignore[attr-defined]
        (origin.value, "transferring"),
        ("transferring", origin.value),
    ]
    assert "486" in seen[-1].reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "state", [S.RINGING, S.DIALING, S.TRANSFERRING, S.ENDED], ids=lambda s: s.value
)
def test_transfer_in_a_state_that_refuses_it_is_a_conflict_and_sends_nothing(
    state: CallState,
) -> None:
    leg = FakeLeg()
    call, seen = make_call(state, leg)
    with pytest.raises(CallStateConflict) as info:
        call.transfer("sip:queue@vcc")
    assert info.value.state == state.value and info.value.action == "transfer"
    assert leg.refers == [] and call.state is state and seen == []


# --- takeover and hand-back ----------------------------------------------------------------


def test_takeover_holds_the_ai_and_handback_gives_it_the_caller_again() -> None:
    call, seen = make_call(S.AI_ACTIVE)
    endpoint = FakeEndpoint()
    agent = with_agent(call, endpoint)
    call.takeover("bob")
    assert call.state is S.HUMAN_ACTIVE
    assert isinstance(endpoint.playing, Silence)  # the AI's voice no longer reaches the caller
    assert agent.paused  # and the AI stops answering (it keeps transcribing)
    assert agent.outbound.flushes == 1
    held = endpoint.playing
    call.handback("bob")
    assert call.state is S.AI_ACTIVE
    assert endpoint.playing is agent.outbound
    assert not agent.paused
    assert held.readyState == "ended"
    assert agent.outbound.flushes == 2  # nothing said while the human spoke is played late
    assert [(e.old, e.new, e.reason) for e in seen] == [  # type: ignore[attr-defined]
        ("ai_active", "human_active", "taken over by bob"),
        ("human_active", "ai_active", "handed back by bob"),
    ]


def test_takeover_without_an_agent_only_moves_the_state() -> None:
    call, _ = make_call(S.AI_ACTIVE)
    call.takeover("api")
    assert call.state is S.HUMAN_ACTIVE


def test_a_takeover_whose_action_fails_leaves_the_state() -> None:
    call, seen = make_call(S.AI_ACTIVE)
    with_agent(call, FakeEndpoint(fail=True))
    with pytest.raises(OSError):
        call.takeover("bob")
    assert call.state is S.AI_ACTIVE and seen == []


REFUSED = [
    (operation, state)
    for operation, allowed_in in (("takeover", S.AI_ACTIVE), ("handback", S.HUMAN_ACTIVE))
    for state in CallState
    if state is not allowed_in
]


@pytest.mark.parametrize(
    ("operation", "state"), REFUSED, ids=[f"{op}-{state}" for op, state in REFUSED]
)
def test_takeover_and_handback_elsewhere_are_conflicts_that_change_nothing(
    operation: str, state: CallState
) -> None:
    call, seen = make_call(state)
    endpoint = FakeEndpoint()
    agent = with_agent(call, endpoint)
    with pytest.raises(CallStateConflict) as info:
        getattr(call, operation)("bob")
    assert info.value.state == state.value
    assert call.state is state and seen == []
    assert endpoint.playing is agent.outbound and agent.outbound.flushes == 0
