"""SignalingHub against a fake SFU and fake sockets: no network, timers driven by hand."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from signaling.fakes import Clock, FakeSfu, FakeSocket, msg, settle, token

from kefu.signaling.hub import SignalingHub
from kefu.signaling.protocol import MAX_MESSAGE_BYTES
from kefu.signaling.ratelimit import RateSpec
from kefu.signaling.session import Connection
from kefu.signaling.settings import SignalingSettings

MakeHub = Callable[..., SignalingHub]


async def connect(hub: SignalingHub, tok: str, ip: str = "10.0.0.1") -> tuple[FakeSocket, Any]:
    sock = FakeSocket()
    conn = await hub.open(sock, ip, tok)
    await settle()
    return sock, conn


async def send(hub: SignalingHub, conn: Connection, kind: str, **fields: Any) -> None:
    await hub.receive(conn, msg(kind, **fields))
    await settle()


async def joined(
    hub: SignalingHub,
    room: str,
    user: str = "u1",
    role: str = "customer",
    claim: str | None = None,
    ip: str = "10.0.0.1",
) -> tuple[FakeSocket, Connection]:
    sock, conn = await connect(hub, token(user, role, claim), ip)
    assert conn is not None
    await send(hub, conn, "join", room=room, display=user)
    assert sock.types()[-1] == "joined", sock.sent
    return sock, conn


async def drop(hub: SignalingHub, conn: Connection) -> None:
    """The client's network vanished: the WebSocket loop ends."""
    await hub.disconnected(conn)


@pytest.fixture
def hub(make_hub: MakeHub, settings: SignalingSettings) -> SignalingHub:
    return make_hub(settings)


# --- admission -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tok",
    [token(ttl=-60), "garbage", token().rsplit(".", 1)[0] + ".AAAA"],
    ids=["expired", "garbage", "bad_signature"],
)
async def test_bad_token_closes_4401(hub: SignalingHub, tok: str) -> None:
    sock, conn = await connect(hub, tok)
    assert conn is None
    assert sock.closed == (4401, "bad_token")
    assert sock.of("error")[0]["code"] == "bad_token"
    assert hub.connection_count == 0


async def test_connect_rate_limit_per_ip(make_hub: MakeHub, settings: SignalingSettings) -> None:
    hub = make_hub(dataclasses.replace(settings, connect_rate=RateSpec(rate=0.1, burst=2)))
    for _ in range(2):
        assert (await connect(hub, token(), ip="10.0.0.9"))[1] is not None
    sock, conn = await connect(hub, token(), ip="10.0.0.9")
    assert conn is None and sock.closed == (4429, "rate_limited")
    assert (await connect(hub, token(), ip="10.0.0.10"))[1] is not None


# --- join ----------------------------------------------------------------------------------


async def test_customer_creates_room(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn = await joined(hub, "r1")
    j = sock.of("joined")[0]
    assert j["room"] == "r1" and j["participants"] == [] and j["heartbeat_s"] == 10.0
    assert j["ice_servers"][0] == {"urls": ["stun:127.0.0.1:3478"]}
    assert j["ice_servers"][1]["username"] == "1700086400:u1"
    assert hub.session_count == 1 and sfu.room_exists("r1")


async def test_agent_joins_and_everyone_is_told(hub: SignalingHub) -> None:
    customer, _ = await joined(hub, "r1")
    agent, _ = await joined(hub, "r1", user="bob", role="agent")
    others = agent.of("joined")[0]["participants"]
    assert [(o["role"], o["display"]) for o in others] == [("customer", "u1")]
    told = customer.of("participant_joined")[0]["participant"]
    assert told == {"id": agent.of("joined")[0]["participant"], "role": "agent", "display": "bob"}


async def test_customer_cannot_enter_someone_elses_room(hub: SignalingHub) -> None:
    await joined(hub, "secret-room")
    sock, conn = await connect(hub, token("mallory"))
    await send(hub, conn, "join", room="secret-room")
    assert sock.closed == (4403, "forbidden")
    error = sock.of("error")[0]
    assert error["code"] == "forbidden" and "secret-room" not in error["message"]


async def test_agent_unknown_room_4404(hub: SignalingHub) -> None:
    sock, conn = await connect(hub, token("bob", "agent"))
    await send(hub, conn, "join", room="nowhere")
    assert sock.closed == (4404, "unknown_room")
    assert hub.session_count == 0


async def test_room_full_4409(hub: SignalingHub, sfu: FakeSfu) -> None:
    sfu.max_per_room = 1
    await joined(hub, "r1")
    sock, conn = await connect(hub, token("bob", "agent"))
    await send(hub, conn, "join", room="r1")
    assert sock.closed == (4409, "room_full")
    assert sock.of("error")[0] == {
        "v": 1,
        "type": "error",
        "code": "room_full",
        "message": "cannot join",
    }


async def test_node_full_4503(hub: SignalingHub, sfu: FakeSfu) -> None:
    sfu.max_rooms = 1
    await joined(hub, "r1")
    sock, conn = await connect(hub, token("u2"))
    await send(hub, conn, "join", room="r2")
    assert sock.closed == (4503, "node_full")


async def test_join_twice_is_bad_state(hub: SignalingHub) -> None:
    sock, conn = await joined(hub, "r1")
    await send(hub, conn, "join", room="r1")
    assert sock.sent[-1]["code"] == "bad_state" and sock.closed is None


# --- bad input keeps the socket open ---------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ("{oops", "bad_json"),
        (msg("dance"), "unknown_type"),
        (msg("offer"), "bad_message"),
        (msg("offer", sdp="x" * MAX_MESSAGE_BYTES), "too_large"),
        (msg("offer", sdp="v=0"), "bad_state"),
        (msg("candidate", candidate=None), "bad_state"),
    ],
)
async def test_bad_messages_get_errors(hub: SignalingHub, data: str, code: str) -> None:
    sock, conn = await connect(hub, token())
    await hub.receive(conn, data)
    await send(hub, conn, "ping")
    assert [m.get("code") for m in sock.sent] == [code, None]
    assert sock.types() == ["error", "pong"] and sock.closed is None


# --- media negotiation relay -----------------------------------------------------------------


async def test_offer_answer_and_trickle(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn = await joined(hub, "r1")
    part = sfu.all[0]
    await send(hub, conn, "offer", sdp="v=0 client")
    assert sock.sent[-1] == {"v": 1, "type": "answer", "sdp": "answer-to:v=0 client"}
    cand = {
        "candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host",
        "sdpMid": "0",
        "sdpMLineIndex": 0,
    }
    await send(hub, conn, "candidate", candidate=cand)
    await send(hub, conn, "candidate", candidate=None)
    assert part.candidates == [cand, None]
    assert part.on_ice_candidate is not None
    part.on_ice_candidate(cand)
    part.on_ice_candidate(None)
    part.on_ice_candidate({"nonsense": 1})  # a broken server candidate is dropped, not sent
    await settle()
    assert [m["candidate"] for m in sock.of("candidate")] == [cand, None]


async def test_bad_sdp_is_reported(hub: SignalingHub) -> None:
    sock, conn = await joined(hub, "r1")
    await send(hub, conn, "offer", sdp="bad sdp")
    assert sock.sent[-1]["code"] == "bad_sdp" and sock.closed is None


async def test_renegotiation_relay(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn = await joined(hub, "r1")
    part = sfu.all[0]
    assert part.on_renegotiation_needed is not None
    part.on_renegotiation_needed()
    await settle()
    assert sock.sent[-1] == {"v": 1, "type": "offer", "sdp": "server-offer-1"}
    part.on_renegotiation_needed()  # while the first offer is unanswered: deferred
    part.on_renegotiation_needed()
    await settle()
    assert len(sock.of("offer")) == 1
    await send(hub, conn, "answer", sdp="client-answer-1")
    await settle()
    assert part.answers == ["client-answer-1"]
    assert [m["sdp"] for m in sock.of("offer")] == ["server-offer-1", "server-offer-2"]


async def test_room_events_relayed(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, _ = await joined(hub, "r1")
    assert sfu.all[0].on_event is not None
    sfu.all[0].on_event({"type": "transcript", "text": "hi"})
    await settle()
    assert sock.sent[-1] == {"v": 1, "type": "event", "event": {"type": "transcript", "text": "hi"}}


async def test_message_rate_limit(make_hub: MakeHub, settings: SignalingSettings) -> None:
    hub = make_hub(dataclasses.replace(settings, message_rate=RateSpec(rate=1, burst=5)))
    sock, conn = await connect(hub, token())
    for _ in range(6):
        await send(hub, conn, "ping")
    assert sock.types() == ["pong"] * 5 + ["error"]
    assert sock.closed == (4429, "rate_limited")


# --- leaving, failing, shutdown --------------------------------------------------------------


async def test_leave(hub: SignalingHub, sfu: FakeSfu) -> None:
    other, _ = await joined(hub, "r1", user="bob", role="admin")
    sock, conn = await joined(hub, "r1", claim="r1")
    await send(hub, conn, "leave")
    assert sock.sent[-1] == {"v": 1, "type": "bye", "reason": "left"}
    assert sock.closed == (1000, "left")
    assert sfu.all[1].left == 1 and hub.session_count == 1
    assert other.sent[-1] == {"v": 1, "type": "participant_left", "participant": sfu.all[1].id}
    await drop(hub, conn)
    assert hub.session_count == 1 and hub.connection_count == 1


async def test_sfu_failure_ends_session(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, _ = await joined(hub, "r1")
    assert sfu.all[0].on_state is not None
    sfu.all[0].on_state("connected")
    sfu.all[0].on_state("failed")
    await settle()
    assert sock.sent[-1]["type"] == "bye" and sock.sent[-1]["reason"] == "failed"
    assert hub.session_count == 0 and sfu.all[0].left == 1


async def test_close_says_bye_to_everyone(hub: SignalingHub, sfu: FakeSfu) -> None:
    a, _ = await joined(hub, "r1")
    b, _ = await connect(hub, token("u2"))
    await hub.close()
    await settle()
    assert a.closed == (1001, "shutdown") and a.sent[-1]["reason"] == "shutdown"
    assert b.closed == (1001, "shutdown")
    assert hub.session_count == 0 and sfu.all[0].left == 1
    sock, conn = await connect(hub, token("u3"))
    assert conn is None and sock.closed is not None and sock.closed[0] == 1001


# --- heartbeat and resume --------------------------------------------------------------------


async def test_heartbeat_timeout(hub: SignalingHub, clock: Clock) -> None:
    quiet, _ = await joined(hub, "r1")
    chatty, conn = await connect(hub, token("u2"))
    assert hub.get_timer() == clock.now + 30
    clock.now += 20
    await send(hub, conn, "ping")
    clock.now += 10
    await hub.handle_timer(clock.now)
    await settle()
    assert quiet.closed == (4408, "heartbeat_timeout")
    assert quiet.sent[-1]["code"] == "heartbeat_timeout"
    assert chatty.closed is None
    assert hub.session_count == 1  # the session waits for a resume


async def test_resume_within_grace(hub: SignalingHub, sfu: FakeSfu, clock: Clock) -> None:
    sock, conn = await joined(hub, "r1")
    session = sock.of("joined")[0]["session"]
    await drop(hub, conn)
    part = sfu.all[0]
    assert part.on_event is not None and part.on_ice_candidate is not None
    part.on_event({"type": "transcript", "text": "while you were away"})
    part.on_ice_candidate(None)
    clock.now += 19
    await hub.handle_timer(clock.now)
    sock2, conn2 = await connect(hub, token())
    await send(hub, conn2, "resume", session=session, token=token())
    assert sock2.types() == ["joined", "event", "candidate"]
    assert sock2.sent[0]["session"] == session and sock2.sent[0]["participant"] == part.id
    assert part.left == 0
    clock.now += 100
    await send(hub, conn2, "ping")  # the resumed socket is alive; no grace timer any more
    await hub.handle_timer(clock.now)
    assert hub.session_count == 1 and part.left == 0


async def test_resume_after_grace(hub: SignalingHub, sfu: FakeSfu, clock: Clock) -> None:
    agent, _ = await joined(hub, "r1", user="bob", role="admin")
    sock, conn = await joined(hub, "r1", claim="r1")
    session = sock.of("joined")[0]["session"]
    await drop(hub, conn)
    assert hub.get_timer() == pytest.approx(clock.now + 20)
    clock.now += 20
    await hub.handle_timer(clock.now)
    await settle()
    assert sfu.all[1].left == 1 and hub.session_count == 1
    assert agent.sent[-1] == {"v": 1, "type": "participant_left", "participant": sfu.all[1].id}
    sock2, conn2 = await connect(hub, token())
    await send(hub, conn2, "resume", session=session, token=token())
    assert sock2.closed == (4410, "unknown_session")


@pytest.mark.parametrize("who", ["other_user", "bad_token", "unknown_id"])
async def test_resume_refused_looks_the_same(hub: SignalingHub, who: str) -> None:
    sock, conn = await joined(hub, "r1")
    session = sock.of("joined")[0]["session"]
    await drop(hub, conn)
    resume = {
        "other_user": {"session": session, "token": token("mallory")},
        "bad_token": {"session": session, "token": "x.y.z"},
        "unknown_id": {"session": "nope", "token": token()},
    }[who]
    sock2, conn2 = await connect(hub, token("mallory"))
    await send(hub, conn2, "resume", **resume)
    assert sock2.sent == [
        {"v": 1, "type": "error", "code": "unknown_session", "message": "session cannot be resumed"}
    ]
    assert sock2.closed == (4410, "unknown_session")
    assert hub.session_count == 1


async def test_resume_replaces_a_half_open_socket(hub: SignalingHub, sfu: FakeSfu) -> None:
    old, conn = await joined(hub, "r1")
    session = old.of("joined")[0]["session"]
    new, conn2 = await connect(hub, token())
    await send(hub, conn2, "resume", session=session, token=token())
    assert old.closed == (4000, "replaced") and old.sent[-1]["reason"] == "replaced"
    await drop(hub, conn)  # the old socket's loop ends later: must not detach the new one
    assert sfu.all[0].on_event is not None
    sfu.all[0].on_event({"n": 1})
    await settle()
    assert new.types() == ["joined", "event"]


async def test_pending_is_bounded(
    make_hub: MakeHub, settings: SignalingSettings, sfu: FakeSfu
) -> None:
    hub = make_hub(dataclasses.replace(settings, max_pending=3))
    sock, conn = await joined(hub, "r1")
    await drop(hub, conn)
    assert sfu.all[0].on_event is not None
    for i in range(10):
        sfu.all[0].on_event({"n": i})
    sock2, conn2 = await connect(hub, token())
    await send(hub, conn2, "resume", session=sock.of("joined")[0]["session"], token=token())
    assert [m["event"]["n"] for m in sock2.of("event")] == [7, 8, 9]


async def test_no_leaks_after_100_clients_vanish(
    hub: SignalingHub, sfu: FakeSfu, clock: Clock
) -> None:
    sfu.max_per_room = 16
    conns = []
    for i in range(100):
        role = "customer" if i % 10 == 0 else "agent"
        _, conn = await joined(hub, f"room-{i // 10}", f"u{i}", role, ip=f"10.1.0.{i}")
        conns.append(conn)
    assert hub.session_count == 100 and len(sfu.rooms) == 10
    for conn in conns:
        await drop(hub, conn)
    assert hub.connection_count == 0 and hub.session_count == 100
    clock.now += 20
    await hub.handle_timer(clock.now)
    assert hub.session_count == 0 and hub.get_timer() is None
    assert hub._rooms == {} and sfu.rooms == {}
    assert [p.left for p in sfu.all] == [1] * 100
    assert all(c.session is None or c.session.ended for c in conns)
    assert len(hub.connect_limiter) == 0 and len(hub.message_limiter) == 0


class StuckSocket(FakeSocket):
    """A peer that stopped reading: sends and the close handshake never finish."""

    async def send_str(self, data: str) -> None:
        await asyncio.Event().wait()

    async def close(self, *, code: int = 1000, message: bytes = b"") -> bool:
        await asyncio.Event().wait()
        return True


async def test_stuck_socket_is_let_go(hub: SignalingHub, sfu: FakeSfu, clock: Clock) -> None:
    sock, conn = await joined(hub, "r1")
    conn.socket = StuckSocket()
    clock.now += 30
    await hub.handle_timer(clock.now)  # heartbeat timeout: close queued, never completes
    assert hub.connection_count == 1
    assert hub.get_timer() == pytest.approx(clock.now + 30)
    clock.now += 30
    await hub.handle_timer(clock.now)
    assert hub.connection_count == 0 and hub.session_count == 1  # detached, grace running
    clock.now += 20
    await hub.handle_timer(clock.now)
    assert hub.session_count == 0 and sfu.all[0].left == 1


async def test_sfu_bug_closes_1011(hub: SignalingHub, sfu: FakeSfu) -> None:
    sock, conn = await joined(hub, "r1")

    async def broken(sdp: str) -> str:
        raise RuntimeError("boom")

    sfu.all[0].handle_offer = broken  # type: ignore[method-assign]
    await send(hub, conn, "offer", sdp="v=0")
    assert sock.sent[-1]["code"] == "internal" and sock.closed == (1011, "internal")
