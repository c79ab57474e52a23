"""The real aiohttp route and a real JWKS endpoint on loopback (inside the test netns)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient, TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from signaling.fakes import SECRET, Clock, FakeSfu, msg, token

from kefu.signaling.auth import Authenticator
from kefu.signaling.errors import AuthError
from kefu.signaling.hub import SignalingHub
from kefu.signaling.relay import ShardRelay
from kefu.signaling.settings import SignalingSettings
from kefu.signaling.shards import ShardRouter
from kefu.signaling.ws import READ_LIMIT, add_signaling_routes

pytestmark = pytest.mark.netns


@pytest.fixture
async def client(
    sfu: FakeSfu, clock: Clock, settings: SignalingSettings
) -> AsyncIterator[tuple[TestClient[Any, Any], SignalingHub]]:
    hub = SignalingHub(sfu, settings, clock=clock)
    app = web.Application()
    add_signaling_routes(app, hub, drive_timers=False)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client, hub


async def _recv(ws: Any) -> dict[str, Any]:
    message = await ws.receive(timeout=5)
    assert message.type is WSMsgType.TEXT, message
    result: dict[str, Any] = json.loads(message.data)
    return result


async def test_bad_token_close_code(client: Any) -> None:
    test_client, hub = client
    ws = await test_client.ws_connect("/ws?token=nope")
    assert (await _recv(ws))["code"] == "bad_token"
    closing = await ws.receive(timeout=5)
    assert closing.type is WSMsgType.CLOSE and ws.close_code == 4401
    ws2 = await test_client.ws_connect("/ws")
    assert (await _recv(ws2))["code"] == "bad_token"
    await ws2.close()


async def test_join_offer_answer_leave(client: Any, sfu: FakeSfu) -> None:
    test_client, hub = client
    ws = await test_client.ws_connect(f"/ws?token={token()}")
    await ws.send_str(msg("join", room="r1", display="Alice"))
    joined = await _recv(ws)
    assert joined["type"] == "joined" and joined["room"] == "r1"
    await ws.send_str(msg("offer", sdp="v=0"))
    assert await _recv(ws) == {"v": 1, "type": "answer", "sdp": "answer-to:v=0"}
    sfu.all[0].on_event({"type": "call_state", "state": "ai_active"})  # type: ignore[misc]
    assert (await _recv(ws))["event"]["state"] == "ai_active"
    await ws.send_str(msg("leave"))
    assert await _recv(ws) == {"v": 1, "type": "bye", "reason": "left"}
    assert (await ws.receive(timeout=5)).type is WSMsgType.CLOSE
    assert ws.close_code == 1000
    assert hub.session_count == 0 and sfu.all[0].left == 1


async def test_oversized_and_binary(client: Any) -> None:
    test_client, hub = client
    ws = await test_client.ws_connect(f"/ws?token={token()}")
    await ws.send_str(msg("offer", sdp="x" * 100_000))
    assert (await _recv(ws))["code"] == "too_large"
    await ws.send_bytes(b"\x01\x02")
    assert (await _recv(ws))["code"] == "bad_message"
    await ws.send_str("{")
    assert (await _recv(ws))["code"] == "bad_json"
    await ws.send_str(msg("ping"))
    assert (await _recv(ws))["type"] == "pong"
    await ws.send_str(msg("offer", sdp="x" * 1_000_000))  # beyond the read limit: 1009
    assert (await ws.receive(timeout=5)).type is WSMsgType.CLOSE
    assert ws.close_code == 1009


@pytest.mark.parametrize("sharded", [False, True], ids=["one_process", "room_workers_front"])
async def test_deeply_nested_first_message_is_bad_json_not_a_dropped_socket(
    sfu: FakeSfu, clock: Clock, settings: SignalingSettings, sharded: bool
) -> None:
    """The reported attack: 50,000 ``[`` as the first message raised RecursionError (in the
    front's shard routing, which peeks at the first message) and the socket died with 1006.
    It must be answered with the documented bad_json, and the socket keep serving."""
    hub = SignalingHub(sfu, settings, clock=clock)
    app = web.Application()
    relay = None
    if sharded:  # a front with room workers, as `kefu serve` on a multi-core machine runs
        relay = ShardRelay(ShardRouter(4), lambda shard: None, "key", read_limit=READ_LIMIT)
    add_signaling_routes(app, hub, drive_timers=False, relay=relay)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        ws = await test_client.ws_connect(f"/ws?token={token()}")
        await ws.send_str("[" * 50_000)
        assert (await _recv(ws))["code"] == "bad_json"
        await ws.send_str('{"v":1,"type":"join","room":' + "[" * 50_000)
        assert (await _recv(ws))["code"] == "bad_json"
        await ws.send_str(msg("ping"))
        assert await _recv(ws) == {"v": 1, "type": "pong"}
        await ws.close()
        assert ws.close_code == 1000


async def test_token_with_string_exp_is_refused_with_4401(client: Any) -> None:
    """The reported attack: ``"exp": "9999999999"`` passed PyJWT (it calls int() on it) and
    then an ``assert`` in the claim checks; the socket died with 1006 instead of 4401."""
    test_client, hub = client
    body = {"sub": "mallory", "role": "admin", "exp": "9999999999"}
    ws = await test_client.ws_connect(f"/ws?token={jwt.encode(body, SECRET, 'HS256')}")
    error = await _recv(ws)
    assert (error["type"], error["code"]) == ("error", "bad_token")
    assert "exp" in error["message"]
    assert (await ws.receive(timeout=5)).type is WSMsgType.CLOSE
    assert ws.close_code == 4401
    assert hub.connection_count == 0


async def test_heartbeat_timeout_then_resume(client: Any, clock: Clock, sfu: FakeSfu) -> None:
    test_client, hub = client
    ws = await test_client.ws_connect(f"/ws?token={token()}")
    await ws.send_str(msg("join", room="r1"))
    session = (await _recv(ws))["session"]
    clock.now += 30
    await hub.handle_timer(clock.now)
    assert (await _recv(ws))["code"] == "heartbeat_timeout"
    assert (await ws.receive(timeout=5)).type is WSMsgType.CLOSE
    assert ws.close_code == 4408
    sfu.all[0].on_event({"n": 1})  # type: ignore[misc]
    ws2 = await test_client.ws_connect(f"/ws?token={token()}")
    await ws2.send_str(msg("resume", session=session, token=token()))
    assert (await _recv(ws2))["type"] == "joined"
    assert (await _recv(ws2))["event"] == {"n": 1}
    await ws2.close()
    clock.now += 20
    await hub.handle_timer(clock.now)
    assert hub.session_count == 0 and hub.connection_count == 0


async def test_shutdown_closes_sockets(sfu: FakeSfu, settings: SignalingSettings) -> None:
    hub = SignalingHub(sfu, dataclasses.replace(settings, heartbeat_timeout_s=3600))
    app = web.Application()
    add_signaling_routes(app, hub)  # the real timer driver runs, nothing is due
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        ws = await test_client.ws_connect(f"/ws?token={token()}")
        await ws.send_str(msg("join", room="r1"))
        assert (await _recv(ws))["type"] == "joined"
    assert hub.session_count == 0 and sfu.all[0].left == 1


# --- RS256 through a JWKS endpoint -----------------------------------------------------------


@pytest.fixture
async def jwks() -> AsyncIterator[tuple[str, Any, list[int]]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    public.update(kid="k1", use="sig", alg="RS256")
    hits: list[int] = []

    async def serve(_: web.Request) -> web.Response:
        hits.append(1)
        return web.json_response({"keys": [public]})

    app = web.Application()
    app.router.add_get("/.well-known/jwks.json", serve)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/.well-known/jwks.json")), key, hits
    finally:
        await server.close()


def _rs(key: Any, kid: str = "k1", **claims: Any) -> str:
    body = {"sub": "idp-user", "role": "agent", "exp": 2**40, **claims}
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": kid})


async def test_jwks_rs256(jwks: tuple[str, Any, list[int]]) -> None:
    url, key, hits = jwks
    auth = Authenticator(jwks_url=url, secret=SECRET)
    claims = await auth.verify(_rs(key, room="r9"))
    assert (claims.user, claims.role, claims.room) == ("idp-user", "agent", "r9")
    await auth.verify(_rs(key))
    assert len(hits) == 1  # keys are cached
    assert (await auth.verify(token("local"))).user == "local"  # HS256 still accepted

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for bad in (_rs(other), _rs(other, kid="k2"), _rs(key, exp=1), _rs(key, exp=str(2**40))):
        with pytest.raises(AuthError) as info:
            await auth.verify(bad)
        assert info.value.code == "bad_token"


async def test_jwks_unreachable(jwks: tuple[str, Any, list[int]]) -> None:
    url, key, _ = jwks
    auth = Authenticator(jwks_url=url.replace("jwks.json", "missing.json"))
    with pytest.raises(AuthError, match="signing key"):
        await auth.verify(_rs(key))
