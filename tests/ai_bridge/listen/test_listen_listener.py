"""Listener: speculative decoding, cancellation, event queue."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kefu.ai_bridge.listen.asr.base import AsrResult
from kefu.ai_bridge.listen.heldout import wer
from kefu.ai_bridge.listen.listener import (
    EndOfTurn,
    FinalTranscript,
    Listener,
    PartialTranscript,
    SpeechStarted,
    SpeechSustained,
)
from kefu.ai_bridge.listen.turn_end import TurnCue, TurnJudgement


class LevelVad:
    def probability(self, chunk: np.ndarray) -> float:
        return 0.9 if float(np.abs(chunk.astype(np.int32)).mean()) > 100 else 0.02

    def reset(self) -> None:
        pass


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (3000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeAsr:
    name = "fake"
    languages = ("en",)
    ready = True
    error = None

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[int] = []
        self.cancelled = 0
        self.delay = delay
        self.kwargs: list[dict[str, object]] = []
        self.tickets: list[object] = []

    async def transcribe(self, pcm16k, *, language=None, hotwords=(), ticket=None):
        self.calls.append(len(pcm16k))
        self.kwargs.append({"language": language, "hotwords": tuple(hotwords)})
        self.tickets.append(ticket)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return AsrResult(f"{len(pcm16k)} samples", language or "en", 0.9, 1.0)


async def play(listener: Listener, clock: FakeClock, pcm: np.ndarray, pace: float = 0.0) -> None:
    """20 ms frames, audio time on the fake clock; ``pace`` real seconds between frames so
    executor work (which takes real time) can overlap the audio as it would live."""
    for i in range(0, len(pcm), 320):
        frame = pcm[i : i + 320]
        clock.t += len(frame) / 16000
        listener.feed(frame, clock.t)
        await asyncio.sleep(pace)


def drain(listener: Listener) -> list[object]:
    out = []
    while not listener.events.empty():
        out.append(listener.events.get_nowait())
    return out


async def test_speculative_final_lands_at_end_of_turn(whisper, speech) -> None:
    clock = FakeClock()
    listener = Listener(whisper, clock=clock, judge=None, call_id="t1")
    try:
        await play(listener, clock, np.zeros(8000, np.int16))
        await play(listener, clock, speech)
        # The silence arrives in real time so the speculative decode can finish.
        await play(listener, clock, np.zeros(16000, np.int16), pace=0.02)
        for _ in range(100):
            if any(isinstance(e, FinalTranscript) for e in listener.events):
                break
            await asyncio.sleep(0.02)
        events = drain(listener)
    finally:
        await listener.close()
    started = [e for e in events if isinstance(e, SpeechStarted)]
    eot = [e for e in events if isinstance(e, EndOfTurn)]
    final = [e for e in events if isinstance(e, FinalTranscript)]
    assert len(started) == len(eot) == len(final) == 1, events
    assert final[0].speculative
    assert wer("I want to check the status of my order.", final[0].text) <= 0.15
    assert final[0].at - eot[0].at <= 0.02  # within one frame of the end of turn
    assert 0.45 <= eot[0].at - eot[0].speech_end_at < 0.5
    assert not eot[0].short


async def test_a_pending_speculation_the_turn_ends_on_becomes_urgent() -> None:
    clock = FakeClock()
    asr = FakeAsr(delay=10.0)  # still decoding at the end of turn
    listener = Listener(asr, vad=LevelVad(), clock=clock, asr_language="en")
    try:
        await play(listener, clock, tone(1.0))
        await play(listener, clock, np.zeros(3200, np.int16))  # 200 ms: speculation starts
        await asyncio.sleep(0)
        (ticket,) = asr.tickets
        assert ticket is not None and ticket.urgent is False  # behind every ended turn
        await play(listener, clock, np.zeros(16000, np.int16))  # the turn ends on that audio
        await asyncio.sleep(0)
        assert ticket.urgent is True and len(asr.tickets) == 1  # promoted, not decoded twice
    finally:
        await listener.close()


async def test_resume_discards_speculation() -> None:
    clock = FakeClock()
    asr = FakeAsr(delay=10.0)
    listener = Listener(asr, vad=LevelVad(), clock=clock, asr_language="en", hotwords=["Kefu"])
    await play(listener, clock, tone(1.0))
    await play(listener, clock, np.zeros(3200, np.int16))  # 200 ms: speculation starts
    await asyncio.sleep(0)
    assert len(asr.calls) == 1
    await play(listener, clock, tone(0.5))  # caller resumes
    await asyncio.sleep(0)
    assert asr.cancelled == 1
    asr.delay = 0.0
    await play(listener, clock, np.zeros(16000, np.int16))
    await asyncio.sleep(0.01)
    events = drain(listener)
    await listener.close()
    final = [e for e in events if isinstance(e, FinalTranscript)]
    assert len(final) == 1 and final[0].speculative  # second pause's decode is the final
    assert asr.kwargs[-1] == {"language": "en", "hotwords": ("Kefu",)}


async def test_final_without_speculation_decodes_after_end() -> None:
    clock = FakeClock()
    asr = FakeAsr()
    listener = Listener(asr, vad=LevelVad(), clock=clock, speculative=False)
    await play(listener, clock, tone(1.0))
    await play(listener, clock, np.zeros(16000, np.int16))
    await asyncio.sleep(0.01)
    events = drain(listener)
    await listener.close()
    assert [type(e).__name__ for e in events] == ["SpeechStarted", "EndOfTurn", "FinalTranscript"]
    assert not events[-1].speculative and len(asr.calls) == 1


async def speak_then_pause(listener: Listener, clock: FakeClock, *, steps: int) -> EndOfTurn:
    """A second of voice, then ``steps`` 20 ms frames of silence (the speculative decode and
    its judgement get a turn of the loop between frames); the turn's end."""
    await play(listener, clock, tone(1.0))
    for _ in range(steps):
        await play(listener, clock, np.zeros(320, np.int16))
        await asyncio.sleep(0.001)
    return [e for e in drain(listener) if isinstance(e, EndOfTurn)][0]


async def test_semantic_hint_from_speculative_text_ends_turn_early() -> None:
    clock = FakeClock()

    def complete(text: str, audio: object) -> TurnJudgement:
        return TurnJudgement(TurnCue.COMPLETE, "test")

    listener = Listener(FakeAsr(), vad=LevelVad(), clock=clock, judge=complete)
    eot = await speak_then_pause(listener, clock, steps=40)
    await listener.close()
    assert eot.reason == "semantic" and eot.at - eot.speech_end_at < 0.25


@pytest.mark.parametrize(
    ("cue", "told"), [(TurnCue.COMPLETE, True), (TurnCue.STATEMENT, True), (TurnCue.OPEN, False)]
)
async def test_a_turn_judged_ending_is_told_before_its_end(cue: TurnCue, told: bool) -> None:
    clock = FakeClock()
    heard: list[tuple[str, float]] = []

    def judge(text: str, audio: object) -> TurnJudgement:
        return TurnJudgement(cue, "test")

    listener = Listener(FakeAsr(), vad=LevelVad(), clock=clock, judge=judge)
    listener.likely_end = lambda text: heard.append((text, clock()))
    eot = await speak_then_pause(listener, clock, steps=80)
    await listener.close()
    if told:
        # the speculative transcript's words, before the end of turn was decided
        assert heard and heard[0][0].endswith("samples") and heard[0][1] < eot.at, heard
    else:
        assert heard == []


async def test_close_cancels_work_in_flight() -> None:
    clock = FakeClock()
    asr = FakeAsr(delay=10.0)
    listener = Listener(asr, vad=LevelVad(), clock=clock)
    await play(listener, clock, tone(1.0))
    await play(listener, clock, np.zeros(16000, np.int16))
    await asyncio.sleep(0)
    await listener.close()
    assert asr.cancelled == 1
    before = listener.events.qsize()
    await play(listener, clock, tone(1.0))
    assert listener.events.qsize() == before  # closed: no more events


class ChattyPartials:
    """A partial recognizer that has words after every chunk (live captions at full rate)."""

    ready = True

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.seen: list[object] = []  # first sample of each fed batch's chunks, "reset"

    def feed(self, pcm: np.ndarray) -> str:
        if self.gate is not None:
            self.gate.wait(5)
        self.seen.append(pcm.copy())
        return "words"

    def reset(self) -> None:
        self.seen.append("reset")

    @property
    def resets(self) -> int:
        return sum(1 for x in self.seen if isinstance(x, str))

    def flat(self) -> list[object]:
        """What the recognizer saw: 20 ms frames by their first sample, and "reset"."""
        out: list[object] = []
        for x in self.seen:
            out.extend([x] if isinstance(x, str) else [int(v) for v in x[::320]])
        return out


async def test_control_events_are_never_dropped_partials_are() -> None:
    # The consumer stalls for three whole turns while partials pour in: before the lane, the
    # full queue dropped its oldest events, SpeechStarted / EndOfTurn / FinalTranscript included.
    clock = FakeClock()
    listener = Listener(
        FakeAsr(),
        vad=LevelVad(),
        clock=clock,
        queue_size=2,
        speculative=False,
        partials=ChattyPartials(),
    )
    for _ in range(3):
        await play(listener, clock, tone(0.5), pace=0.001)
        await play(listener, clock, np.zeros(16000, np.int16))
        await asyncio.sleep(0.005)
    await listener.close()
    events = drain(listener)
    control = [type(e).__name__ for e in events if not isinstance(e, PartialTranscript)]
    assert control == ["SpeechStarted", "EndOfTurn", "FinalTranscript"] * 3
    assert [e.turn_id for e in events if isinstance(e, FinalTranscript)] == [1, 2, 3]
    partials = [e for e in events if isinstance(e, PartialTranscript)]
    assert len(partials) <= 2 and listener.dropped >= 1  # data: bounded, counted


async def test_partial_audio_keeps_turn_order_and_every_turn_end() -> None:
    # The partial recognizer is stuck while a long second turn overflows its audio lane. Audio
    # chunks may be dropped (counted), but the end-of-turn marker between the turns must
    # survive (else turn 1's words leak into turn 2), and turn 2's chunks stay in order.
    gate = threading.Event()
    recognizer = ChattyPartials(gate)
    clock = FakeClock()
    executor = ThreadPoolExecutor(1)
    listener = Listener(
        FakeAsr(),
        vad=LevelVad(),
        clock=clock,
        speculative=False,
        partials=recognizer,
        partials_executor=executor,
    )
    try:
        ramp = 1000 + np.arange(16000 * 4) // 320  # each 20 ms frame one level higher
        await play(listener, clock, ramp[:8000].astype(np.int16))
        await asyncio.sleep(0.05)  # the recognizer is now blocked on turn 1's first batch
        await play(listener, clock, np.zeros(16000, np.int16))  # turn 1 ends
        await play(listener, clock, ramp[8000:].astype(np.int16))  # turn 2: 3.5 s, 175 frames
        assert listener.partials_dropped > 0
        gate.set()
        await play(listener, clock, np.zeros(16000, np.int16))
        for _ in range(200):
            if recognizer.resets >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        gate.set()
        await listener.close()
        executor.shutdown()
    seen = recognizer.flat()
    assert seen.count("reset") == 2, seen
    turn2 = [v for v in seen[seen.index("reset") + 1 : -1] if isinstance(v, int) and v > 0]
    assert turn2 and turn2 == sorted(turn2)  # in order
    assert min(turn2) > ramp[8000 - 1]  # nothing of turn 1 after its reset


async def test_new_turn_first_chunk_is_not_requeued_behind_later_ones() -> None:
    # A batch of turn 1 meets turn 2's chunks with no end marker between them (the marker can
    # be lost when the recognizer falls behind at the turn boundary: same-feed edge, closed
    # lane). Turn 2's first chunk used to be put back at the tail, behind its successors.
    recognizer = ChattyPartials()
    listener = Listener(FakeAsr(), vad=LevelVad(), clock=FakeClock(), partials=recognizer)
    try:
        chunk = lambda v: np.full(320, v, np.int16)  # noqa: E731
        listener._push_partial_audio(1, chunk(1))
        listener._push_partial_audio(2, chunk(2))
        listener._push_partial_audio(2, chunk(3))
        listener._push_partial_audio(2, chunk(4))
        listener._push_partial_audio(2, None)
        for _ in range(100):
            if recognizer.resets >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await listener.close()
    assert recognizer.flat() == [1, "reset", 2, 3, 4, "reset"]


async def test_sustained_voice_is_announced_once_per_turn() -> None:
    clock = FakeClock()
    listener = Listener(FakeAsr(), vad=LevelVad(), clock=clock, sustained_ms=300)
    await play(listener, clock, tone(0.2))  # opens a turn, too short to be sustained
    await play(listener, clock, np.zeros(16000, np.int16))
    await play(listener, clock, tone(1.0))
    await play(listener, clock, np.zeros(16000, np.int16))
    await asyncio.sleep(0.01)
    events = drain(listener)
    await listener.close()
    sustained = [e for e in events if isinstance(e, SpeechSustained)]
    assert [e.turn_id for e in sustained] == [2]
    started = next(e for e in events if isinstance(e, SpeechStarted) and e.turn_id == 2)
    assert 0.3 <= sustained[0].at - started.at <= 0.4
    order = [type(e).__name__ for e in events if e.turn_id == 2]
    assert order == ["SpeechStarted", "SpeechSustained", "EndOfTurn", "FinalTranscript"]


async def test_partials_are_emitted_during_speech(speech) -> None:
    from kefu.ai_bridge.listen.asr.partials import PocketsphinxPartials

    clock = FakeClock()
    listener = Listener(FakeAsr(), clock=clock, partials=PocketsphinxPartials())
    await play(listener, clock, np.zeros(8000, np.int16))
    await play(listener, clock, speech, pace=0.002)
    await play(listener, clock, np.zeros(16000, np.int16), pace=0.001)
    await asyncio.sleep(0.1)
    events = drain(listener)
    await listener.close()
    partials = [e for e in events if isinstance(e, PartialTranscript)]
    assert partials and all(p.turn_id == 1 for p in partials)
