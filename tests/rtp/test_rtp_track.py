"""RtpInboundTrack pacing/concealment and RtpSender pacing, on a hand-driven clock.

The clock only moves when the test moves it, and it is always at or past the next deadline,
so nothing here sleeps on real time.
"""

from __future__ import annotations

import asyncio
import fractions
import random

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from kefu.codecs.registry import codec_info, make_encoder
from kefu.rtp.packet import RtpPacket
from kefu.rtp.sender import RtpSender
from kefu.rtp.session import AudioPacket, RtpSession
from kefu.rtp.track import PROMPT_GRACE_S, RtpInboundTrack

PCMU = codec_info("PCMU")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def tone(i: int, n: int = 160, rate: int = 8000) -> np.ndarray:
    t = (np.arange(n) + i * n) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def mono_frame(pcm: np.ndarray, rate: int = 8000, pts: int = 0) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = rate
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, rate)
    return frame


# --- inbound -----------------------------------------------------------------------------


@pytest.fixture
def inbound() -> tuple[RtpInboundTrack, Clock]:
    clock = Clock()
    track = RtpInboundTrack(clock)
    track.configure(PCMU)
    return track, clock


def push(track: RtpInboundTrack, seq: int, arrival: float) -> None:
    payload = make_encoder("PCMU").encode(tone(seq))
    track.push(AudioPacket(seq, 1000 + 160 * seq, payload, seq == 0, arrival))


async def test_inbound_waits_for_first_packet_then_runs_on_time(
    inbound: tuple[RtpInboundTrack, Clock],
) -> None:
    track, clock = inbound
    pending = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0)
    assert not pending.done()  # no silence before the caller's first packet
    push(track, 0, 0.0)
    first = await pending
    assert (first.pts, first.samples, first.sample_rate) == (0, 160, 8000)
    assert first.format.name == "s16" and first.layout.name == "mono"
    assert first.time_base == fractions.Fraction(1, 8000)
    assert np.abs(first.to_ndarray()).max() > 4000

    clock.t = 0.02
    push(track, 1, 0.02)
    second = await track.recv()
    assert second.pts == 160 and track.frames_concealed == 0

    clock.t = 0.04  # packet 2 is late: the frame is concealed on time
    third = await track.recv()
    assert third.pts == 320 and track.frames_concealed == 1


async def test_inbound_late_consumer_skips_ahead(inbound: tuple[RtpInboundTrack, Clock]) -> None:
    track, clock = inbound
    push(track, 0, 0.0)
    await track.recv()
    for seq in range(1, 30):
        push(track, seq, 0.02 * seq)
    clock.t = 0.5  # the consumer stalled for half a second
    frame = await track.recv()
    assert track.frames_skipped == 24
    assert frame.pts == 160 * 25
    clock.t = 0.52
    assert (await track.recv()).pts == 160 * 26
    stats = track.jitter_buffer.stats if track.jitter_buffer is not None else None
    assert stats is not None and stats.overflow == 0


async def test_inbound_stop_raises(inbound: tuple[RtpInboundTrack, Clock]) -> None:
    track, _ = inbound
    pending = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0)
    track.stop()
    with pytest.raises(MediaStreamError):
        await pending
    with pytest.raises(MediaStreamError):
        await track.recv()
    push(track, 0, 0.0)  # ignored after the end


async def test_inbound_garbage_payload_is_concealed() -> None:
    clock = Clock()
    track = RtpInboundTrack(clock)
    track.configure(codec_info("opus"))
    track.push(AudioPacket(0, 0, b"\xff\xff\xff", False, 0.0))  # not a valid Opus packet
    frame = await track.recv()
    assert frame.samples == 960 and frame.sample_rate == 48000
    assert track.decode_errors == 1 and track.frames_concealed == 1


# --- inbound, prompt (the AI's ear) ------------------------------------------------------


async def test_prompt_inbound_releases_each_packet_on_arrival() -> None:
    clock = Clock()
    track = RtpInboundTrack(clock, prompt=True)
    track.configure(PCMU)
    push(track, 0, 0.0)
    assert (await track.recv()).pts == 0
    # no wait for the next deadline, no target delay: a burst is read at once
    clock.t = 0.005
    for seq in (1, 2, 3):
        push(track, seq, 0.005)
    frames = [await track.recv() for _ in range(3)]
    assert [f.pts for f in frames] == [160, 320, 480]
    assert all(np.abs(f.to_ndarray()).max() > 4000 for f in frames)
    # the next packet is awaited, and released the moment it is pushed
    pending = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0)
    assert not pending.done()
    push(track, 4, 0.006)
    assert (await asyncio.wait_for(pending, 1.0)).pts == 640
    assert track.frames_concealed == 0


async def test_prompt_inbound_conceals_a_frame_overdue_past_the_grace() -> None:
    clock = Clock()
    track = RtpInboundTrack(clock, prompt=True)
    track.configure(PCMU)
    push(track, 0, 0.0)
    await track.recv()  # frame 1 is due at 0.02
    clock.t = 0.02 + PROMPT_GRACE_S  # and never came
    concealed = await asyncio.wait_for(track.recv(), 1.0)
    assert concealed.pts == 160 and track.frames_concealed == 1
    push(track, 1, clock.t + 0.001)  # after its frame was concealed: late, dropped
    push(track, 2, clock.t + 0.001)
    assert np.abs((await track.recv()).to_ndarray()).max() > 4000
    stats = track.jitter_buffer.stats if track.jitter_buffer is not None else None
    assert stats is not None and stats.late == 1


async def test_prompt_inbound_keeps_real_time_when_the_sender_goes_quiet() -> None:
    clock = Clock()
    track = RtpInboundTrack(clock, prompt=True)
    track.configure(PCMU)
    push(track, 0, 0.0)
    await track.recv()
    clock.t = 0.02 + PROMPT_GRACE_S - 0.01  # not yet overdue: the read waits
    pending = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.02)  # real time passes, the hand clock does not
    assert not pending.done()
    clock.t = 0.02 + PROMPT_GRACE_S
    assert (await asyncio.wait_for(pending, 1.0)).pts == 160
    # a reader that stalls for a second gets one concealed frame, not fifty
    clock.t = 1.5
    await track.recv()
    clock.t = 1.5 + 0.02 + PROMPT_GRACE_S - 0.001
    pending = asyncio.ensure_future(track.recv())
    await asyncio.sleep(0.01)
    assert not pending.done()
    pending.cancel()
    assert track.frames_concealed == 2


# --- sender ------------------------------------------------------------------------------


class ScriptedTrack(MediaStreamTrack):
    """Hands out frames at scripted clock times, then ends."""

    kind = "audio"

    def __init__(self, clock: Clock, times: list[float]) -> None:
        super().__init__()
        self.clock, self.times = clock, times
        self.i = 0
        self.done = asyncio.Event()

    async def recv(self) -> av.AudioFrame:
        if self.i >= len(self.times):
            self.done.set()
            raise MediaStreamError
        self.clock.t = self.times[self.i]
        frame = mono_frame(tone(self.i), pts=160 * self.i)
        self.i += 1
        return frame


class StuckTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = False

    async def recv(self) -> av.AudioFrame:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


def make_sender(clock: Clock) -> tuple[RtpSender, list[RtpPacket]]:
    session = RtpSession(
        payload_type=0, clock_rate=8000, remote=("192.0.2.1", 4000), rng=random.Random(3)
    )
    sent: list[RtpPacket] = []
    sender = RtpSender(session, lambda data: sent.append(RtpPacket.parse(data)), clock)
    sender.configure(PCMU)
    return sender, sent


async def run_until_done(sender: RtpSender, track: ScriptedTrack) -> None:
    sender.set_source(track)
    sender.start()
    await asyncio.wait_for(track.done.wait(), 1.0)
    await asyncio.sleep(0)
    await sender.stop()


async def test_sender_paces_skips_gaps_and_bounds_bursts() -> None:
    clock = Clock()
    sender, sent = make_sender(clock)
    # three on time, a 0.44 s stall, then four frames at once (a bounded catch-up burst)
    times = [0.0, 0.02, 0.04, 0.5, 0.52, 0.6, 0.6, 0.6, 0.6]
    await run_until_done(sender, ScriptedTrack(clock, times))
    ts = [p.timestamp - sent[0].timestamp for p in sent]
    assert ts == [0, 160, 320, 4000, 4160, 4320, 4480, 4640, 4800]
    assert [p.marker for p in sent] == [True, False, False, True] + [False] * 5
    seqs = [p.sequence_number for p in sent]
    assert all((b - a) & 0xFFFF == 1 for a, b in zip(seqs, seqs[1:], strict=False))
    assert sender.slots_skipped == 22 and sender.source_ended == 1


async def test_sender_on_hold_drains_source_without_sending() -> None:
    clock = Clock()
    sender, sent = make_sender(clock)
    sender.sending = False
    await run_until_done(sender, ScriptedTrack(clock, [0.0, 0.02, 0.04]))
    assert sent == []
    sender.sending = True
    await run_until_done(sender, ScriptedTrack(clock, [0.06, 0.08]))
    assert [p.marker for p in sent] == [True, False]  # a new talkspurt after the hold


async def test_sender_replaces_a_stuck_source() -> None:
    clock = Clock()
    sender, sent = make_sender(clock)
    stuck = StuckTrack()
    sender.set_source(stuck)
    sender.start()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    track = ScriptedTrack(clock, [0.0, 0.02])
    sender.set_source(track)
    await asyncio.wait_for(track.done.wait(), 1.0)
    await sender.stop()
    assert stuck.cancelled
    assert len(sent) == 2


def test_reframe_converts_any_format_to_exact_frames() -> None:
    sender, _ = make_sender(Clock())
    out = []
    for i in range(10):  # 10 ms of 48 kHz stereo float, 100 ms in all
        data = np.tile((0.3 * np.sin(np.arange(480) * 0.05)).astype(np.float32), (2, 1))
        frame = av.AudioFrame.from_ndarray(data, format="fltp", layout="stereo")
        frame.sample_rate = 48000
        frame.pts = 480 * i
        frame.time_base = fractions.Fraction(1, 48000)
        out += sender._reframe(frame)
    assert all(f.dtype == np.int16 and f.shape == (160,) for f in out)
    assert 4 <= len(out) <= 5  # 800 samples at 8 kHz, less the resampler's delay
    sender.configure(PCMU)
    chunks = [sender._reframe(mono_frame(tone(i, 240))) for i in range(2)]  # 30 ms frames
    assert [len(c) for c in chunks] == [1, 2]


class BrokenTrack(MediaStreamTrack):
    kind = "audio"

    async def recv(self) -> av.AudioFrame:
        raise RuntimeError("an upstream stage crashed")


async def test_sender_survives_a_broken_source() -> None:
    clock = Clock()
    sender, sent = make_sender(clock)
    sender.set_source(BrokenTrack())
    sender.start()
    for _ in range(3):
        await asyncio.sleep(0)
    assert sender.source_errors == 1
    await run_until_done(sender, ScriptedTrack(clock, [0.0, 0.02]))
    assert len(sent) == 2
