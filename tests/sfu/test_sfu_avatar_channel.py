"""The room's binary ``kefu-avatar`` channel: frames reach every open one; a backed-up one
drops (and counts) instead of growing memory; what a client sends on it is ignored."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kefu.sfu.api import PeerSettings, Sfu
from kefu.sfu.participant import AVATAR_LABEL, AVATAR_MAX_BUFFERED
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import until  # noqa: E402

pytestmark = pytest.mark.netns

SETTINGS = PeerSettings(ice_servers=(), ice_host_addresses=("127.0.0.1",))


async def test_bot_frames_reach_open_avatar_channels_and_backlog_drops() -> None:
    sfu = Sfu(SETTINGS)
    bot = await sfu.join_local("r", "bot", "bot", PacedPcmTrack.tone(440))
    clients = [WebRtcClient(), WebRtcClient()]
    try:
        webs = [await c.connect_local(sfu, "r", f"web{i}") for i, c in enumerate(clients)]
        await until(lambda: all(w._avatar is not None for w in webs))
        await until(lambda: all(w._avatar.readyState == "open" for w in webs))
        assert all(w._avatar.label == AVATAR_LABEL for w in webs)

        clients[0].avatar_channel.send(b"\xa1" * 60)  # ignored, never broadcast
        for i in range(5):
            bot.publish_binary(bytes([i]) * 60)
        await until(lambda: all(len(c.avatar_frames) == 5 for c in clients))
        for client in clients:
            assert [f[1][0] for f in client.avatar_frames] == [0, 1, 2, 3, 4]
            assert all(isinstance(t, float) and t > 1e9 for t, _ in client.avatar_frames)
        assert [w.avatar_dropped for w in webs] == [0, 0]
        assert not any(e.get("from") == "web0" for c in clients for e in c.events)

        # a stalled subscriber: its channel reports a backlog above the limit
        stalled = webs[1]._avatar
        webs[1]._avatar = _Backlogged(stalled)
        for _ in range(10):
            bot.publish_binary(b"\x00" * 60)
        assert webs[1].avatar_dropped == 10
        assert webs[1]._avatar.sent == 0
        await until(lambda: len(clients[0].avatar_frames) == 15)
        assert webs[0].avatar_dropped == 0
    finally:
        for client in clients:
            await client.close()
        await sfu.close()


class _Backlogged:
    """An open channel whose SCTP buffer is over the limit."""

    def __init__(self, channel: object) -> None:
        self.label = AVATAR_LABEL
        self.readyState = "open"
        self.bufferedAmount = AVATAR_MAX_BUFFERED + 1
        self.sent = 0
        self._channel = channel

    def send(self, data: bytes) -> None:
        self.sent += 1

    def close(self) -> None:
        pass


async def test_local_members_and_closed_rooms_ignore_binary() -> None:
    sfu = Sfu(SETTINGS)
    bot = await sfu.join_local("r", "bot", "bot", None)
    other = await sfu.join_local("r", "sip", "sip", None)
    bot.publish_binary(b"\xa1" * 60)  # no channel anywhere: nothing happens
    await other.leave()
    await bot.leave()
    await sfu.close()
