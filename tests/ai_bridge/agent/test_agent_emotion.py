"""The caller's emotion in a live call: estimated per turn, answered in a fitting tone, and an
upset caller handed to a human (with an alert) while a calm one is not."""

from __future__ import annotations

import pytest

from kefu.ai_bridge.agent import HandoffRequested, Utterance
from kefu.ai_bridge.events import CallerEmotionHeard, EscalationRaised
from kefu.ai_bridge.trace import TurnTrace

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _turn(call, pcm, turn: int) -> TurnTrace:
    await call.sender.fast_forward(call.agent)
    call.caller.say(pcm)
    await call.bus.wait(Utterance, lambda e: e.speaker == "bot" and e.turn_id == turn, 30)
    await call.sender.fast_forward(call.agent)
    trace = await call.bus.wait(TurnTrace, lambda e: e.turn_id == turn, 10)
    assert isinstance(trace, TurnTrace)
    return trace


async def test_an_angry_caller_is_heard_soothed_and_handed_to_a_human(
    services, call_factory, spoken
) -> None:
    assert services.part("emotion").ready, services.readiness()
    call = await call_factory(services)
    first = await _turn(
        call,
        spoken("This is ridiculous! I have called three times and nobody fixed my order!", 0.8),
        1,
    )
    assert first.caller_emotion is not None and first.caller_emotion.valence < -0.3, first
    assert first.reply_emotion in ("sad", "neutral") and first.reply_emotion != "angry"
    second = await _turn(
        call, spoken("I am so angry! Why does nobody ever tell me where my parcel is?", 0.8), 2
    )
    heard = call.bus.of(CallerEmotionHeard)
    assert [e.turn_id for e in heard] == [1, 2]
    assert all(e.valence < -0.3 and e.label in ("angry", "sad") for e in heard), heard
    alert = await call.bus.wait(EscalationRaised, within=5)
    assert isinstance(alert, EscalationRaised) and alert.reason == "negative_emotion"
    assert second.escalation == "negative_emotion"
    assert "colleague" in second.answer_text.lower()
    handoff = await call.bus.wait(HandoffRequested, within=10)
    assert isinstance(handoff, HandoffRequested) and handoff.reason == "escalation", handoff


async def test_a_calm_caller_is_not_escalated(services, call_factory, spoken) -> None:
    call = await call_factory(services)
    for turn, question in enumerate(
        ("Hi, what are your opening hours on Saturday?", "Great, and can I pay with PayPal?"), 1
    ):
        trace = await _turn(call, spoken(question), turn)
        assert trace.caller_emotion is not None and trace.caller_emotion.valence > -0.3, trace
        assert trace.escalation == "" and trace.reply_emotion != "sad", trace
    assert not call.bus.of(EscalationRaised) and not call.bus.of(HandoffRequested)
