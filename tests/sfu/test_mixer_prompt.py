"""A prompt mix (the AI's ear) hands on each packet's audio as it arrives.

A paced mix holds two frames back and releases on its clock: right for a loudspeaker, 40-60
ms of extra delay for a recogniser deciding that the caller stopped talking. These tests
judge what comes out of ``recv()`` after each packet, not how long it took.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from kefu.codecs.opus import OpusDecoder, OpusEncoder
from kefu.sfu.forward import PacketSource
from kefu.sfu.mixer import FRAME, AudioMixer

RATE = 48000


def tone(hz: float, index: int) -> np.ndarray:
    t = (np.arange(FRAME) + index * FRAME) / RATE
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def pcm(frame) -> np.ndarray:  # noqa: ANN001 - an av.AudioFrame
    return frame.to_ndarray().reshape(-1).astype(np.float64)


def dominant_hz(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum)) * RATE / len(samples)


async def test_each_packet_comes_out_with_the_next_read() -> None:
    encoder, reference = OpusEncoder(channels=1), OpusDecoder()
    source = PacketSource("caller", clock=time.monotonic)
    mixer = AudioMixer(prompt=True)
    mixer.add_source("caller", source)
    try:
        await mixer.recv()  # being read (a mix nobody read yet drops what was queued)
        for i in range(10):
            payload = encoder.encode(tone(440, i))
            source.publish(payload, i * FRAME)
            expected = reference.decode(payload).astype(np.float64)
            got = pcm(await mixer.recv())
            # the very packet just published, not silence while a buffer fills
            assert np.allclose(got, expected, atol=2), i
        assert mixer.stats.concealed == 0
    finally:
        mixer.stop()


async def test_a_paced_mix_holds_the_first_packet_back() -> None:
    encoder = OpusEncoder(channels=1)
    source = PacketSource("caller", clock=time.monotonic)
    mixer = AudioMixer()
    mixer.add_source("caller", source)
    try:
        await mixer.recv()
        source.publish(encoder.encode(tone(440, 0)), 0)
        assert np.max(np.abs(pcm(await mixer.recv()))) == 0  # buffering two frames first
    finally:
        mixer.stop()


async def test_two_callers_are_mixed_once_both_frames_are_there() -> None:
    enc_a, enc_b = OpusEncoder(channels=1), OpusEncoder(channels=1)
    a = PacketSource("a", clock=time.monotonic)
    b = PacketSource("b", clock=time.monotonic)
    mixer = AudioMixer(prompt=True)
    mixer.add_source("a", a)
    mixer.add_source("b", b)
    try:
        await mixer.recv()
        # both sounding
        a.publish(enc_a.encode(tone(440, 0)), 0)
        b.publish(enc_b.encode(tone(1000, 0)), 0)
        await mixer.recv()
        a.publish(enc_a.encode(tone(440, 1)), FRAME)
        pending = asyncio.ensure_future(mixer.recv())
        for _ in range(5):
            await asyncio.sleep(0)
        assert not pending.done()  # b's frame is due but not late yet: wait for it
        b.publish(enc_b.encode(tone(1000, 1)), FRAME)
        mixed = pcm(await pending)
        spectrum = np.abs(np.fft.rfft(mixed))
        hz = np.fft.rfftfreq(mixed.size, 1 / RATE)
        near = lambda f: float(spectrum[np.abs(hz - f) < 60].max())  # noqa: E731
        assert near(440) > 0.3 * near(1000) and near(1000) > 0.3 * near(440)
    finally:
        mixer.stop()


async def test_a_late_packet_is_concealed_then_played_without_loss() -> None:
    encoder = OpusEncoder(channels=1)
    source = PacketSource("caller", clock=time.monotonic)
    mixer = AudioMixer(prompt=True)
    mixer.add_source("caller", source)
    try:
        await mixer.recv()
        for i in range(3):
            source.publish(encoder.encode(tone(440, i)), i * FRAME)
            await mixer.recv()
        concealed = await mixer.recv()  # nothing came: after the grace, concealment
        assert mixer.stats.concealed == 1
        assert abs(dominant_hz(pcm(concealed)) - 440) < 60  # PLC continues the voice
        late = encoder.encode(tone(880, 3))
        source.publish(late, 3 * FRAME)
        assert abs(dominant_hz(pcm(await mixer.recv())) - 880) < 60  # the late one, not lost
    finally:
        mixer.stop()


async def test_with_nobody_sounding_the_mix_is_silence_frame_after_frame() -> None:
    mixer = AudioMixer(prompt=True)
    mixer.add_source("caller", PacketSource("caller", clock=time.monotonic))
    try:
        frames = [await mixer.recv() for _ in range(3)]
        assert [f.pts for f in frames] == [0, FRAME, 2 * FRAME]
        assert all(np.max(np.abs(pcm(f))) == 0 for f in frames)
    finally:
        mixer.stop()
