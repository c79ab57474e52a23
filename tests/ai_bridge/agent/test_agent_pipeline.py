"""CallAgent's composed pipeline with the real models: takeover and hand-back, text-only and
listen-only chains, and stages added by composition alone (stand-ins for emotion, avatar)."""

from __future__ import annotations

import asyncio

import pytest

from kefu.ai_bridge.agent import BargeIn, PipelineSpec, Utterance
from kefu.ai_bridge.barge import Floor
from kefu.ai_bridge.pipeline import StageContext, StageRegistry
from kefu.ai_bridge.speak.base import TtsChunk
from kefu.ai_bridge.stages import CallerTurn
from kefu.ai_bridge.trace import TurnTrace
from kefu.errors import InvalidTransition

pytestmark = pytest.mark.asyncio(loop_scope="session")


def caller_line(turn: int):
    return lambda e: e.speaker == "caller" and e.turn_id == turn


def bot_line(turn: int):
    return lambda e: e.speaker == "bot" and e.turn_id == turn


async def test_takeover_silences_the_ai_keeps_the_transcript_and_handback_answers(
    services, call_factory, spoken, hear
) -> None:
    call = await call_factory(services)
    agent = call.agent
    await call.sender.fast_forward(agent)
    asked = asyncio.get_running_loop().time()
    call.caller.say(spoken("What are your opening hours?"))
    await call.sender.wait_for(lambda: len(call.sender.speech_frames_after(asked)) >= 10, 20)
    agent.pause()  # a human takes over mid-answer
    assert agent.paused and agent.floor.state is Floor.PAUSED
    assert agent.outbound.queued_samples == 0  # silent at once
    await asyncio.sleep(0)
    assert not agent.busy
    with pytest.raises(InvalidTransition):
        agent.pause()
    paused_at = asyncio.get_running_loop().time()
    # The caller talks to the human: transcribed and published, never answered.
    call.caller.say(spoken("How do I return an item?"))
    said = await call.bus.wait(Utterance, caller_line(2), 25)
    assert "return" in said.text.lower()
    await asyncio.sleep(0)
    assert not agent.busy and not call.bus.of(BargeIn)
    assert not [e for e in call.bus.of(Utterance) if bot_line(2)(e)]
    assert not [t for t in call.bus.of(TurnTrace) if t.turn_id == 2]
    assert not call.sender.speech_frames_after(paused_at + 0.05)
    # Handed back: the next question is answered, out loud.
    agent.resume()
    assert not agent.paused
    with pytest.raises(InvalidTransition):
        agent.resume()
    call.caller.say(spoken("Can I pay with PayPal?"))
    await call.bus.wait(Utterance, bot_line(3), 25)
    await call.sender.fast_forward(agent)
    trace = await call.bus.wait(TurnTrace, lambda e: e.turn_id == 3, 10)
    assert trace.source == "kb" and trace.first_packet is not None
    heard = hear(services, call.sender.audio_between(trace.first_packet - 0.021)).lower()
    assert "paypal" in heard, heard


async def test_text_only_pipeline_answers_in_text_without_audio(
    services, call_factory, spoken
) -> None:
    call = await call_factory(services, pipeline=PipelineSpec(speak=False))
    assert call.agent.pipeline is not None and call.agent.pipeline.speech is None
    greeting = await call.bus.wait(Utterance, bot_line(0), 5)
    assert "help" in greeting.text.lower()
    call.caller.say(spoken("What are your opening hours?"))
    answer = await call.bus.wait(Utterance, bot_line(1), 25)
    assert "monday" in answer.text.lower()
    trace = await call.bus.wait(TurnTrace, lambda e: e.turn_id == 1, 10)
    assert trace.source == "kb" and trace.first_tts_audio is None
    # a finished question: never held as a hesitation (semantic when the speculative
    # transcript was ready within the silence, else the plain wait)
    assert trace.end_reason in ("semantic", "silence"), trace.end_reason
    assert not call.sender.speech_frames_after(0)  # not a sample of bot audio


async def test_listen_only_pipeline_transcribes_and_never_answers(
    services, call_factory, spoken
) -> None:
    call = await call_factory(services, pipeline=PipelineSpec(answer=False))
    assert call.agent.pipeline is not None and call.agent.pipeline.dialog is None
    call.caller.say(spoken("How do I return an item?"))
    said = await call.bus.wait(Utterance, caller_line(1), 25)
    assert "return" in said.text.lower()
    await asyncio.sleep(0)
    assert not call.agent.busy
    assert not [e for e in call.bus.of(Utterance) if e.speaker == "bot"]
    assert not call.sender.speech_frames_after(0)


class MoodStage:
    """Stand-in for the emotion stage: annotates each turn."""

    def __init__(self) -> None:
        self.turns: list[CallerTurn] = []

    async def __call__(self, turn: CallerTurn) -> CallerTurn:
        self.turns.append(turn)
        return CallerTurn(turn.call_id, turn.turn_id, turn.text, turn.lang, turn.at, "calm")


class FaceTap:
    """Stand-in for the avatar: sees every chunk with its phonemes on its way out."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int | None, TtsChunk]] = []

    def __call__(self, chunk: TtsChunk, turn_id: int | None) -> TtsChunk:
        self.chunks.append((turn_id, chunk))
        return chunk


async def test_stages_are_added_by_composition_alone(services, call_factory, spoken) -> None:
    mood, face = MoodStage(), FaceTap()
    made: list[StageContext] = []

    def make_mood(ctx: StageContext) -> MoodStage:
        made.append(ctx)
        return mood

    registry = StageRegistry(
        turn_stages={"emotion": make_mood}, speech_taps={"avatar": lambda ctx: face}
    )
    spec = PipelineSpec(turn_stages=("emotion",), speech_taps=("avatar",))
    call = await call_factory(services, pipeline=spec, registry=registry)
    assert [ctx.call_id for ctx in made] == [call.agent.call_id]
    await call.sender.fast_forward(call.agent)
    call.caller.say(spoken("What are your opening hours?"))
    await call.bus.wait(Utterance, bot_line(1), 25)
    await call.sender.fast_forward(call.agent)
    trace = await call.bus.wait(TurnTrace, lambda e: e.turn_id == 1, 10)
    asked = await call.bus.wait(Utterance, lambda e: e.speaker == "caller" and e.turn_id == 1)
    # The stage saw the caller's turn as transcribed (tiny.en may mishear a word of it).
    assert [t.turn_id for t in mood.turns] == [1]
    assert mood.turns[0].text == asked.text  # type: ignore[attr-defined]
    answer_chunks = [c for turn_id, c in face.chunks if turn_id == 1]
    assert answer_chunks and any(c.phonemes for c in answer_chunks)
    spoken_text = " ".join(c.text for c in answer_chunks if c.text)
    assert "Monday" in spoken_text and "Monday" in trace.answer_text


async def test_unknown_stage_name_is_a_configuration_error(services, call_factory) -> None:
    for spec in (PipelineSpec(turn_stages=("emotion",)), PipelineSpec(frontend=("reverb",))):
        with pytest.raises(KeyError, match="no such stage"):
            await call_factory(services, pipeline=spec)
