"""Two RtpEndpoints on 127.0.0.1 inside a private netns: echo, DTMF, garbage, hold, close.

Run: unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/rtp'
"""

from __future__ import annotations

import asyncio
import fractions
import socket
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError
from rtp_tracks import ToneTrack, median_tone_power

from kefu.codecs.registry import CodecInfo, codec_info
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.packet import RtpPacket
from kefu.rtp.ports import PortAllocator

pytestmark = pytest.mark.netns

HOST = "127.0.0.1"
PCMU = codec_info("PCMU")
OPUS = codec_info("opus")


@pytest.fixture
async def pair() -> AsyncIterator[tuple[RtpEndpoint, RtpEndpoint, PortAllocator]]:
    ports = PortAllocator(40000, 40099)
    a = await RtpEndpoint.open(HOST, ports)
    b = await RtpEndpoint.open(HOST, ports)
    yield a, b, ports
    await a.close()
    await b.close()


def connect(a: RtpEndpoint, b: RtpEndpoint, codec: CodecInfo, pt: int) -> None:
    a.start((HOST, b.local_port), codec, pt, 101)
    b.start((HOST, a.local_port), codec, pt, 101)


async def collect(ep: RtpEndpoint, seconds: float) -> tuple[np.ndarray, list[int], int]:
    """PCM received on ep.inbound for `seconds` after its first frame; pts list; rate."""
    pcm, pts = [], []
    rate = 0
    first = await asyncio.wait_for(ep.inbound.recv(), 2.0)
    deadline = time.monotonic() + seconds
    frame = first
    while True:
        rate = frame.sample_rate
        assert frame.format.name == "s16" and frame.layout.name == "mono"
        assert frame.time_base == fractions.Fraction(1, frame.sample_rate)
        pcm.append(frame.to_ndarray().reshape(-1))
        pts.append(frame.pts)
        if time.monotonic() >= deadline:
            break
        frame = await asyncio.wait_for(ep.inbound.recv(), 1.0)
    return np.concatenate(pcm), pts, rate


@pytest.mark.parametrize(("codec", "pt"), [(PCMU, 0), (OPUS, 111)], ids=["pcmu", "opus"])
async def test_echo_tone(
    pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator], codec: CodecInfo, pt: int
) -> None:
    a, b, _ = pair
    connect(a, b, codec, pt)
    b.play(b.inbound)  # echo
    a.play(ToneTrack(440.0, rate=48000, layout="stereo", fmt="fltp"))
    pcm, pts, rate = await collect(a, 1.0)
    assert rate == codec.sample_rate
    step = codec.frame_samples()
    assert all(q - p == step for p, q in zip(pts, pts[1:], strict=False))
    tail = pcm[-rate // 2 :]  # the last half second, past the start-up
    rms = float(np.sqrt(np.mean(tail.astype(np.float64) ** 2)))
    assert rms > 0.3 * 32767 * 0.5 / np.sqrt(2)  # at least half the sent level came back
    diag = (a.inbound.jitter_buffer.stats if a.inbound.jitter_buffer else None, b.stats)
    assert median_tone_power(tail, rate, 440.0) > 0.8, diag
    # nothing piles up: 50 frames/s in, 50 out, no skips
    assert b.inbound.frames_skipped == 0
    assert a.stats.packets_received > 40 and b.stats.packets_sent > 40
    assert a.stats.dropped_malformed == b.stats.dropped_malformed == 0
    assert b.sender is not None and b.sender.slots_skipped <= 2


async def test_dtmf_end_to_end(pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator]) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.play(ToneTrack(300.0, rate=8000, layout="mono"))
    a.send_dtmf("5")
    a.send_dtmf("#")
    got = [await asyncio.wait_for(b.dtmf.get(), 2.0) for _ in range(2)]
    assert [ev.digit for ev in got] == ["5", "#"]
    assert b.stats.dtmf_received == 2
    # audio resumes after the digits
    frame = await asyncio.wait_for(b.inbound.recv(), 1.0)
    assert frame.samples == 160


async def test_dtmf_without_a_source(pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator]) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.send_dtmf("9")
    ev = await asyncio.wait_for(b.dtmf.get(), 2.0)
    assert ev.digit == "9"


async def test_garbage_and_strangers_are_dropped(
    pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator],
) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.play(ToneTrack(440.0, rate=8000, layout="mono"))
    await asyncio.wait_for(b.inbound.recv(), 2.0)  # latched to A
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind((HOST, 0))
    try:
        for junk in (b"", b"\x00" * 10, b"GET / HTTP/1.1\r\n\r\n", b"\x80" * 11):
            stranger.sendto(junk, (HOST, b.local_port))
        fake = RtpPacket(0, 1, 0, 0xBAD, payload=b"\x00" * 160)
        stranger.sendto(bytes(fake), (HOST, b.local_port))
        stranger.sendto(bytes(fake), (HOST, b.local_port + 1))  # the RTCP port too
        await asyncio.sleep(0.1)
    finally:
        stranger.close()
    st = b.stats
    assert st.dropped_malformed == 4
    assert st.dropped_unlatched == 2
    assert st.latched_address == (HOST, a.local_port)
    before = st.packets_received
    pcm = np.concatenate([(await b.inbound.recv()).to_ndarray().reshape(-1) for _ in range(25)])
    assert b.stats.packets_received > before + 15
    assert median_tone_power(pcm, 8000, 440.0) > 0.8


async def test_a_stranger_racing_the_first_packet_does_not_win_the_call(
    pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator],
) -> None:
    """The default latching (sdp_host): another host's RTP, sent before the caller's first
    packet, is dropped; the caller's media latches and is heard."""
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))  # another host on the netns's loopback
    try:
        for seq in range(3):
            fake = RtpPacket(0, seq, 160 * seq, 0xBAD, payload=b"\x00" * 160)
            stranger.sendto(bytes(fake), (HOST, b.local_port))
        # Queued at b before A's first packet: b reads them first.
        a.play(ToneTrack(440.0, rate=8000, layout="mono"))
        await asyncio.wait_for(b.inbound.recv(), 2.0)
    finally:
        stranger.close()
    st = b.stats
    assert st.dropped_unlatched == 3
    assert st.latched_address == (HOST, a.local_port) and st.remote_ssrc != 0xBAD
    pcm = np.concatenate([(await b.inbound.recv()).to_ndarray().reshape(-1) for _ in range(25)])
    assert median_tone_power(pcm, 8000, 440.0) > 0.8


async def test_hold_and_resume(pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator]) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.play(ToneTrack(440.0, rate=8000, layout="mono"))
    await asyncio.wait_for(b.inbound.recv(), 2.0)
    a.update(direction="recvonly")  # the peer put us on hold
    await asyncio.sleep(0.1)
    held = b.stats.packets_received
    await asyncio.sleep(0.3)
    assert b.stats.packets_received == held
    # the inbound track keeps its clock during the silence (concealment, then silence)
    frames = [await b.inbound.recv() for _ in range(5)]
    assert all(f.samples == 160 for f in frames)
    a.update(direction="sendrecv")
    await asyncio.sleep(0.3)
    assert b.stats.packets_received > held + 10
    assert b.stats.jitter_ms < 20.0  # the gap moved RTP time on, it is not jitter


async def test_source_end_and_replacement(
    pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator],
) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.play(ToneTrack(440.0, rate=8000, layout="mono", frames=10))
    await asyncio.sleep(0.5)
    assert a.sender is not None and a.sender.source_ended == 1
    sent = a.stats.packets_sent
    assert 9 <= sent <= 11
    a.play(ToneTrack(440.0, rate=16000, layout="mono"))  # another format, resampled
    await asyncio.sleep(0.3)
    assert a.stats.packets_sent > sent + 10
    a.play(None)
    await asyncio.sleep(0.05)
    stopped = a.stats.packets_sent
    await asyncio.sleep(0.2)
    assert a.stats.packets_sent == stopped


async def test_codec_change_midcall(pair: tuple[RtpEndpoint, RtpEndpoint, PortAllocator]) -> None:
    a, b, _ = pair
    connect(a, b, PCMU, 0)
    a.play(ToneTrack(440.0))
    first = await asyncio.wait_for(b.inbound.recv(), 2.0)
    assert first.sample_rate == 8000
    a.update(codec=OPUS, payload_type=111)
    b.update(codec=OPUS, payload_type=111)
    for _ in range(100):
        frame = await asyncio.wait_for(b.inbound.recv(), 1.0)
        if frame.sample_rate == 48000:
            break
    assert frame.sample_rate == 48000
    for _ in range(10):  # the new jitter buffer fills while the first Opus packets arrive
        await b.inbound.recv()
    pcm = np.concatenate([(await b.inbound.recv()).to_ndarray().reshape(-1) for _ in range(25)])
    assert median_tone_power(pcm, 48000, 440.0) > 0.8
    assert frame.pts > first.pts


async def test_close_ends_tracks_and_frees_ports() -> None:
    ports = PortAllocator(40100, 40109)
    a = await RtpEndpoint.open(HOST, ports)
    b = await RtpEndpoint.open(HOST, ports)
    connect(a, b, PCMU, 0)
    b.play(b.inbound)
    pending = asyncio.ensure_future(a.inbound.recv())  # parked before any audio
    await asyncio.sleep(0.05)
    await a.close()
    with pytest.raises(MediaStreamError):
        await pending
    with pytest.raises(MediaStreamError):
        await a.inbound.recv()
    await b.close()
    assert ports.in_use == 0
    await a.close()  # idempotent


async def test_ports_exhaust() -> None:
    ports = PortAllocator(40200, 40203)
    eps = [await RtpEndpoint.open(HOST, ports) for _ in range(2)]
    from kefu.errors import ResourceExhausted

    with pytest.raises(ResourceExhausted):
        await RtpEndpoint.open(HOST, ports)
    for ep in eps:
        await ep.close()


@pytest.mark.parametrize("mux", [False, True], ids=["rtcp-port", "rtcp-mux"])
async def test_rtcp_reports_and_on_stats(mux: bool) -> None:
    ports = PortAllocator(40300, 40309)
    a = await RtpEndpoint.open(HOST, ports, rtcp_interval=0.1)
    b = await RtpEndpoint.open(HOST, ports, rtcp_interval=0.1)
    try:
        a.start((HOST, b.local_port), PCMU, 0, 101, rtcp_mux=mux)
        b.start((HOST, a.local_port), PCMU, 0, 101, rtcp_mux=mux)
        reports: list[object] = []
        a.on_stats = reports.append
        a.play(ToneTrack(440.0, rate=8000, layout="mono"))
        b.play(b.inbound)
        for _ in range(50):
            await asyncio.sleep(0.05)
            if a.stats.rtt_ms is not None and b.stats.remote_packets_lost is not None:
                break
        st = a.stats
        assert st.rtt_ms is not None and 0.0 <= st.rtt_ms < 50.0
        assert st.remote_fraction_lost == 0.0 and st.remote_packets_lost == 0
        assert reports
        assert a.stats.dropped_unlatched == b.stats.dropped_unlatched == 0
    finally:
        await a.close()
        await b.close()
