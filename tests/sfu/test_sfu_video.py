"""Video in a room: a published :class:`VideoFanout` reaches, encoded by aiortc, exactly the
members that asked for it with ``avatar.mode``; "weights" pauses it without renegotiation;
a slow subscriber loses its own oldest frames; the publisher's leave ends every track."""

from __future__ import annotations

import asyncio
import fractions
import json
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from kefu.sfu.api import PeerSettings, Sfu
from kefu.sfu.video import QUEUE_FRAMES, VideoFanout
from loadtest.video_record import Y4mRecorder, read_y4m
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import until  # noqa: E402

SETTINGS = PeerSettings(ice_servers=(), ice_host_addresses=("127.0.0.1",))


def _frame(k: int, size: int = 128) -> av.VideoFrame:
    """Frame ``k``: a white square whose left edge moves 4 px per frame on a dark field."""
    rgb = np.full((size, size, 3), 30, np.uint8)
    x = (4 * k) % (size - 32)
    rgb[48:80, x : x + 32] = 230
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    frame.pts = k * 3000
    frame.time_base = fractions.Fraction(1, 90000)
    return frame


async def _publish(fanout: VideoFanout, frames: int, start: int = 0) -> None:
    """Frames ``start`` .. ``start + frames - 1`` at 30 fps (pts only ever grows, as a real
    source's: a receiver drops frames whose RTP time goes back)."""
    for k in range(start, start + frames):
        fanout.publish(_frame(k))
        await asyncio.sleep(1 / 30)


def _receiving_video(client: WebRtcClient) -> bool:
    """The server's offer with the video was answered: the client has a video m-section."""
    return any(
        t.kind == "video" and t.currentDirection == "recvonly" for t in client.pc.getTransceivers()
    )


def _ask(client: WebRtcClient, mode: str) -> None:
    client.channel.send(json.dumps({"type": "avatar.mode", "mode": mode}))


@pytest.mark.netns
async def test_video_reaches_only_members_that_ask_and_pauses_without_renegotiation(
    tmp_path: Path,
) -> None:
    sfu = Sfu(SETTINGS)
    await sfu.join_local("r", "bot", "bot", PacedPcmTrack.tone(440))
    fanout = VideoFanout("bot")
    assert sfu.publish_video("r", "bot", fanout)
    assert not sfu.publish_video("r", "nobody", VideoFanout("nobody"))
    recorder = Y4mRecorder(tmp_path / "seen.y4m")
    watcher, other = WebRtcClient(video=recorder), WebRtcClient()
    try:
        web = await watcher.connect_local(sfu, "r", "web0")
        quiet = await other.connect_local(sfu, "r", "web1")
        await until(lambda: web.avatar_mode == "video")  # sent on channel open
        await until(lambda: "bot" in web.video and _receiving_video(watcher))
        assert fanout.wanted and fanout.subscriber_count == 1
        assert quiet.video == {} and quiet.avatar_mode == "weights"

        await _publish(fanout, 45)
        await until(lambda: watcher.video_frames >= 30)
        assert other.video_frames == 0
        recorder.close()
        lumas, times = read_y4m(tmp_path / "seen.y4m")
        assert lumas.shape[1:] == (128, 128) and len(times) == len(lumas) >= 30
        assert times == sorted(times)
        # the square moves: the picture is the publisher's, not a frozen or blank frame
        columns = [int(np.argmax(luma[64] > 128)) for luma in lumas[-10:]]
        assert len(set(columns)) >= 5
        assert all(luma[10, 64] < 60 for luma in lumas)  # above the square: dark

        # weights: the track stays negotiated but gets nothing; video again: it resumes
        transceivers = len(web.pc.getTransceivers())
        _ask(watcher, "weights")
        await until(lambda: not fanout.wanted)
        before = watcher.video_frames
        await _publish(fanout, 15, start=45)
        await asyncio.sleep(0.3)
        assert watcher.video_frames - before <= QUEUE_FRAMES  # only what was already queued
        _ask(watcher, "video")
        await until(lambda: fanout.wanted)
        await _publish(fanout, 15, start=60)
        await until(lambda: watcher.video_frames >= before + 8)
        assert len(web.pc.getTransceivers()) == transceivers
        assert not any(e.get("type") == "avatar.mode" for e in other.events)  # not broadcast
    finally:
        for client in (watcher, other):
            await client.close()
        await sfu.close()


async def test_fanout_bounds_each_subscriber_and_counts_what_it_drops() -> None:
    woke: list[bool] = []
    fanout = VideoFanout("bot", on_wanted=woke.append)
    slow, fast = fanout.subscribe(), fanout.subscribe(wanted=False)
    assert woke == [True] and fanout.wanted
    for k in range(10):
        fanout.publish(_frame(k, 64))
    assert len(slow.queue) == QUEUE_FRAMES and slow.dropped == 10 - QUEUE_FRAMES
    assert len(fast.queue) == 0 and fast.dropped == 0
    got = await slow.recv()
    assert got.pts == 8 * 3000  # the oldest were dropped, the newest kept in order
    fanout.set_wanted(slow, False)
    assert woke == [True, False]
    fanout.set_wanted(fast, True)
    slow.stop()
    assert fanout.subscriber_count == 1 and fanout.wanted
    fanout.close()
    with pytest.raises(MediaStreamError):
        await fast.recv()
    late = fanout.subscribe()  # after close: a dead track, never a hang
    with pytest.raises(MediaStreamError):
        await late.recv()


@pytest.mark.netns
async def test_publisher_leaving_ends_the_video_and_bad_modes_change_nothing(
    tmp_path: Path,
) -> None:
    sfu = Sfu(SETTINGS)
    bot = await sfu.join_local("r", "bot", "bot", PacedPcmTrack.tone(440))
    fanout = VideoFanout("bot")
    sfu.publish_video("r", "bot", fanout)
    client = WebRtcClient(video=Y4mRecorder(tmp_path / "v.y4m"))
    try:
        web: Any = await client.connect_local(sfu, "r", "web0")
        await until(lambda: "bot" in web.video)
        for bad in ('{"type":"avatar.mode","mode":"hologram"}', '{"type":"avatar.mode"}'):
            client.channel.send(bad)
        await asyncio.sleep(0.2)
        assert web.avatar_mode == "video"
        track = web.video["bot"][1]
        await bot.leave()
        assert web.video == {} and track.readyState == "ended"
        assert fanout.subscriber_count == 0
    finally:
        await client.close()
        await sfu.close()
