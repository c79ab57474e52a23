"""Taps: extra listeners of a track get its frames in order, bounded, and end with it."""

from __future__ import annotations

import asyncio

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from kefu.ai_bridge.tracks import BotAudioTrack
from kefu.rtp.taps import FrameTaps


def frame(n: int) -> av.AudioFrame:
    f = av.AudioFrame.from_ndarray(np.full((1, 160), n, np.int16), format="s16", layout="mono")
    f.sample_rate = 8000
    return f


async def test_a_tap_yields_every_frame_in_order_and_drops_the_oldest_when_behind() -> None:
    taps = FrameTaps()
    assert not taps
    taps.push(frame(0))  # nobody listening: nothing kept
    tap = taps.open(limit=4)
    assert taps
    for n in range(1, 11):
        taps.push(frame(n))
    got = [int((await tap.recv()).to_ndarray()[0, 0]) for _ in range(4)]
    assert got == [7, 8, 9, 10] and tap.dropped == 6
    taps.push(frame(11))
    assert int((await tap.recv()).to_ndarray()[0, 0]) == 11


async def test_a_waiting_reader_wakes_for_the_next_frame_and_for_the_end() -> None:
    taps = FrameTaps()
    tap = taps.open()
    waiting = asyncio.create_task(tap.recv())
    await asyncio.sleep(0)
    taps.push(frame(5))
    assert int((await waiting).to_ndarray()[0, 0]) == 5
    ended = asyncio.create_task(tap.recv())
    await asyncio.sleep(0)
    taps.stop()  # the source ended
    with pytest.raises(MediaStreamError):
        await ended
    assert not taps


async def test_a_stopped_tap_leaves_the_others_alone() -> None:
    taps = FrameTaps()
    first, second = taps.open(), taps.open()
    first.stop()
    taps.push(frame(3))
    assert int((await second.recv()).to_ndarray()[0, 0]) == 3
    with pytest.raises(MediaStreamError):
        await first.recv()


async def test_the_bots_tap_hears_what_the_caller_hears() -> None:
    bot = BotAudioTrack(paced=False, sample_rate=8000)
    tap = bot.taps.open()
    speech = (np.arange(480) % 100).astype(np.int16)
    assert bot.put_nowait(speech, 8000)
    sent = [await bot.recv() for _ in range(4)]
    heard = [await tap.recv() for _ in range(4)]
    assert [f.pts for f in heard] == [f.pts for f in sent]
    assert np.array_equal(
        np.concatenate([f.to_ndarray()[0] for f in heard]),
        np.concatenate([f.to_ndarray()[0] for f in sent]),
    )
    bot.stop()
    with pytest.raises(MediaStreamError):
        await tap.recv()
