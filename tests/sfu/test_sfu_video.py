"""Video in a room: a published :class:`VideoFanout` reaches, encoded by aiortc, exactly the
members that asked for it with ``avatar.mode``; "weights" pauses it without renegotiation;
a slow subscriber loses its own oldest frames; the publisher's leave ends every track. A
browser's camera is published the same way (:mod:`kefu.sfu.camera`), late joiners included,
never back to its sender, and oversized or garbage video costs no memory and no audio."""

from __future__ import annotations

import asyncio
import fractions
import json
import os
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from aiortc.rtp import RtpPacket

from kefu.sfu import camera
from kefu.sfu.api import PeerSettings, Sfu
from kefu.sfu.camera import DECODER_BACKLOG, DecoderBacklog
from kefu.sfu.video import QUEUE_FRAMES, VideoFanout
from loadtest.video_record import Y4mRecorder, read_y4m
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import tone_strength, until  # noqa: E402

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


class MovingSquare(MediaStreamTrack):
    """A camera: :func:`_frame` ``k`` at 30 fps, paced on the loop clock."""

    kind = "video"

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0
        self._start: float | None = None

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        self._start = loop.time() if self._start is None else self._start
        await asyncio.sleep(max(0.0, self._start + self.sent / 30 - loop.time()))
        frame = _frame(self.sent)
        self.sent += 1
        return frame


def _check_moving_square(path: Path, frames: int) -> None:
    """The recording shows :func:`_frame`'s square moving on a dark field."""
    lumas, times = read_y4m(path)
    assert lumas.shape[1:] == (128, 128) and len(times) == len(lumas) >= frames
    assert times == sorted(times)
    columns = [int(np.argmax(luma[64] > 128)) for luma in lumas[-10:]]
    assert len(set(columns)) >= 5
    assert all(luma[10, 64] < 60 for luma in lumas)  # above the square: dark


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


@pytest.mark.netns
async def test_a_callers_camera_reaches_members_that_ask_late_joiners_too(tmp_path: Path) -> None:
    sfu = Sfu(SETTINGS)
    square = MovingSquare()
    sender = WebRtcClient(mic=PacedPcmTrack.tone(440))
    sender.pc.addTrack(square)
    watcher = WebRtcClient(video=Y4mRecorder(tmp_path / "seen.y4m"))
    quiet = WebRtcClient()
    late = WebRtcClient(video=Y4mRecorder(tmp_path / "late.y4m"))
    clients = (sender, watcher, quiet, late)
    try:
        cam: Any = await sender.connect_local(sfu, "r", "cam")
        web = await watcher.connect_local(sfu, "r", "web0")
        silent = await quiet.connect_local(sfu, "r", "web1")
        await until(lambda: "cam" in web.video and _receiving_video(watcher))
        assert cam.camera is not None and cam.camera.backlog is not None  # bounded decoder
        await until(lambda: watcher.video_frames >= 30)
        assert quiet.video_frames == 0 and silent.video == {} and cam.video == {}
        assert watcher.video is not None
        watcher.video.close()
        _check_moving_square(tmp_path / "seen.y4m", 30)

        # a late joiner's encoder starts with a key frame: a picture at once
        joined = await late.connect_local(sfu, "r", "web2")
        await until(lambda: late.video_frames >= 15)
        assert late.video is not None
        late.video.close()
        _check_moving_square(tmp_path / "late.y4m", 15)
        assert tone_strength(quiet.heard(), 440) > 0.5  # the camera's sender is heard as ever

        # the publisher leaves: every subscriber's track ends, the reading task with it
        tracks = [web.video["cam"][1], joined.video["cam"][1]]
        publisher = cam.camera
        await cam.leave()
        assert web.video == {} and joined.video == {}
        assert all(track.readyState == "ended" for track in tracks)
        assert publisher.ended and publisher.fanout.subscriber_count == 0
        assert publisher._task.done()
        assert not sfu._rooms["r"].video_sources
    finally:
        for client in clients:
            await client.close()
        await sfu.close()


@pytest.mark.netns
async def test_camera_beside_the_avatar_never_back_to_its_sender_and_bad_video_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(camera, "MAX_PIXELS", 64 * 64)  # the square's 128×128 is "too big"
    sfu = Sfu(SETTINGS)
    await sfu.join_local("r", "bot", "bot", PacedPcmTrack.tone(440))
    avatar = VideoFanout("bot")
    sfu.publish_video("r", "bot", avatar)
    sender = WebRtcClient(mic=PacedPcmTrack.tone(660), video=Y4mRecorder(tmp_path / "s.y4m"))
    sender.pc.addTrack(MovingSquare())
    sender.pc.addTrack(MovingSquare())  # a second camera: dropped, as before
    watcher = WebRtcClient(video=Y4mRecorder(tmp_path / "w.y4m"))
    try:
        cam: Any = await sender.connect_local(sfu, "r", "cam")
        web: Any = await watcher.connect_local(sfu, "r", "web0")
        await until(lambda: set(web.video) == {"bot", "cam"} and "bot" in cam.video)
        assert set(cam.video) == {"bot"}  # never its own camera
        assert sorted(sfu._rooms["r"].video_sources) == ["bot", "cam"]
        await _publish(avatar, 30)
        await until(lambda: watcher.video_frames >= 15 and sender.video_frames >= 15)
        publisher = cam.camera
        await until(lambda: publisher.oversize >= 15)
        assert web.video["cam"][1].frames == 0  # too big: dropped before any encoder

        # garbage on the camera's m-section: aiortc drops or fails to decode it, memory stays
        # flat and the audio goes on
        receiver = next(
            t.receiver for t in cam.pc.getTransceivers() if t.receiver.track is publisher.track
        )
        pt = next(c.payloadType for c in receiver._RTCRtpReceiver__codecs.values())
        heard = cam.source.stats.received
        for k in range(600):
            packet = RtpPacket(payload_type=pt, sequence_number=k % 65536, timestamp=k * 3000)
            packet.marker = 1
            packet.ssrc = 1234
            packet.payload = os.urandom(1 + k % 900)
            await receiver._handle_rtp_packet(packet, 0)
            assert isinstance(publisher.backlog, DecoderBacklog)
            assert publisher.backlog.qsize() <= DECODER_BACKLOG
        await until(lambda: cam.source.stats.received > heard + 25)
        assert not publisher.ended
    finally:
        for client in (sender, watcher):
            await client.close()
        await sfu.close()


def test_decoder_backlog_is_bounded_and_always_takes_the_stop() -> None:
    asked: list[bool] = []
    backlog = DecoderBacklog(3, lambda: asked.append(True))
    for k in range(10):
        backlog.put(k)
    assert backlog.qsize() == 3 and backlog.dropped == 7 and len(asked) == 7
    backlog.put(None)
    assert [backlog.get_nowait() for _ in range(4)] == [0, 1, 2, None]
