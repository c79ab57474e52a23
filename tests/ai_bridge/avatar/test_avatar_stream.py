"""The per-call avatar stream: clips follow the queued bot audio, the pump sends 60-byte
frames at its fps, a barge-in rests the mouth on the next frame."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from kefu.ai_bridge.avatar.arkit import INDEX, SPEECH_OWNED
from kefu.ai_bridge.avatar.stream import AvatarStream
from kefu.ai_bridge.avatar.wire import FRAME_BYTES, FrameFlags, decode_frame, sequence_distance
from kefu.ai_bridge.barge import FloorAction
from kefu.ai_bridge.speak.base import PhonemeMark, TtsChunk
from kefu.ai_bridge.tracks import BotAudioTrack

RATE = 22050


class Done(Exception):
    pass


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds


def chunk(seconds: float = 1.0) -> TtsChunk:
    """'aa' for the whole chunk: the jaw is wide open in the middle."""
    ms = seconds * 1000
    marks = (PhonemeMark("a", 0.0, ms),)
    return TtsChunk(np.zeros(int(RATE * seconds), np.int16), RATE, "ah", marks)


def make(track: BotAudioTrack | None = None) -> tuple[AvatarStream, list[bytes], FakeClock]:
    clock = FakeClock()
    sent: list[bytes] = []
    stream = AvatarStream(track or BotAudioTrack(paced=False), sent.append, clock=clock)
    return stream, sent, clock


def test_track_exposes_queued_seconds_and_media_clock() -> None:
    track = BotAudioTrack(paced=False)
    assert track.queued_s == 0.0 and track.media_s(5.0) == 0.0
    assert track.put_nowait(np.zeros(RATE * 2, np.int16), RATE)
    assert track.queued_s == pytest.approx(2.0, abs=1e-3)


def test_clip_starts_after_the_audio_queued_ahead() -> None:
    track = BotAudioTrack(paced=False)
    stream, _, clock = make(track)
    stream.tap(chunk(), 1)
    assert stream.face._clips[0].start_s == pytest.approx(clock.t)
    track.put_nowait(np.zeros(int(RATE * 1.5), np.int16), RATE)  # 1.5 s ahead of the next
    out = chunk()
    assert stream.tap(out, 1) is out  # a tap passes the chunk through untouched
    starts = sorted(c.start_s for c in stream.face._clips)
    assert starts[1] == pytest.approx(clock.t + 1.5, abs=1e-3)
    # no marks (a pause): no clip
    stream.tap(TtsChunk(np.zeros(100, np.int16), RATE, ""), 1)
    assert len(stream.face._clips) == 2


async def test_pump_sends_60_byte_frames_at_the_fps() -> None:
    clock = FakeClock()
    sent: list[bytes] = []
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sent) >= 31:
            raise Done
        clock.t += seconds

    stream = AvatarStream(BotAudioTrack(paced=False), sent.append, clock=clock, sleep=sleep)
    start = clock.t
    stream.tap(chunk(), 1)
    with pytest.raises(Done):
        await stream.run()
    assert sleeps[:-1] == pytest.approx([1 / 30] * 30)
    assert len(sent) == 31 and clock.t == pytest.approx(start + 30 / 30)
    frames = [decode_frame(f) for f in sent]
    assert all(len(f) == FRAME_BYTES for f in sent)
    assert [f.sequence for f in frames] == list(range(31))
    assert all(
        sequence_distance(a.sequence, b.sequence) == 1 for a, b in itertools.pairwise(frames)
    )
    assert FrameFlags.SPEAKING in frames[15].flags
    assert frames[15].weights[INDEX["jawOpen"]] > 0.3
    assert all(0.0 <= w <= 1.0 for f in frames for w in f.weights)


async def test_barge_in_rests_the_mouth_on_the_next_frame() -> None:
    stream, _, clock = make()
    stream.tap(chunk(2.0), 1)
    clock.t += 0.5
    speaking = decode_frame(stream.frame(clock.t))
    assert speaking.weights[INDEX["jawOpen"]] > 0.3
    stream.on_floor(FloorAction.BARGE_IN)
    clock.t += 1 / 30
    rest = decode_frame(stream.frame(clock.t))
    assert FrameFlags.RESET in rest.flags and FrameFlags.SPEAKING not in rest.flags
    assert all(rest.weights[i] == 0.0 for i in SPEECH_OWNED)
    later = decode_frame(stream.frame(clock.t + 1 / 30))
    assert FrameFlags.RESET not in later.flags


def test_hold_rests_and_silence_closes_and_caller_turns_listen() -> None:
    stream, _, clock = make()
    stream.caller_started()
    assert FrameFlags.LISTENING in decode_frame(stream.frame(clock.t)).flags
    stream.caller_stopped()
    stream.tap(chunk(2.0), 1)
    clock.t += 0.5
    stream.frame(clock.t)
    stream.on_floor(FloorAction.HOLD)
    clock.t += 1 / 30
    held = decode_frame(stream.frame(clock.t))
    assert all(held.weights[i] == 0.0 for i in SPEECH_OWNED)
    stream.on_floor(FloorAction.BACKCHANNEL)
    stream.on_floor(FloorAction.SILENCE)  # a takeover
    clock.t += 1 / 30
    assert FrameFlags.RESET in decode_frame(stream.frame(clock.t)).flags


async def test_start_and_close_own_one_task() -> None:
    sent: list[bytes] = []
    stream = AvatarStream(BotAudioTrack(paced=False), sent.append, fps=100)
    stream.start()
    stream.start()
    await asyncio.sleep(0.05)
    await stream.close()
    count = len(sent)
    await asyncio.sleep(0.03)
    assert count >= 1 and len(sent) == count


class RecordingStream:
    """Stands in for an AvatarStream: records what the agent tells it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def tap(self, chunk: TtsChunk, turn_id: int | None) -> TtsChunk:
        self.calls.append("tap")
        return chunk

    def reply_emotion(self, emotion: str) -> None:
        self.calls.append(f"emotion:{emotion}")

    def caller_started(self) -> None:
        self.calls.append("caller_started")

    def caller_stopped(self) -> None:
        self.calls.append("caller_stopped")

    def on_floor(self, action: FloorAction) -> None:
        self.calls.append(action.value)

    async def close(self) -> None:
        self.calls.append("close")


async def test_agent_hooks_feed_the_avatar_and_rooms_attach_one() -> None:
    from kefu.ai_bridge.agent import CallAgent
    from kefu.ai_bridge.avatar.stream import attach_room_avatar
    from kefu.ai_bridge.services import AiServices
    from kefu.ai_bridge.settings import AiSettings

    agent = CallAgent(AiServices(AiSettings()), "c1", BotAudioTrack(paced=False), publish=print)
    assert agent.avatar is None  # SIP calls and "off": no hooks run
    agent.pause()  # takeover without an avatar: nothing to close
    agent.resume()
    fake = RecordingStream()
    agent.attach_avatar(fake)  # type: ignore[arg-type]
    assert agent.responder.taps == (fake.tap,)
    assert agent.responder.emotion_sinks == (fake.reply_emotion,)  # the reply's tone
    agent.pause()  # a takeover silences the bot: the mouth closes
    assert fake.calls == ["silence"]
    await agent.close()
    assert fake.calls[-1] == "close"

    sent: list[bytes] = []
    room_agent = CallAgent(
        AiServices(AiSettings()), "r1", BotAudioTrack(paced=False), publish=print
    )
    stream = attach_room_avatar(room_agent, sent.append)
    assert stream is not None and room_agent.avatar is stream
    await asyncio.sleep(0.1)
    await room_agent.close()
    assert sent and all(len(f) == FRAME_BYTES for f in sent)
    off = CallAgent(
        AiServices(AiSettings(avatar="off")), "r2", BotAudioTrack(paced=False), publish=print
    )
    assert attach_room_avatar(off, sent.append) is None and off.avatar is None
    await off.close()
    assert attach_room_avatar(object(), sent.append) is None  # a test double without settings


def test_the_face_takes_on_the_reply_tone_when_that_reply_starts_playing() -> None:
    from kefu.ai_bridge.avatar.arkit import INDEX

    clock = [100.0]

    class Track:
        queued_s = 0.5  # the reply starts after half a second of audio already queued

        def media_s(self, now: float) -> float:
            return now

    stream = AvatarStream(Track(), lambda _: None, clock=lambda: clock[0])
    stream.reply_emotion("happy")
    stream.tap(_silent_chunk(), turn_id=1)
    smile = INDEX["mouthSmileLeft"]
    from kefu.ai_bridge.avatar.wire import decode_frame

    def smile_at(t: float) -> float:
        clock[0] = t
        return float(decode_frame(stream.frame(t)).weights[smile])

    assert smile_at(100.2) < 0.02  # the earlier audio still plays: no smile yet
    assert smile_at(101.6) > 0.25  # eased in after the reply began at 100.5
    stream.reply_emotion("no-such-tone")  # ignored, never raised into the call
    stream.tap(_silent_chunk(), turn_id=2)
    assert smile_at(103.0) > 0.25


def _silent_chunk():
    import numpy as np

    from kefu.ai_bridge.speak.base import TtsChunk

    return TtsChunk(np.zeros(2205, np.int16), 22050, "")


def test_a_chunk_without_phoneme_timings_still_moves_the_mouth() -> None:
    import numpy as np

    from kefu.ai_bridge.avatar.arkit import INDEX
    from kefu.ai_bridge.avatar.wire import decode_frame
    from kefu.ai_bridge.speak.base import TtsChunk

    clock = [50.0]

    class Track:
        queued_s = 0.0

        def media_s(self, now: float) -> float:
            return now

    stream = AvatarStream(Track(), lambda _: None, clock=lambda: clock[0])
    t = np.arange(22050) / 22050
    loud = (12000 * np.sin(2 * np.pi * 200 * t)).astype(np.int16)
    stream.tap(TtsChunk(loud, 22050, "a recorded prompt"), turn_id=None)  # no phonemes
    clock[0] = 50.5
    assert decode_frame(stream.frame(50.5)).weights[INDEX["jawOpen"]] > 0.3
