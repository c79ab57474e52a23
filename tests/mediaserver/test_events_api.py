"""``GET /api/events`` and the events' JSON form: the real bus and the real app, a fake
Control behind it (one fake at one seam), tokens from the one minter."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer

from kefu.ai_bridge.agent import BargeIn, HandoffRequested, Utterance
from kefu.ai_bridge.events import AvatarQualityChanged, CallerEmotionHeard, EscalationRaised
from kefu.ai_bridge.trace import TurnTrace
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import (
    EVENT_TYPES,
    AgentNote,
    AgentWait,
    CallAnswered,
    CallAssigned,
    CallDialing,
    CallEnded,
    CallFailed,
    CallRinging,
    CallStarted,
    CallStateChanged,
    DtmfReceived,
    TransferProgress,
    event_fields,
    event_json,
)
from kefu.signaling.auth import Authenticator
from kefu.signaling.events_ws import STREAM_KEY, EventStreamSettings, add_event_routes
from kefu.signaling.http import build_app
from tests.mediaserver.test_http import FakeControl
from tests.signaling.fakes import SECRET, token

AUTH = Authenticator(secret=SECRET)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def samples(call_id: str = "c1") -> list[object]:
    """One event of every type the bus carries, as kefu publishes them."""
    wall, loop = time.time(), time.monotonic()
    marks = [loop - 0.9, loop - 0.6, loop - 0.5, loop - 0.45, loop - 0.3, loop - 0.2]
    return [
        CallStarted(call_id, wall, "sip", "udp:192.0.2.7:5060"),
        CallStateChanged(call_id, wall, "ringing", "ai_active", "answered"),
        Utterance(call_id, 1, "caller", "where is my order", "en", loop - 0.5),
        TurnTrace(call_id, 1, *marks, "where is my order", "order_status", "kb", "It ships", False),
        BargeIn(call_id, 2, loop - 0.1, loop - 0.05, 50.0, 800.0),
        DtmfReceived(call_id, wall, "0", "rfc4733"),
        HandoffRequested(call_id, "caller asked", "kb", loop),
        TransferProgress(call_id, wall, "sip:queue@vcc", 200),
        AgentWait(call_id, wall, True, "caller asked", 1, ""),
        AgentNote(call_id, wall, "maria", "reshipped"),
        CallAssigned(call_id, wall, "maria", "li.wei", "maria"),
        CallEnded(call_id, wall, "transferred", True),
        CallDialing(call_id, wall, "sip:+8610@vcc", "sip:kefu@kefu", "ai", {"order": 7}, "bob"),
        CallRinging(call_id, wall, 183, "Session Progress", True),
        CallAnswered(call_id, wall, 412.5, "PCMU"),
        CallFailed(call_id, wall, 486, "Busy Here"),
        CallerEmotionHeard(call_id, 2, "angry", -0.81, 0.62, 0.78, "angry", 0.55, "angry", loop),
        EscalationRaised(call_id, 2, "negative_emotion", 2, 0, "angry", -0.8, "angry", loop),
        AvatarQualityChanged(call_id, "weights", "512", "frames_skipped", wall),
    ]


def test_every_event_type_has_a_sample() -> None:
    assert {type(e) for e in samples()} == set(EVENT_TYPES)


@pytest.mark.parametrize("index", range(len(samples())), ids=[type(e).__name__ for e in samples()])
def test_event_json_is_versioned_typed_and_stamped_in_unix_time(index: int) -> None:
    event = samples()[index]  # made now: times made at collection would be stale by run time
    now = time.time()
    out = event_json(event, now=now)
    assert out["v"] == 1 and out["type"] == EVENT_TYPES[type(event)].name
    assert out["call_id"] == "c1"
    assert now - 2 < out["at"] <= now + 0.01  # loop times came back as UNIX times
    assert json.loads(json.dumps(out, allow_nan=False)) == out
    for name in event_fields(type(event)):
        assert name in out
    for name in EVENT_TYPES[type(event)].loop_times:
        if out.get(name) is not None:
            assert now - 2 < out[name] <= now + 0.01


def test_trace_marks_subtract_as_before() -> None:
    trace = next(e for e in samples() if isinstance(e, TurnTrace))
    out = event_json(trace)
    assert out["first_packet"] - out["speech_end"] == pytest.approx(0.7, abs=0.002)
    assert out["stages_ms"] == trace.stages_ms()
    assert (out["intent"], out["source"], out["transcript"]) == (
        "order_status",
        "kb",
        trace.transcript,
    )


def test_an_unregistered_event_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        event_json(object())


def test_docs_describe_every_event_type_and_field() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for cls, kind in EVENT_TYPES.items():
        section = re.search(rf"### `{re.escape(kind.name)}`\n(.*?)(?=\n### |\n## |\Z)", text, re.S)
        assert section, f"docs/events.md has no section for {kind.name}"
        example = re.search(r"```json\n(.*?)```", section.group(1), re.S)
        assert example, f"{kind.name}: no JSON example"
        doc = json.loads(example.group(1))
        assert doc["type"] == kind.name and doc["v"] == 1
        assert set(doc) == set(event_json(_sample(cls))), f"{kind.name}: example fields differ"


def _sample(cls: type) -> object:
    return next(e for e in samples() if type(e) is cls)


# --- the WebSocket ------------------------------------------------------------------------------


@pytest.fixture
async def api():
    bus = EventBus()
    app = build_app(FakeControl(), auth=AUTH)
    add_event_routes(app, bus, event_json, AUTH, EventStreamSettings(queue_size=16))
    async with TestClient(TestServer(app)) as client:
        client.bus = bus
        client.stream = app[STREAM_KEY]
        yield client


async def refused(client: TestClient, url: str, **kw: Any) -> tuple[int | None, dict[str, Any]]:
    ws = await client.ws_connect(url, **kw)
    error = json.loads((await ws.receive()).data)
    closing = await ws.receive()
    assert closing.type is WSMsgType.CLOSE
    return ws.close_code, error


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?token=",
        "?token=not.a.jwt",
        f"?token={token('bob', 'agent', ttl=-60)}",
        f"?token={token('bob', 'agent').rsplit('.', 1)[0]}.c2ln",
    ],
)
async def test_a_bad_or_missing_token_is_closed_4401(api: TestClient, query: str) -> None:
    code, error = await refused(api, f"/api/events{query}")
    assert code == 4401 and error["type"] == "error" and error["code"] == "unauthorized"
    assert api.bus.subscriber_count == 0


async def test_a_customer_is_closed_4403(api: TestClient) -> None:
    code, error = await refused(api, f"/api/events?token={token('alice', 'customer')}")
    assert code == 4403 and error["code"] == "forbidden"
    headers = {"Authorization": f"Bearer {token('alice', 'customer', room='r1')}"}
    assert (await refused(api, "/api/events", headers=headers))[0] == 4403


async def test_bad_filters_are_closed_4400(api: TestClient) -> None:
    many = "&".join(f"call_id=c{i}" for i in range(101))
    code, error = await refused(api, f"/api/events?token={token('bob', 'agent')}&{many}")
    assert code == 4400 and error["code"] == "bad_request"
    code, _ = await refused(api, f"/api/events?token={token('bob', 'agent')}&call_id=")
    assert code == 4400


async def test_plain_http_gets_the_api_answers(api: TestClient) -> None:
    assert (await api.get("/api/events")).status == 401
    resp = await api.get(
        "/api/events", headers={"Authorization": f"Bearer {token('a', 'customer')}"}
    )
    assert resp.status == 403
    resp = await api.get("/api/events", headers={"Authorization": f"Bearer {token('b', 'agent')}"})
    assert resp.status == 426 and (await resp.json())["error"]["code"] == "websocket_required"


async def connect(client: TestClient, query: str = "", role: str = "agent", **kw: Any) -> Any:
    ws = await client.ws_connect(f"/api/events?token={token('bob', role)}{query}", **kw)
    hello = await ws.receive_json()
    assert hello["type"] == "events.subscribed" and hello["v"] == 1
    return ws, hello


@pytest.mark.parametrize("role", ["agent", "supervisor", "admin"])
async def test_a_reader_gets_its_calls_events_in_order(api: TestClient, role: str) -> None:
    ws, hello = await connect(api, "&call_id=c1&call_id=c3", role=role)
    assert hello["call_ids"] == ["c1", "c3"]
    now = time.time()
    for event, b in zip(samples("c1"), samples("c2"), strict=True):
        # one pair at a time: there are more event types than the fixture's 16-event queue
        api.bus.publish(b)  # another call's: filtered out before it is queued
        api.bus.publish(event)
        got = await asyncio.wait_for(ws.receive_json(), 5)
        want = event_json(event, now=now)
        assert got["type"] == want["type"] and got["call_id"] == "c1"
        assert {k: v for k, v in got.items() if k != "at" and not _is_time(k, event)} == {
            k: v for k, v in want.items() if k != "at" and not _is_time(k, event)
        }
    api.bus.publish(CallEnded("c3", time.time(), "bye", False))
    assert (await asyncio.wait_for(ws.receive_json(), 5))["call_id"] == "c3"
    await ws.close()


def _is_time(name: str, event: object) -> bool:
    return name in EVENT_TYPES[type(event)].loop_times


async def test_unfiltered_reader_gets_every_call_and_unknown_filters_get_nothing(
    api: TestClient,
) -> None:
    everything, _ = await connect(api)
    nothing, hello = await connect(api, "&call_id=no-such-call")
    assert hello["call_ids"] == ["no-such-call"]
    for event in (*samples("c1")[:2], *samples("c2")[:2]):
        api.bus.publish(event)
    got = [(m["call_id"], m["type"]) for m in [await everything.receive_json() for _ in range(4)]]
    assert got == [
        ("c1", "call.started"),
        ("c1", "call.state_changed"),
        ("c2", "call.started"),
        ("c2", "call.state_changed"),
    ]
    await nothing.send_str('{"type": "ping"}')
    assert (await nothing.receive_json())["type"] == "pong"  # nothing else arrived first
    await everything.close()
    await nothing.close()


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        ("{not json", "bad_json"),
        ("[" * 4000, "bad_json"),
        ("[1]", "bad_json"),
        ('{"type": "x"}', "unknown_type"),
    ],
)
async def test_client_messages_get_errors_not_crashes(
    api: TestClient, sent: str, code: str
) -> None:
    ws, _ = await connect(api)
    await ws.send_str(sent)
    reply = await ws.receive_json()
    assert reply["type"] == "error" and reply["code"] == code
    await ws.send_bytes(b"\x00\x01")
    assert (await ws.receive_json())["code"] == "bad_message"
    api.bus.publish(samples()[0])
    assert (await ws.receive_json())["type"] == "call.started"  # still served
    await ws.close()


async def test_an_expired_token_closes_the_stream_4401(api: TestClient) -> None:
    # Expired, but within the verifier's 5 s leeway: admitted, then closed at once.
    ws = await api.ws_connect(f"/api/events?token={token('bob', 'agent', ttl=-2)}")
    assert (await ws.receive_json())["type"] == "events.subscribed"
    msg = await asyncio.wait_for(ws.receive(), 5)
    assert (msg.type, msg.data, msg.extra) == (WSMsgType.CLOSE, 4401, "token_expired")


async def test_server_stop_closes_readers_1001(api: TestClient) -> None:
    ws, _ = await connect(api)
    await api.app.shutdown()
    msg = await asyncio.wait_for(ws.receive(), 5)
    assert msg.type is WSMsgType.CLOSE and msg.data == 1001 and msg.extra == "shutdown"
    await ws.close()
    for _ in range(10):
        await asyncio.sleep(0)
    assert api.bus.subscriber_count == 0 and not api.stream.readers


async def test_a_reader_that_never_reads_stays_bounded_and_is_told_what_it_lost(
    api: TestClient,
) -> None:
    """Publish until the socket stops draining and the queue drops; kefu holds at most the
    queue (16 events) and the transport's write buffer; then the reader resumes and gets
    every event it was not told it lost, in order, with events.dropped at each gap."""
    ws, _ = await connect(api)
    (reader,) = api.stream.readers
    big = "x" * 16_000
    published = 0
    max_queued = max_buffer = 0
    while reader.sub.dropped < 100:
        api.bus.publish(
            CallStateChanged("c1", time.time(), "ai_active", "ai_active", f"{published} {big}")
        )
        published += 1
        await asyncio.sleep(0)
        max_queued = max(max_queued, reader.sub.queue.qsize())
        max_buffer = max(max_buffer, reader.write_buffer)
        assert published < 20_000, "the socket never stopped draining"
    assert max_queued <= 16
    # asyncio's high-water mark (64 KiB) + writer_limit (16 KiB) + one message in flight
    assert max_buffer < 64 * 1024 + 16 * 1024 + 2 * 16_100
    api.bus.publish(CallEnded("c1", time.time(), "bye", True))
    seen: list[int] = []
    lost = 0
    expected_next = 0
    while True:
        msg = await asyncio.wait_for(ws.receive_json(), 10)
        if msg["type"] == "events.dropped":
            lost += msg["count"]
            expected_next += msg["count"]
            continue
        if msg["type"] == "call.ended":
            break
        index = int(msg["reason"].split()[0])
        assert index == expected_next, "events out of order or lost without notice"
        seen.append(index)
        expected_next += 1
    assert lost >= 100 and len(seen) + lost == published
    await ws.close()


async def test_the_server_wires_tokens_allow_list_and_bus(tmp_path: Path) -> None:
    """KefuServer's own HTTP app: its secret, its transfer allow-list, its bus."""
    from kefu.mediaserver.config import jwt_secret, load_config
    from kefu.mediaserver.server import KefuServer
    from kefu.signaling.tokens import mint_token

    config = load_config(
        environ={"KEFU_SERVER_STATE_DIR": str(tmp_path), "KEFU_CALLS_MEDIA_MODE": "echo"}
    )
    server = KefuServer(config)
    staff = mint_token(jwt_secret(config), "bob", "agent")
    async with TestClient(TestServer(server._http_app())) as client:
        assert (await client.get("/api/calls")).status == 401
        headers = {"Authorization": f"Bearer {staff}"}
        assert await (await client.get("/api/calls", headers=headers)).json() == {"calls": []}
        resp = await client.post(
            "/api/calls/x/transfer", json={"target": "sip:a@b"}, headers=headers
        )
        assert (resp.status, (await resp.json())["error"]["code"]) == (403, "target_not_allowed")
        ws = await client.ws_connect(f"/api/events?token={staff}")
        assert (await ws.receive_json())["type"] == "events.subscribed"
        server.bus.publish(DtmfReceived("c9", time.time(), "5", "info"))
        got = await asyncio.wait_for(ws.receive_json(), 5)
        assert (got["type"], got["call_id"], got["digit"]) == ("call.dtmf", "c9", "5")
        await ws.close()


async def test_header_token_and_the_reader_limit() -> None:
    bus = EventBus()
    app = build_app(FakeControl(), auth=AUTH)
    add_event_routes(app, bus, event_json, AUTH, EventStreamSettings(max_readers=1))
    async with TestClient(TestServer(app)) as client:
        headers = {"Authorization": f"Bearer {token('bob', 'supervisor')}"}
        first = await client.ws_connect("/api/events", headers=headers)
        assert (await first.receive_json())["type"] == "events.subscribed"
        code, error = await refused(client, "/api/events", headers=headers)
        assert (code, error["code"]) == (4503, "node_full")
        await first.close()
