"""Joining a room that already has publishers: answer first, then a server offer that keeps
the ids the browser chose; and the SFU's metric counters."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from aiortc.sdp import SessionDescription

from kefu.sfu.api import PeerSettings, Sfu
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import tone_strength, until  # noqa: E402

pytestmark = pytest.mark.netns

SETTINGS = PeerSettings(ice_servers=(), ice_host_addresses=("127.0.0.1",))
CHROMIUM_OFFER = (
    (Path(__file__).with_name("golden") / "chromium_offer.sdp")
    .read_text()
    .replace("\r\n", "\n")
    .replace("\n", "\r\n")
)
MID = "urn:ietf:params:rtp-hdrext:sdes:mid"
LEVEL = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"


def sections(sdp: str) -> list[tuple[str, str | None, list[int], dict[str, int]]]:
    return [
        (
            m.kind,
            m.rtp.muxId,
            [int(f) for f in m.fmt],
            {e.uri: e.id for e in m.rtp.headerExtensions},
        )
        for m in SessionDescription.parse(sdp).media
        if m.kind != "application"
    ]


async def test_chromium_joins_room_with_two_publishers() -> None:
    sfu = Sfu(SETTINGS)
    bots = [
        await sfu.join_local("r", f"bot{i}", "bot", PacedPcmTrack.tone(440 + 200 * i))
        for i in range(2)
    ]
    web = await sfu.join("r", "web", role="customer")
    asked: list[int] = []
    web.on_renegotiation_needed = lambda: asked.append(1)
    try:
        answer = await web.handle_offer(CHROMIUM_OFFER)
        # only the offer's own m-sections: one source rides on the microphone's m-section
        assert [m.rtp.muxId for m in SessionDescription.parse(answer).media] == ["0", "1"]
        assert "a=sendrecv" in answer
        assert sorted(web.subscriptions) == ["bot0", "bot1"]
        await asyncio.sleep(0.05)
        assert asked == []  # not before the connection proves the answer was applied
        offer = await web.create_offer()
        # the new m-section and the old one keep Chromium's ids (aiortc's own: 96, 1, 2)
        assert sections(offer) == [
            ("audio", "0", [111, 9, 0, 8], {MID: 4, LEVEL: 1}),
            ("audio", "2", [111, 9, 0, 8], {MID: 4, LEVEL: 1}),
        ]
        # and aiortc's state agrees with what was offered until the answer comes
        for transceiver in web.pc.getTransceivers():
            assert transceiver._codecs[0].payloadType == 111
            assert {e.uri: e.id for e in transceiver._headerExtensions} == {MID: 4, LEVEL: 1}
    finally:
        for bot in bots:
            await bot.leave()
        await sfu.close()


async def test_third_member_hears_both_and_stats_count() -> None:
    sfu = Sfu(SETTINGS)
    a = WebRtcClient(mic=PacedPcmTrack.tone(1000))
    b = WebRtcClient()
    try:
        await sfu.join_local("r", "bot", "bot", PacedPcmTrack.tone(440))
        await a.connect_local(sfu, "r", "alice")
        pb = await b.connect_local(sfu, "r", "bob")
        answered = b.pc.remoteDescription.sdp
        assert len(SessionDescription.parse(answered).media) == 2  # audio + data, as offered
        await asyncio.wait_for(asyncio.gather(a.connected.wait(), b.connected.wait()), 10)
        # the second source arrives through the server offer made once bob is connected
        await until(lambda: len([t for t in b.heard_by_track() if t.size > 48000]) == 2, 15)
        heard = [t[-48000:] for t in b.heard_by_track()]
        assert sorted(max((440, 1000), key=lambda f: tone_strength(t, f)) for t in heard) == [
            440,
            1000,
        ]
        assert all(t.mid is not None for t in pb.pc.getTransceivers())
        stats = sfu.stats()
        assert stats["participants_joined"] == 3 and stats["participants"] == 3
        assert stats["rooms"] == 1 and stats["participants_left"] == 0
        assert stats["packets_forwarded"] > 100 and stats["transcoded_streams"] == 0
        assert set(stats) >= {"packets_dropped", "packets_transcoded"}
    finally:
        await a.close()
        await b.close()
        await sfu.close()
    stats = sfu.stats()
    assert stats["participants_left"] == 3 and stats["participants"] == stats["rooms"] == 0
