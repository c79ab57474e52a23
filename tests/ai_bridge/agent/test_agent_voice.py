"""A human agent's voice during a takeover, with the real models: transcribed and published
as the agent's, kept in the dialog history, never answered; and after the hand-back the AI
speaks only once the caller has."""

from __future__ import annotations

import asyncio

import pytest

from kefu.ai_bridge.agent import Utterance
from kefu.ai_bridge.trace import TurnTrace

from .conftest import FakeCaller

pytestmark = pytest.mark.asyncio(loop_scope="session")


def caller_line(turn: int):
    return lambda e: e.speaker == "caller" and e.turn_id == turn


def bot_line(turn: int):
    return lambda e: e.speaker == "bot" and e.turn_id == turn


def agent_line(e: Utterance) -> bool:
    return e.speaker == "agent"


async def test_agent_voice_is_transcribed_kept_in_the_dialog_and_never_answered(
    services, call_factory, spoken, hear
) -> None:
    call = await call_factory(services)
    agent, bus = call.agent, call.bus
    loop = asyncio.get_running_loop()
    await call.sender.fast_forward(agent)  # the greeting
    call.caller.say(spoken("What are your opening hours?"))
    await bus.wait(Utterance, bot_line(1), 25)
    await call.sender.fast_forward(agent)

    agent.pause()
    paused_at = loop.time()
    # What the caller hears of the agents, as a WebRTC leg decodes it: 48 kHz stereo.
    agents = FakeCaller(rate=48000, channels=2)
    agent.hear_agent(agents, "alice")
    voice = agent.agent_voice
    assert voice is not None
    agents.say(spoken("I have sent a replacement phone to your home address."))
    said = await bus.wait(Utterance, agent_line, 25)
    words = said.text.lower()
    assert "replacement" in words and "address" in words, said.text
    assert said.turn_id == 1 and said.call_id == agent.call_id and said.lang == "en"
    # The caller answers the human: transcribed, never answered by the AI.
    call.caller.say(spoken("How do I return an item?"))
    asked = await bus.wait(Utterance, caller_line(2), 25)
    assert "return" in asked.text.lower()
    await asyncio.sleep(0)
    assert not agent.busy
    assert [e.turn_id for e in bus.of(Utterance) if e.speaker == "bot"] == [0, 1]
    assert not [t for t in bus.of(TurnTrace) if t.turn_id == 2]
    assert not call.sender.speech_frames_after(paused_at + 0.05)
    assert [e.text for e in bus.of(Utterance) if agent_line(e)] == [said.text]

    # The dialog state has the whole conversation, each line as its speaker's.
    await agent.history.drain()
    state = await services.dialog.store.get(agent.call_id)
    assert state is not None
    assert [who for who, _ in state.history] == ["caller", "bot", "agent", "caller"]
    assert state.history[2] == ("agent", said.text)
    assert state.history[3] == ("caller", asked.text)
    assert "opening hours" in state.history[0][1].lower()

    agent.stop_hearing_agent()
    agent.stop_hearing_agent()  # idempotent
    assert agent.agent_voice is None
    await asyncio.wait_for(voice.stopped.wait(), 5)
    read = agents.frames_read
    agents.say(spoken("Is there anything else I can help you with?"))

    agent.resume()
    resumed_at = loop.time()
    call.caller.say(spoken("Can I pay with PayPal?"))
    await bus.wait(Utterance, bot_line(3), 25)
    await call.sender.fast_forward(agent)
    trace = await bus.wait(TurnTrace, lambda e: e.turn_id == 3, 10)
    assert trace.source == "kb" and trace.first_packet is not None
    heard = hear(services, call.sender.audio_between(trace.first_packet - 0.021)).lower()
    assert "paypal" in heard, heard
    # The first thing the AI said after the hand-back came after the caller's question.
    # The answer's text is published as its audio is queued: wait for the sender to play it.
    for _ in range(200):
        frames = call.sender.speech_frames_after(resumed_at)
        if frames:
            break
        await asyncio.sleep(0.05)
    assert frames, "the answer was never played"
    assert frames[0].at > call.caller.said_at[-1]
    assert [e.turn_id for e in bus.of(Utterance) if e.speaker == "bot"] == [0, 1, 3]
    # Nobody reads the agents' track any more: their last words are not transcribed.
    assert agents.frames_read == read
    assert len([e for e in bus.of(Utterance) if agent_line(e)]) == 1
    await agent.history.drain()
    state = await services.dialog.store.get(agent.call_id)
    assert state is not None
    assert [who for who, _ in state.history] == [
        *("caller", "bot", "agent", "caller"),
        *("caller", "bot"),
    ]


async def test_handback_mid_turn_waits_for_the_callers_next_turn(
    services, call_factory, spoken
) -> None:
    call = await call_factory(services)
    agent, bus = call.agent, call.bus
    loop = asyncio.get_running_loop()
    await call.sender.fast_forward(agent)
    started = asyncio.Event()
    on_started = agent._on_speech_started

    def spy(ev) -> None:  # one seam: the caller's voice has opened a turn
        on_started(ev)
        started.set()

    agent._on_speech_started = spy  # type: ignore[method-assign]
    call.caller.say(spoken("I would like to return a pair of shoes that are too small."))
    await asyncio.wait_for(started.wait(), 10)
    # A human takes the call and hands it back while the caller is still talking: that
    # turn was theirs, and its transcript (arriving after the hand-back) is not answered.
    agent.pause()
    agent.resume()
    resumed_at = loop.time()
    said = await bus.wait(Utterance, caller_line(1), 25)
    assert "shoes" in said.text.lower()
    await asyncio.sleep(0)
    assert not agent.busy
    assert not [e for e in bus.of(Utterance) if bot_line(1)(e)]
    assert not call.sender.speech_frames_after(resumed_at)
    await agent.history.drain()
    state = await services.dialog.store.get(agent.call_id)
    assert state is not None and state.history == (("caller", said.text),)
    # The caller's next turn is answered.
    call.caller.say(spoken("Can I pay with PayPal?"))
    answer = await bus.wait(Utterance, bot_line(2), 25)
    assert "paypal" in answer.text.lower()
    # The answer's text is published as its audio is queued: wait for the sender to play it.
    for _ in range(200):
        frames = call.sender.speech_frames_after(resumed_at)
        if frames:
            break
        await asyncio.sleep(0.05)
    assert frames, "the answer was never played"
    assert frames[0].at > call.caller.said_at[-1]
