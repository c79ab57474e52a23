"""``POST /api/calls`` (outbound calls): validation, roles and answers, with a fake media
server behind the real app (one fake at one seam); the SIP side is tests/sip/test_ua_uac.py
and tests/peers/test_sipp_outbound.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kefu.errors import ResourceExhausted
from kefu.signaling.dial_request import DialRequest, DialRequestError, parse_dial_request
from kefu.signaling.http import MAX_DIAL_BODY, build_app
from tests.mediaserver.test_http import AUTH, FakeControl, bearer


class DialControl(FakeControl):
    def __init__(self) -> None:
        super().__init__()
        self.dialed: list[tuple[DialRequest, str]] = []
        self.refuse: Exception | None = None

    async def dial(self, request: DialRequest, who: str) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        self.dialed.append((request, who))
        return {"call_id": "out1", "state": "dialing", "to": request.to}


@pytest.fixture
async def client():
    control = DialControl()
    app = build_app(control, auth=AUTH, max_context_bytes=256)
    async with TestClient(TestServer(app)) as c:
        c.control = control
        yield c


@pytest.mark.parametrize("role", ["agent", "admin"])
async def test_an_agent_or_admin_places_a_call(client, role: str) -> None:
    body = {
        "to": "sip:+861012345678@10.0.0.5:5060",
        "media_mode": "prompt",
        "from": "4001",
        "context": {"order": "A-1042", "greeting": "Hello, your parcel has arrived."},
    }
    resp = await client.post("/api/calls", json=body, headers=bearer(role, "maria"))
    assert resp.status == 202
    answer = await resp.json()
    assert answer == {
        "status": "dialing",
        "call_id": "out1",
        "state": "dialing",
        "to": "sip:+861012345678@10.0.0.5:5060",
    }
    ((request, who),) = client.control.dialed
    assert who == "maria"
    assert request == DialRequest(
        "sip:+861012345678@10.0.0.5:5060", "prompt", "4001", body["context"]
    )


async def test_only_to_is_required(client) -> None:
    resp = await client.post("/api/calls", json={"to": "sip:4001@10.0.0.5"}, headers=bearer())
    assert resp.status == 202
    assert client.control.dialed[0][0] == DialRequest("sip:4001@10.0.0.5", None, None, {})


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"to": "sip:4001 @10.0.0.5"}, "bad_uri"),
        ({"to": "http://example.com"}, "bad_uri"),
        ({"to": "sips:4001@10.0.0.5"}, "bad_uri"),
        ({"to": "tel:+861012345678"}, "bad_uri"),
        ({"to": "sip:4001@10.0.0.5?Subject=x"}, "bad_uri"),
        ({"to": "sip:a@b\r\nX-Evil: 1"}, "bad_uri"),
        ({"to": 42}, "bad_uri"),
        ({}, "bad_uri"),
        ({"to": "sip:4001@10.0.0.5", "media_mode": "karaoke"}, "unknown_mode"),
        ({"to": "sip:4001@10.0.0.5", "media_mode": 1}, "unknown_mode"),
        ({"to": "sip:4001@10.0.0.5", "context": [1, 2]}, "bad_context"),
        ({"to": "sip:4001@10.0.0.5", "context": "x"}, "bad_context"),
        ({"to": "sip:4001@10.0.0.5", "context": {"k": "v" * 300}}, "context_too_large"),
        ({"to": "sip:4001@10.0.0.5", "from": "a b"}, "bad_from"),
        ({"to": "sip:4001@10.0.0.5", "from": "http://x"}, "bad_from"),
        ({"to": "sip:4001@10.0.0.5", "from": 7}, "bad_from"),
        ({"to": "sip:4001@10.0.0.5", "priority": "high"}, "bad_request"),
        ([{"to": "sip:4001@10.0.0.5"}], "bad_request"),
    ],
)
async def test_bad_bodies_are_400_with_a_code_and_nothing_is_dialed(
    client, body: object, code: str
) -> None:
    resp = await client.post("/api/calls", json=body, headers=bearer())
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == code and error["message"]
    assert client.control.dialed == []


async def test_not_json_and_oversized_bodies(client) -> None:
    resp = await client.post("/api/calls", data=b"{to: sip", headers=bearer())
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "bad_json"
    huge = json.dumps({"to": "sip:4001@10.0.0.5", "context": {"k": "x" * MAX_DIAL_BODY}})
    resp = await client.post("/api/calls", data=huge.encode(), headers=bearer())
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "body_too_large"
    assert client.control.dialed == []


@pytest.mark.parametrize(("role", "status"), [("customer", 403), ("supervisor", 403)])
async def test_other_roles_may_not_dial(client, role: str, status: int) -> None:
    resp = await client.post("/api/calls", json={"to": "sip:4001@10.0.0.5"}, headers=bearer(role))
    assert resp.status == status
    assert (await resp.json())["error"]["code"] == "forbidden"
    assert client.control.dialed == []


async def test_no_token_is_401(client) -> None:
    resp = await client.post("/api/calls", json={"to": "sip:4001@10.0.0.5"})
    assert resp.status == 401 and resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.control.dialed == []


async def test_full_or_unroutable(client) -> None:
    client.control.refuse = ResourceExhausted("calls.max_concurrent (1) calls are live")
    resp = await client.post("/api/calls", json={"to": "sip:4001@10.0.0.5"}, headers=bearer())
    assert resp.status == 503 and resp.headers["Retry-After"] == "5"
    assert (await resp.json())["error"]["code"] == "unavailable"
    client.control.refuse = ValueError("cannot route sip:4001@pbx: no outbound proxy")
    resp = await client.post("/api/calls", json={"to": "sip:4001@pbx"}, headers=bearer())
    assert resp.status == 400 and (await resp.json())["error"]["code"] == "cannot_route"


async def test_get_still_lists_calls(client) -> None:
    resp = await client.get("/api/calls", headers=bearer())
    assert resp.status == 200 and (await resp.json())["calls"][0]["call_id"] == "c1"


def test_parse_keeps_the_context_and_normalises_nothing_else() -> None:
    got = parse_dial_request({"to": "sip:4001@10.0.0.5;user=phone", "from": "sip:kefu@x.example"})
    assert got.to == "sip:4001@10.0.0.5;user=phone" and got.from_ == "sip:kefu@x.example"
    with pytest.raises(DialRequestError) as info:
        parse_dial_request({"to": "sip:4001@10.0.0.5", "context": None})
    assert info.value.code == "bad_context"
