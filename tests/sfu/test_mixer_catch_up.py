"""A mix nobody read for a while starts from live audio, not from what its inputs queued.

An agent room's mix for the phone caller is read only from the takeover on: replaying the
queued tail would make the caller hear the bot's last words twice and keep the agent's voice
that far behind for the rest of the call.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from kefu.codecs.opus import OpusEncoder
from kefu.sfu.forward import PacketSource
from kefu.sfu.mixer import FRAME, AudioMixer


def rms(frame) -> float:  # noqa: ANN001 - an av.AudioFrame
    pcm = frame.to_ndarray().astype(np.float64)
    return float(np.sqrt(np.mean(pcm**2)))


async def test_audio_queued_while_nobody_listened_is_not_played() -> None:
    encoder = OpusEncoder(channels=1)
    t = np.arange(FRAME) / 48000
    loud = (12000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    quiet = np.zeros(FRAME, np.int16)
    source = PacketSource("bot", clock=time.monotonic)
    mixer = AudioMixer()
    mixer.add_source("bot", source)
    ts = 0
    for _ in range(40):  # 800 ms of a loud tone while nobody reads the mix
        source.publish(encoder.encode(loud), ts)
        ts += FRAME

    async def live_silence() -> None:  # from now on the source is silent, in real time
        nonlocal ts
        for _ in range(30):
            source.publish(encoder.encode(quiet), ts)
            ts += FRAME
            await asyncio.sleep(0.02)

    feeder = asyncio.create_task(live_silence())
    frames = [await mixer.recv() for _ in range(20)]
    await feeder
    assert max(rms(f) for f in frames) < 1500, [round(rms(f)) for f in frames]
    mixer.stop()


async def test_a_mix_read_continuously_keeps_its_audio() -> None:
    encoder = OpusEncoder(channels=1)
    t = np.arange(FRAME) / 48000
    loud = (12000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    source = PacketSource("caller", clock=time.monotonic)
    mixer = AudioMixer()
    mixer.add_source("caller", source)
    ts = 0

    async def live_tone() -> None:
        nonlocal ts
        for _ in range(30):
            source.publish(encoder.encode(loud), ts)
            ts += FRAME
            await asyncio.sleep(0.02)

    feeder = asyncio.create_task(live_tone())
    frames = [await mixer.recv() for _ in range(25)]
    await feeder
    assert sum(rms(f) > 3000 for f in frames) >= 18, [round(rms(f)) for f in frames]
    mixer.stop()
