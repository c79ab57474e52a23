"""Room lifecycle, limits, hostile SDP and leak safety of the SFU."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from pathlib import Path

import pytest

from kefu.errors import LocalError, RemoteError, SdpError
from kefu.sfu.api import PeerSettings, Sfu
from kefu.sfu.errors import BadCandidate, BadSdp, BadSignalingState, RoomFull, SfuLimit
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

sys.path.insert(0, str(Path(__file__).parent))
from sfu_util import live_tasks, udp_sockets, until  # noqa: E402

pytestmark = pytest.mark.netns

SETTINGS = PeerSettings(ice_servers=(), ice_host_addresses=("127.0.0.1",))


async def test_limits_and_rooms_close_when_empty() -> None:
    sfu = Sfu(
        PeerSettings(ice_host_addresses=("127.0.0.1",), max_participants_per_room=2, max_rooms=2)
    )
    a = await sfu.join("r1", "a", role="customer")
    b = await sfu.join("r1", "b", role="agent")
    with pytest.raises(RoomFull) as full:
        await sfu.join("r1", "c", role="customer")
    assert full.value.code == "room_full" and isinstance(full.value, LocalError)
    await sfu.join("r2", "c", role="customer")
    with pytest.raises(SfuLimit) as limit:
        await sfu.join("r3", "d", role="customer")
    assert limit.value.code == "node_full"
    assert sfu.room_exists("r1") and len(sfu.rooms()) == 2
    await a.leave()
    await a.leave()
    assert sfu.room_exists("r1")
    await b.leave()
    assert not sfu.room_exists("r1")
    await sfu.join("r3", "d", role="customer")  # a slot came free
    await sfu.close()
    assert sfu.rooms() == []


HOSTILE = [
    ("", "must start with v=0"),
    ("hello", "must start with v=0"),
    ("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n", "no media section"),
    ("v=0\r\n" + "a=x\x01\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", "line 2"),
    ("v=0\r\n" + "a=" + "x" * 70000 + "\r\n", "exceeds"),
    (
        "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
        "c=IN IP4 0.0.0.0\r\na=rtpmap:111 opus/48000/2\r\n",
        "offer rejected",
    ),
    (
        "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio notaport RTP 111\r\n",
        "offer rejected",
    ),
]


@pytest.mark.parametrize(("sdp", "message"), HOSTILE)
async def test_hostile_sdp_rejected(sdp: str, message: str) -> None:
    sfu = Sfu(SETTINGS)
    p = await sfu.join("r", "p", role="customer")
    with pytest.raises(BadSdp, match=message) as err:
        await p.handle_offer(sdp)
    assert isinstance(err.value, SdpError) and isinstance(err.value, RemoteError)
    assert err.value.code == "bad_sdp"
    with pytest.raises(BadSignalingState):
        await p.handle_answer("v=0\r\nm=audio 9 RTP 0\r\n")
    with pytest.raises(BadCandidate):
        await p.add_ice_candidate({"candidate": "candidate:garbage", "sdpMLineIndex": 0})
    await sfu.close()


async def test_hundred_vanishing_participants_leave_nothing_behind() -> None:
    sfu = Sfu(PeerSettings(ice_host_addresses=("127.0.0.1",), idle_timeout_s=5))
    # Sockets that earlier tests left for the garbage collector must not move the baseline.
    gc.collect()
    await asyncio.sleep(0)
    tasks_before, udp_before = live_tasks(), udp_sockets()
    clients = []
    # the first four connect and exchange media, the rest vanish after the offer
    for i in range(100):
        client = WebRtcClient(mic=PacedPcmTrack.tone(440) if i < 4 else None)
        await client.connect_local(sfu, f"room{i // 2}", f"p{i}")
        clients.append(client)
    await asyncio.wait_for(asyncio.gather(*(c.connected.wait() for c in clients[:4])), 15)
    assert udp_sockets() > udp_before + 100
    for client in clients:  # vanish: no leave() on the server side
        await client.close()
    swept = await sfu.sweep(now=sfu._clock() + 6)
    assert swept + sum(len(r.participants) for r in sfu.rooms()) <= 100
    await until(lambda: not sfu.rooms(), within=10)
    await until(lambda: not sfu._tasks, within=10)
    gc.collect()
    await until(lambda: live_tasks() <= tasks_before, within=10)
    assert udp_sockets() == udp_before
    # aiortc's per-receiver decoder threads are joined (executor workers are pooled, not leaks)
    await until(lambda: not [t for t in threading.enumerate() if t.name.endswith("-decoder")])
    await sfu.close()
