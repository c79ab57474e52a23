"""``kefu call``: the CLI against the real HTTP app and event stream, a fake media server
behind them (it publishes the call's events as the dialer would). The real SIP path:
tests/peers/test_sipp_outbound.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import structlog
from aiohttp.test_utils import TestServer

from kefu.errors import ResourceExhausted
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.cli import main
from kefu.mediaserver.events import CallAnswered, CallDialing, CallFailed, CallRinging, event_json
from kefu.signaling.dial_request import DialRequest
from kefu.signaling.events_ws import add_event_routes
from kefu.signaling.http import build_app
from tests.mediaserver.test_http import AUTH, FakeControl
from tests.signaling.fakes import token


class Dialer(FakeControl):
    """Answers like the server: 202 at once, then ringing and the outcome on the bus."""

    def __init__(self, bus: EventBus, outcome: str) -> None:
        super().__init__()
        self.bus = bus
        self.outcome = outcome
        self.dialed: list[DialRequest] = []

    async def dial(self, request: DialRequest, who: str) -> dict[str, Any]:
        if self.outcome == "full":
            raise ResourceExhausted("calls.max_concurrent (1) calls are live")
        self.dialed.append(request)
        asyncio.get_running_loop().call_later(0.05, self._progress)
        self.bus.publish(CallDialing("other", time.time(), "sip:x@y", "sip:k@k", "echo", {}, who))
        return {"call_id": "out1", "state": "dialing", "to": request.to}

    def _progress(self) -> None:
        now = time.time()
        self.bus.publish(CallRinging("out1", now, 180, "Ringing", False))
        if self.outcome == "answered":
            self.bus.publish(CallAnswered("out1", now, 41.5, "PCMU"))
        else:
            self.bus.publish(CallFailed("out1", now, 486, "Busy Here"))


async def run_cli(outcome: str, *args: str) -> tuple[int, Dialer]:
    bus = EventBus()
    control = Dialer(bus, outcome)
    app = build_app(control, auth=AUTH)
    add_event_routes(app, bus, event_json, AUTH)
    server = TestServer(app)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        argv = ["call", "sip:4001@10.0.0.5", "--server", url, "--token", token("ann", "agent")]
        with structlog.testing.capture_logs():  # the server's log lines stay off stdout
            status = await asyncio.to_thread(main, [*argv, *args])
    finally:
        await server.close()
    return status, control


async def test_answered_call_prints_its_id_and_exits_0(capsys) -> None:
    status, control = await run_cli(
        "answered", "--mode", "ai", "--from", "4000", "--context", '{"greeting": "Hi"}'
    )
    assert status == 0
    assert control.dialed == [DialRequest("sip:4001@10.0.0.5", "ai", "4000", {"greeting": "Hi"})]
    out = capsys.readouterr().out.splitlines()
    assert out == ["call out1 to sip:4001@10.0.0.5", "answered in 41.5 ms (PCMU)"]


async def test_failed_call_exits_1_with_the_sip_status(capsys) -> None:
    status, _ = await run_cli("busy", "--json")
    assert status == 1
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "result": "failed",
        "call_id": "out1",
        "http_status": 202,
        "sip_status": 486,
        "reason": "Busy Here",
        "error": {},
    }


async def test_no_wait_exits_once_placed(capsys) -> None:
    status, _ = await run_cli("busy", "--no-wait")
    assert status == 0
    assert capsys.readouterr().out.splitlines() == ["call out1 to sip:4001@10.0.0.5", "dialing"]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("--context", "[1]"), 2, '"context" must be a JSON object'),
        (("--context", "{nope"), 2, "--context is not JSON"),
        (("--mode", "echo", "--from", "a b"), 2, '"from" must be'),
    ],
)
async def test_bad_requests_exit_2(
    capsys, args: tuple[str, ...], status: int, message: str
) -> None:
    got, control = await run_cli("answered", *args)
    assert got == status and control.dialed == []
    assert message in capsys.readouterr().err


async def test_a_full_server_exits_3(capsys) -> None:
    status, _ = await run_cli("full")
    assert status == 3
    assert "refused (503): calls.max_concurrent (1) calls are live" in capsys.readouterr().err


def test_an_unreachable_server_exits_3(capsys) -> None:
    # port 9 (discard) has no listener on a test box: the connection is refused at once
    argv = ["call", "sip:4001@10.0.0.5", "--server", "http://127.0.0.1:9", "--token", "t"]
    assert main(argv) == 3
    assert "unreachable" in capsys.readouterr().err
