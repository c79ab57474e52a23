"""A server candidate never reaches the client before the answer/offer it belongs to.

The SFU reports candidates from inside handle_offer/create_offer (aiortc gathers in
setLocalDescription); browsers refuse a candidate that has no remote description yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from signaling.fakes import SECRET, FakeParticipant, FakeSfu, FakeSocket, msg, settle, token

from kefu.sfu.api import PeerSettings, Sfu
from kefu.signaling.hub import SignalingHub
from kefu.signaling.settings import SignalingSettings
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient


@pytest.fixture
def hub(make_hub: Callable[..., SignalingHub], settings: SignalingSettings) -> SignalingHub:
    return make_hub(settings)


CAND = {"candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host", "sdpMid": "0", "sdpMLineIndex": 0}


async def join(hub: SignalingHub, sfu: FakeSfu) -> tuple[FakeSocket, Any, FakeParticipant]:
    sock = FakeSocket()
    conn = await hub.open(sock, "10.0.0.1", token())
    assert conn is not None
    await hub.receive(conn, msg("join", room="r1"))
    await settle()
    return sock, conn, sfu.all[-1]


def trickling(part: FakeParticipant, *, fail: bool = False) -> None:
    """Make the fake SFU behave like aiortc: candidates come before the SDP is returned."""
    handle_offer, create_offer = part.handle_offer, part.create_offer

    async def offer_in(sdp: str) -> str:
        assert part.on_ice_candidate is not None
        part.on_ice_candidate(CAND)
        await asyncio.sleep(0)
        part.on_ice_candidate(None)
        if fail:
            raise ValueError("SDP rejected after gathering")
        return await handle_offer(sdp)

    async def offer_out() -> str:
        assert part.on_ice_candidate is not None
        part.on_ice_candidate(None)
        return await create_offer()

    part.handle_offer = offer_in  # type: ignore[method-assign]
    part.create_offer = offer_out  # type: ignore[method-assign]


def after_joined(sock: FakeSocket) -> list[tuple[str, Any]]:
    return [(m["type"], m.get("candidate", m.get("sdp"))) for m in sock.sent[1:]]


async def test_answer_goes_before_its_candidates(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn, part = await join(hub, sfu)
    trickling(part)
    await hub.receive(conn, msg("offer", sdp="v=0 client"))
    await settle()
    assert after_joined(sock) == [
        ("answer", "answer-to:v=0 client"),
        ("candidate", CAND),
        ("candidate", None),
    ]
    # outside a negotiation candidates go straight out
    assert part.on_ice_candidate is not None
    part.on_ice_candidate(CAND)
    await settle()
    assert after_joined(sock)[-1] == ("candidate", CAND)


async def test_server_offer_goes_before_its_candidates(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn, part = await join(hub, sfu)
    trickling(part)
    assert part.on_renegotiation_needed is not None
    part.on_renegotiation_needed()
    await settle()
    assert after_joined(sock) == [("offer", "server-offer-1"), ("candidate", None)]


async def test_candidates_of_a_failed_answer_are_not_sent(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn, part = await join(hub, sfu)
    trickling(part, fail=True)
    await hub.receive(conn, msg("offer", sdp="v=0 client"))
    await settle()
    assert [m["type"] for m in sock.sent[1:]] == ["error"]


async def test_order_kept_for_a_detached_session(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn, part = await join(hub, sfu)
    trickling(part)
    session = conn.session
    await hub.disconnected(conn)
    assert part.on_renegotiation_needed is not None
    part.on_renegotiation_needed()
    await settle()
    sock2 = FakeSocket()
    conn2 = await hub.open(sock2, "10.0.0.1", token())
    await hub.receive(conn2, msg("resume", session=session.id, token=token()))
    await settle()
    assert [m["type"] for m in sock2.sent] == ["joined", "offer", "candidate"]


@pytest.mark.netns
async def test_real_sfu_answer_precedes_end_of_candidates() -> None:
    """The same through the real Sfu and an aiortc client's offer."""
    sfu = Sfu(PeerSettings(ice_host_addresses=("127.0.0.1",)))
    hub = SignalingHub(sfu, SignalingSettings(jwt_secret=SECRET))
    client = WebRtcClient(mic=PacedPcmTrack.tone(440))
    try:
        sock = FakeSocket()
        conn = await hub.open(sock, "10.0.0.1", token())
        assert conn is not None
        await hub.receive(conn, msg("join", room="r1"))
        offer = await client._local_offer()
        await hub.receive(conn, msg("offer", sdp=offer))
        await settle()
        kinds = [m["type"] for m in sock.sent]
        assert kinds[:2] == ["joined", "answer"]
        assert "candidate" in kinds and kinds.index("candidate") > kinds.index("answer")
    finally:
        await hub.close()
        await client.close()
        await sfu.close()
