"""Two browsers (aiortc clients) and a local participant meet in rooms and hear each other."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kefu.sfu.api import PeerSettings, Sfu
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import tone_strength, until  # noqa: E402

pytestmark = pytest.mark.netns

SETTINGS = PeerSettings(ice_servers=(), ice_host_addresses=("127.0.0.1",))


async def test_two_clients_hear_each_other_forwarded() -> None:
    sfu = Sfu(SETTINGS)
    a = WebRtcClient(mic=PacedPcmTrack.tone(440))
    b = WebRtcClient(mic=PacedPcmTrack.tone(1000))
    try:
        pa = await a.connect_local(sfu, "r1", "alice")
        pb = await b.connect_local(sfu, "r1", "bob")
        await asyncio.wait_for(asyncio.gather(a.connected.wait(), b.connected.wait()), 10)
        await until(lambda: a.heard().size > 48000 and b.heard().size > 48000, within=15)
        assert tone_strength(a.heard()[-48000:], 1000) > 0.5
        assert tone_strength(b.heard()[-48000:], 440) > 0.5
        # forwarded, not transcoded: packets went through the encoded path only
        for sub, pub in ((pa, pb), (pb, pa)):
            _, track = sub.subscriptions[pub.id]
            assert track.stats.mode == "forward"
            assert track.stats.forwarded > 40
            assert track.stats.transcoded == 0
            assert pub.source.stats.fanned_out > 40
        assert a.connect_time is not None and a.connect_time < 5
        assert sfu.rooms()[0].participants == (("alice", "customer"), ("bob", "customer"))
    finally:
        await a.close()
        await b.close()
        await sfu.close()
    assert sfu.rooms() == []


async def test_local_participant_tone_heard_and_hears_client() -> None:
    sfu = Sfu(SETTINGS)
    client = WebRtcClient(mic=PacedPcmTrack.tone(700))
    try:
        local = await sfu.join_local("r2", "sip-1", "sip", PacedPcmTrack.tone(440))
        await client.connect_local(sfu, "r2", "web")
        await asyncio.wait_for(client.connected.wait(), 10)
        mixed = []
        started = time.monotonic()
        # a generous deadline: the loop ends on the sample count (2 s of sound), not the clock
        while time.monotonic() - started < 30 and sum(f.size for f in mixed) < 96000:
            frame = await asyncio.wait_for(local.mixed_audio.recv(), 1)
            assert frame.sample_rate == 48000 and frame.samples == 960
            pcm = frame.to_ndarray().reshape(-1)
            if np.abs(pcm).max() > 0:
                mixed.append(pcm)
        assert tone_strength(np.concatenate(mixed)[-48000:], 700) > 0.5
        await until(lambda: client.heard().size > 48000, within=10)
        assert tone_strength(client.heard()[-48000:], 440) > 0.5
        assert local.mixed_audio.stats.decoded > 40
        await local.leave()
        await local.leave()  # idempotent
        assert [p for p, _ in sfu.rooms()[0].participants] == ["web"]
    finally:
        await client.close()
        await sfu.close()


async def test_events_reach_data_channels() -> None:
    sfu = Sfu(SETTINGS)
    a, b = WebRtcClient(mic=PacedPcmTrack.tone(440)), WebRtcClient()
    try:
        pa = await a.connect_local(sfu, "r3", "alice")
        await b.connect_local(sfu, "r3", "bob", role="agent")
        await asyncio.wait_for(asyncio.gather(a.connected.wait(), b.connected.wait()), 10)
        await until(lambda: b.channel.readyState == "open" and a.channel.readyState == "open")
        pa.publish_event({"type": "transcript", "text": "你好"})
        await until(lambda: any(e.get("type") == "transcript" for e in b.events))
        assert {"type": "transcript", "text": "你好"} in b.events
        b.channel.send('{"type": "hello", "from": "spoof"}')
        await until(lambda: any(e.get("type") == "hello" for e in a.events))
        assert {"type": "hello", "from": "bob"} in a.events
    finally:
        await a.close()
        await b.close()
        await sfu.close()
