"""A web call hosted by a room worker, seen and handled through the front.

Two in-process kefu servers: the worker serves its internal routes on a Unix socket (as a room
worker process does), the front's :class:`WorkerLink` follows it. The web caller is a local
SFU participant with the customer role, so the worker's room gets its AI (a stand-in agent
that records being paused and resumed) and the call ``room:<id>``.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiortc.mediastreams import MediaStreamTrack
from helpers.inproc import server_config

from kefu.errors import CallStateConflict
from kefu.mediaserver.events import RelayedEvent, event_json
from kefu.mediaserver.room_workers import RoomWorkers
from kefu.mediaserver.server import KefuServer
from kefu.mediaserver.worker_api import EVENTS_PATH, add_worker_routes, calls_path
from kefu.mediaserver.worker_link import WorkerLink
from kefu.signaling.relay import RELAY_KEY_HEADER
from kefu.signaling.shards import shard_of
from tests.mediaserver.test_room_channel import PausableAgent, until

pytestmark = pytest.mark.netns

KEY = secrets.token_hex(24)


def room_on(shard: int, shards: int = 2) -> str:
    while True:
        room = f"web-{secrets.token_hex(4)}"
        if shard_of(room, shards) == shard:
            return room


class OneWorker:
    """What the link asks of :class:`RoomWorkers`, for one worker at a Unix socket."""

    key = KEY

    def __init__(self, path: str) -> None:
        self.path = path
        self.up = True

    def socket_for(self, shard: int) -> str | None:
        return self.path if self.up and shard == 1 else None

    def socket_path(self, shard: int) -> str:
        return self.path


async def echo_server(tmp: Path) -> KefuServer:
    server = KefuServer(server_config(tmp))
    await server.start()
    return server


class Node:
    def __init__(self, front: KefuServer, worker: KefuServer, workers: OneWorker) -> None:
        self.front = front
        self.worker = worker
        self.workers = workers
        self.agents: list[PausableAgent] = []
        self.relayed: list[dict[str, Any]] = []
        front.bus.attach(
            lambda e: self.relayed.append(event_json(e)) if isinstance(e, RelayedEvent) else None
        )

        def make_bot(room_id: str, hears: MediaStreamTrack, publish: Any) -> PausableAgent:
            self.agents.append(PausableAgent(publish))
            return self.agents[-1]

        worker.rooms.make_bot = make_bot

    def seen(self, call_id: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.relayed if e["call_id"] == call_id and e["type"] == kind]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    front = await echo_server(tmp_path / "front")
    worker = await echo_server(tmp_path / "worker")
    sockets = tempfile.mkdtemp(prefix="kefu-link-")  # a Unix socket path has 107 bytes at most
    path = f"{sockets}/w1.sock"
    app = web.Application()
    add_worker_routes(app, worker, KEY)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, path).start()
    workers = OneWorker(path)
    link = WorkerLink(cast(RoomWorkers, workers), front.bus, 2, retry_s=0.05)
    front.worker_link = link
    link.start()
    await until(lambda: worker.bus.subscriber_count >= 1)  # the front follows its events
    try:
        yield Node(front, worker, workers)
    finally:
        await link.close()
        await runner.cleanup()
        await worker.stop()
        await front.stop()


async def test_the_front_lists_relays_and_switches_a_call_its_worker_hosts(node: Node) -> None:
    room = room_on(1)
    call_id = f"room:{room}"
    await node.worker.rooms.join(room, "alice", role="customer")
    await until(lambda: bool(node.seen(call_id, "call.started")))
    (started,) = node.seen(call_id, "call.started")
    assert (started["kind"], started["v"]) == ("webrtc", 1)

    (listed,) = await node.front.list_calls()
    assert (listed["call_id"], listed["state"], listed["channel"]) == (
        call_id,
        "ai_active",
        "webrtc",
    )

    assert await node.front.listen(call_id, "ann") == {"room": room}
    assert await node.front.takeover(call_id, "ann") == {"room": room}
    assert node.agents[0].floor == ["pause"]
    with pytest.raises(CallStateConflict) as info:
        await node.front.takeover(call_id, "bob")
    assert (info.value.state, info.value.owner) == ("human_active", "ann")
    (listed,) = await node.front.list_calls()
    assert (listed["state"], listed["owner"]) == ("human_active", "ann")

    assert await node.front.control.assign(call_id, "ann", "bob") == {"owner": "bob"}
    with pytest.raises(ValueError):
        await node.front.control.assign(call_id, "bob", "")
    assert await node.front.control.assign(call_id, "lee", "ann", supervisor=True) == {
        "owner": "ann"
    }
    await node.front.control.note(call_id, "ann", "asked for a refund, order 5521")
    assert await node.front.handback(call_id, "ann") == {}
    assert node.agents[0].floor == ["pause", "resume"]
    await until(lambda: len(node.seen(call_id, "call.state_changed")) == 2)
    changes = [(e["new"], e["reason"]) for e in node.seen(call_id, "call.state_changed")]
    assert changes == [("human_active", "taken over by ann"), ("ai_active", "handed back by ann")]
    await until(lambda: len(node.seen(call_id, "call.assigned")) == 2)
    owners = [(e["old"], e["new"], e["by"]) for e in node.seen(call_id, "call.assigned")]
    assert owners == [("ann", "bob", "ann"), ("bob", "ann", "lee")]
    await until(lambda: bool(node.seen(call_id, "call.note")))
    (note,) = node.seen(call_id, "call.note")
    assert (note["by"], note["text"]) == ("ann", "asked for a refund, order 5521")
    # The front published nothing of its own for this call: every event came from the worker.
    assert node.front.rooms.calls == {}


async def test_unknown_calls_a_wrong_key_and_a_worker_that_is_down(node: Node) -> None:
    missing = f"room:{room_on(1)}"
    for action in (node.front.takeover, node.front.handback, node.front.listen):
        with pytest.raises(KeyError):
            await action(missing, "ann")
    with pytest.raises(KeyError):
        await node.front.control.note(missing, "ann", "no such call")
    # A phone call id or a room on the front never goes to the worker.
    assert node.front.worker_link is not None
    assert node.front.worker_link.shard_for("c-1234") == 0
    assert node.front.worker_link.shard_for(f"room:{room_on(0)}") == 0

    connector = aiohttp.UnixConnector(path=node.workers.path)
    async with aiohttp.ClientSession(connector=connector) as http:
        for key in ("", "not-the-key"):
            headers = {RELAY_KEY_HEADER: key} if key else {}
            async with http.get("http://w" + calls_path(), headers=headers) as response:
                assert response.status == 403
            async with http.get("http://w" + EVENTS_PATH, headers=headers) as response:
                assert response.status == 403
        url = "http://w" + calls_path(missing, "takeover")
        async with http.post(url, data=b"{", headers={RELAY_KEY_HEADER: KEY}) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == "bad_json"
        url = "http://w" + calls_path(missing, "hangup")
        async with http.post(url, json={"who": "x"}, headers={RELAY_KEY_HEADER: KEY}) as response:
            assert response.status == 404

    room = room_on(1)
    await node.worker.rooms.join(room, "alice", role="customer")
    assert [c["call_id"] for c in await node.front.list_calls()] == [f"room:{room}"]
    node.workers.up = False  # restarting: its calls are not listed, actions find no call
    assert await node.front.list_calls() == []
    with pytest.raises(KeyError):
        await node.front.takeover(f"room:{room}", "ann")
    node.workers.up = True
    await asyncio.sleep(0)
    assert await node.front.takeover(f"room:{room}", "ann") == {"room": room}
