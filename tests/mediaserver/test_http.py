"""The HTTP control surface with a fake media server behind it (one fake at one seam)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from aiohttp.test_utils import TestClient, TestServer

from kefu.errors import CallStateConflict
from kefu.signaling.api_access import TransferAllowList
from kefu.signaling.auth import Authenticator
from kefu.signaling.http import build_app
from tests.signaling.fakes import SECRET, token

AUTH = Authenticator(secret=SECRET)
ALLOW = TransferAllowList(["sip:queue@vcc", "sip:busy@x", "sip:*@vcc.example"])


def bearer(role: str = "agent", user: str = "bob") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, role)}"}


class FakeControl:
    def __init__(self) -> None:
        self.calls = {
            "c1": {"call_id": "c1", "state": "ai_active"},
            "c2": {"call_id": "c2", "state": "transferring"},
        }
        self.transfers: list[tuple[str, str | None]] = []
        self.hangups: list[str] = []
        self.switches: list[tuple[str, str, str]] = []
        self.notes: list[tuple[str, str, str]] = []
        self.draining = False

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return not self.draining, {"draining": self.draining}

    def metrics_text(self) -> bytes:
        return b"kefu_active_calls 1.0\n"

    def list_calls(self) -> list[dict[str, Any]]:
        return list(self.calls.values())

    def transfer(
        self, call_id: str, target: str | None, who: str = "api", *, supervisor: bool = True
    ) -> None:
        if call_id not in self.calls:
            raise KeyError(call_id)
        if target == "sip:busy@x":
            raise ValueError("transfer target is not a URI")
        if self.calls[call_id]["state"] != "ai_active":
            raise CallStateConflict(call_id, self.calls[call_id]["state"], "transfer")
        self.transfers.append((call_id, target))

    def hangup(self, call_id: str, who: str = "api", *, supervisor: bool = True) -> None:
        if call_id not in self.calls:
            raise KeyError(call_id)
        self.hangups.append(call_id)

    def _switch(self, call_id: str, action: str, want: str, to: str, who: str) -> None:
        call = self.calls[call_id]  # KeyError: unknown call
        if call["state"] != want:
            raise CallStateConflict(call_id, call["state"], action, owner=call.get("owner"))
        call["state"] = to
        call["owner"] = who if to == "human_active" else None
        self.switches.append((action, call_id, who))

    async def listen(self, call_id: str, who: str) -> dict[str, Any]:
        call = self.calls[call_id]
        if call["state"] not in ("ai_active", "human_active"):
            raise CallStateConflict(call_id, call["state"], "listen in")
        self.switches.append(("listen", call_id, who))
        return {"room": f"call:{call_id}"}

    async def takeover(self, call_id: str, who: str) -> dict[str, Any]:
        await asyncio.sleep(0)  # the real one opens the call's room first
        self._switch(call_id, "takeover", "ai_active", "human_active", who)
        return {"room": f"call:{call_id}"}

    def note(self, call_id: str, who: str, text: str) -> None:
        if call_id not in self.calls:
            raise KeyError(call_id)
        self.notes.append((call_id, who, text))

    def handback(self, call_id: str, who: str, *, supervisor: bool = True) -> dict[str, Any]:
        self._switch(call_id, "handback", "human_active", "ai_active", who)
        return {}


@pytest.fixture
async def client():
    control = FakeControl()
    app = build_app(control, auth=AUTH, transfer_allow=ALLOW)
    async with TestClient(TestServer(app)) as c:
        c.control = control
        yield c


async def test_health_ready_metrics(client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    client.control.draining = True
    resp = await client.get("/readyz")
    assert resp.status == 503 and (await resp.json())["draining"] is True
    metrics = await client.get("/metrics")
    assert "kefu_active_calls" in await metrics.text()


async def test_calls_transfer_and_hangup(client) -> None:
    calls = await client.get("/api/calls", headers=bearer())
    assert (await calls.json())["calls"][0]["call_id"] == "c1"
    resp = await client.post(
        "/api/calls/c1/transfer", json={"target": "sip:queue@vcc"}, headers=bearer()
    )
    assert resp.status == 202
    assert client.control.transfers == [("c1", "sip:queue@vcc")]
    assert (await client.post("/api/calls/c1/hangup", headers=bearer())).status == 202
    assert client.control.hangups == ["c1"]


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "code"),
    [
        ("/api/calls/nope/transfer", {}, 404, "unknown_call"),
        ("/api/calls/nope/hangup", {}, 404, "unknown_call"),
        ("/api/calls/c1/transfer", {"data": b"{not json"}, 400, "bad_json"),
        ("/api/calls/c1/transfer", {"json": {"target": 5}}, 400, "bad_request"),
        ("/api/calls/c1/transfer", {"json": {"target": "sip:busy@x"}}, 409, "cannot_transfer"),
        ("/api/calls/c1/transfer", {"data": b"x" * 70000}, 413, None),
    ],
)
async def test_bad_requests_get_clear_errors(client, path, kwargs, status, code) -> None:
    resp = await client.post(path, headers=bearer(), **kwargs)
    assert resp.status == status
    if code:
        assert (await resp.json())["error"]["code"] == code


API = [
    ("GET", "/api/calls"),
    ("POST", "/api/calls/c1/transfer"),
    ("POST", "/api/calls/c1/hangup"),
    ("POST", "/api/calls/nope/hangup"),  # 401 before 404: no probing for call ids
    ("GET", "/api/no-such-thing"),  # nor for routes
]


@pytest.mark.parametrize(("method", "path"), API)
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic Ym9iOnNlY3JldA==",
        "Bearer not.a.jwt",
        f"Bearer {token('bob', 'agent', ttl=-60)}",  # expired beyond the leeway
        "Bearer " + token("bob", "agent").rsplit(".", 1)[0] + ".c2lnbmF0dXJl",  # bad signature
    ],
)
async def test_api_without_a_valid_token_is_401(client, method, path, authorization) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    resp = await client.request(method, path, headers=headers)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await resp.json())["error"]["code"] == "unauthorized"
    assert client.control.transfers == [] and client.control.hangups == []


@pytest.mark.parametrize(("method", "path"), API)
async def test_api_with_a_customer_token_is_403(client, method, path) -> None:
    resp = await client.request(method, path, headers=bearer("customer", "alice"))
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "forbidden"
    assert client.control.transfers == [] and client.control.hangups == []


@pytest.mark.parametrize("role", ["agent", "supervisor", "admin"])
async def test_staff_roles_may_use_the_api(client, role) -> None:
    assert (await client.get("/api/calls", headers=bearer(role))).status == 200
    assert (await client.post("/api/calls/c1/hangup", headers=bearer(role))).status == 202
    assert (await client.get("/api/no-such-thing", headers=bearer(role))).status == 404


async def test_health_ready_metrics_need_no_token(client) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(path)).status == 200


@pytest.mark.parametrize(
    "target",
    [
        "sip:toll@premium.example",
        "sip:queue@vcc.example.evil",
        "sip:queue@vcc;maddr=premium.example",
        "sip:any@vcc.example;maddr=premium.example",  # a host pattern with a re-route
        "sip:any@vcc.example?Replaces=abc",
        "sip:any@vcc.example:5070",  # the pattern names no port
        "sips:any@vcc.example",
        "tel:+19005550100",
        "sip:queue@vcc\r\nX-Evil: 1",
        "not a uri",
    ],
)
async def test_transfer_outside_the_allow_list_is_403_and_nothing_is_sent(client, target) -> None:
    with structlog.testing.capture_logs() as logs:
        resp = await client.post(
            "/api/calls/c1/transfer", json={"target": target}, headers=bearer("admin", "root")
        )
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == "target_not_allowed"
    assert client.control.transfers == []
    (line,) = [e for e in logs if e["event"] == "control_action"]
    assert line["outcome"] == "target_not_allowed" and line["target"] == target
    assert (line["user"], line["role"], line["call_id"]) == ("root", "admin", "c1")


@pytest.mark.parametrize(
    ("body", "sent"),
    [
        (None, None),  # no body: the server's own sip.transfer_target
        ({"target": ""}, None),
        ({"target": "sip:queue@vcc"}, "sip:queue@vcc"),
        ({"target": "SIP:queue@VCC"}, "SIP:queue@VCC"),  # scheme and host are case-blind
        ({"target": "sip:agent-7@vcc.example"}, "sip:agent-7@vcc.example"),
        ({"target": "sip:a@VCC.example;transport=tcp"}, "sip:a@VCC.example;transport=tcp"),
    ],
)
async def test_transfer_inside_the_allow_list_is_sent(client, body, sent) -> None:
    kwargs = {} if body is None else {"json": body}
    resp = await client.post("/api/calls/c1/transfer", headers=bearer(), **kwargs)
    assert resp.status == 202
    assert client.control.transfers == [("c1", sent)]


async def test_a_call_in_the_wrong_state_is_409_with_its_state_and_nothing_sent(client) -> None:
    with structlog.testing.capture_logs() as logs:
        resp = await client.post(
            "/api/calls/c2/transfer", json={"target": "sip:queue@vcc"}, headers=bearer()
        )
    assert resp.status == 409
    error = (await resp.json())["error"]
    assert (error["code"], error["state"]) == ("wrong_state", "transferring")
    assert client.control.transfers == []
    (action,) = [e for e in logs if e["event"] == "control_action"]
    assert (action["outcome"], action["state"]) == ("wrong_state", "transferring")


async def test_every_control_action_is_logged_with_who_did_it(client) -> None:
    with structlog.testing.capture_logs() as logs:
        await client.post("/api/calls/c1/hangup", headers=bearer("supervisor", "sue"))
        await client.post("/api/calls/gone/hangup", headers=bearer("agent", "bob"))
        await client.post("/api/calls/c1/transfer", json={"target": "sip:busy@x"}, headers=bearer())
        await client.post("/api/calls/c1/hangup")  # refused before any action
    actions = [e for e in logs if e["event"] == "control_action"]
    assert [(a["action"], a["call_id"], a["user"], a["role"], a["outcome"]) for a in actions] == [
        ("hangup", "c1", "sue", "supervisor", "accepted"),
        ("hangup", "gone", "bob", "agent", "unknown_call"),
        ("transfer", "c1", "bob", "agent", "cannot_transfer"),
    ]
    (refused,) = [e for e in logs if e["event"] == "api_refused"]
    assert refused["code"] == "unauthorized" and refused["path"] == "/api/calls/c1/hangup"


@pytest.mark.parametrize(
    "pattern",
    ["", "sip:q*@vcc", "sip:*@*.vcc", "tel:*", "*", "sip:*@vcc;maddr=x", "http://x/", "<sip:q@v>"],
)
def test_bad_allow_list_patterns_are_refused(pattern) -> None:
    with pytest.raises(ValueError):
        TransferAllowList([pattern])


def test_a_bad_allow_list_stops_start_up_naming_the_key() -> None:
    from kefu.errors import ConfigError
    from kefu.mediaserver.config import load_config

    with pytest.raises(ConfigError) as info:
        load_config(environ={"KEFU_CALLS_TRANSFER_ALLOW": "sip:*@vcc.example,sip:q*@x"})
    assert info.value.key == "calls.transfer_allow"
    config = load_config(environ={"KEFU_CALLS_TRANSFER_ALLOW": "sip:*@vcc.example,tel:+8610"})
    assert config.calls.transfer_allow == ("sip:*@vcc.example", "tel:+8610")


async def test_takeover_and_handback_move_the_call_and_name_who_did_it(client) -> None:
    resp = await client.post("/api/calls/c1/takeover", headers=bearer("agent", "ann"))
    assert resp.status == 200
    assert (await resp.json()) == {"status": "human_active", "room": "call:c1"}
    again = await client.post("/api/calls/c1/takeover", headers=bearer("agent", "bob"))
    assert again.status == 409
    body = await again.json()
    assert body["error"]["code"] == "wrong_state" and body["error"]["state"] == "human_active"
    assert body["error"]["owner"] == "ann" and "held by ann" in body["error"]["message"]
    back = await client.post("/api/calls/c1/handback", headers=bearer("supervisor", "sue"))
    assert back.status == 200 and (await back.json()) == {"status": "ai_active"}
    assert client.control.switches == [("takeover", "c1", "ann"), ("handback", "c1", "sue")]


async def test_two_agents_taking_one_call_at_once_exactly_one_wins(client) -> None:
    results = await asyncio.gather(
        *(
            client.post("/api/calls/c1/takeover", headers=bearer("agent", who))
            for who in ("ann", "bob", "cid")
        )
    )
    statuses = sorted(r.status for r in results)
    assert statuses == [200, 409, 409]
    owner = client.control.calls["c1"]["owner"]
    for r in results:
        if r.status == 409:
            assert (await r.json())["error"]["owner"] == owner


async def test_listen_gives_the_calls_room_and_refuses_calls_without_media(client) -> None:
    resp = await client.post("/api/calls/c1/listen", headers=bearer("supervisor", "sue"))
    assert resp.status == 200 and (await resp.json()) == {"room": "call:c1"}
    busy = await client.post("/api/calls/c2/listen", headers=bearer("agent", "ann"))
    assert busy.status == 409 and (await busy.json())["error"]["state"] == "transferring"
    assert (await client.post("/api/calls/c1/listen", headers=bearer("customer"))).status == 403
    assert (await client.post("/api/calls/c1/listen")).status == 401
    assert client.control.switches == [("listen", "c1", "sue")]


async def test_notes_are_kept_with_who_wrote_them_and_bad_ones_refused(client) -> None:
    ann = bearer("agent", "ann")
    note = {"text": "reshipped, ticket 4471"}
    ok = await client.post("/api/calls/c1/notes", json=note, headers=ann)
    assert ok.status == 201 and (await ok.json()) == {"status": "noted"}
    for body, status in (
        ({"text": ""}, 400),
        ({"text": "x" * 4001}, 400),
        ({"note": "hi"}, 400),
        (["hi"], 400),
    ):
        resp = await client.post("/api/calls/c1/notes", json=body, headers=bearer("agent"))
        assert resp.status == status, body
    raw = await client.post("/api/calls/c1/notes", data=b"{", headers=bearer("agent"))
    assert raw.status == 400 and (await raw.json())["error"]["code"] == "bad_json"
    unknown = await client.post("/api/calls/zz/notes", json={"text": "x"}, headers=bearer("agent"))
    assert unknown.status == 404
    anon = await client.post("/api/calls/c1/notes", json={"text": "x"})
    assert anon.status == 401
    assert client.control.notes == [("c1", "ann", "reshipped, ticket 4471")]


async def test_the_workbench_page_is_served_without_a_token(client) -> None:
    resp = await client.get("/agent")
    assert resp.status == 200 and "text/html" in resp.headers["Content-Type"]
    assert "agent.js" in await resp.text()


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/api/calls/nope/takeover", "agent", 404),
        ("/api/calls/c1/handback", "agent", 409),  # the AI has it: nothing to hand back
        ("/api/calls/c2/takeover", "agent", 409),  # transferring
        ("/api/calls/c1/takeover", "customer", 403),
        ("/api/calls/c1/takeover", None, 401),
    ],
)
async def test_takeover_refusals_change_nothing(
    client, path: str, headers: str | None, status: int
) -> None:
    resp = await client.post(path, headers=bearer(headers) if headers else {})
    assert resp.status == status
    assert client.control.switches == []
    assert client.control.calls["c1"]["state"] == "ai_active"
