"""The HTTP control surface with a fake media server behind it (one fake at one seam)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kefu.signaling.http import build_app


class FakeControl:
    def __init__(self) -> None:
        self.calls = {"c1": {"call_id": "c1", "state": "ai_active"}}
        self.transfers: list[tuple[str, str | None]] = []
        self.hangups: list[str] = []
        self.draining = False

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return not self.draining, {"draining": self.draining}

    def metrics_text(self) -> bytes:
        return b"kefu_active_calls 1.0\n"

    def list_calls(self) -> list[dict[str, Any]]:
        return list(self.calls.values())

    def transfer(self, call_id: str, target: str | None) -> None:
        if call_id not in self.calls:
            raise KeyError(call_id)
        if target == "sip:busy@x":
            raise ValueError("call is transferring")
        self.transfers.append((call_id, target))

    def hangup(self, call_id: str) -> None:
        if call_id not in self.calls:
            raise KeyError(call_id)
        self.hangups.append(call_id)


@pytest.fixture
async def client():
    control = FakeControl()
    async with TestClient(TestServer(build_app(control))) as c:
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
    assert (await (await client.get("/api/calls")).json())["calls"][0]["call_id"] == "c1"
    resp = await client.post("/api/calls/c1/transfer", json={"target": "sip:queue@vcc"})
    assert resp.status == 202
    assert client.control.transfers == [("c1", "sip:queue@vcc")]
    assert (await client.post("/api/calls/c1/hangup")).status == 202


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
    resp = await client.post(path, **kwargs)
    assert resp.status == status
    if code:
        assert (await resp.json())["error"]["code"] == code
