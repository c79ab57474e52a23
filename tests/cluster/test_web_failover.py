"""A web caller whose node dies carries on, on a live node, with an AI that remembers.

Two AI nodes share Redis. The caller asks about returning a jacket on the node hosting its
room, then that node is killed (SIGKILL). The caller's resume through the other node is
refused with ``unknown_session`` once the dead node's heartbeat has expired, so it joins its
room again (as the caller page does, kefu/web/call.js) and lands on the live node. There it
asks "How long does that take?": an AI that remembers answers about the refund (5 to 7 business
days); one that forgot would take it as a delivery question (3 to 5 business days).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import numpy as np
import pytest
from helpers.events_reader import EventsReader

from kefu.signaling.tokens import mint_token
from loadtest.cluster import Cluster, missing_peers, start_cluster
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        bool(missing_peers()),
        reason=f"{', '.join(missing_peers())} not installed (./scripts/setup.sh --test)",
    ),
]

QUESTION = "I'd like to return my jacket."
FOLLOW_UP = "How long does that take?"
RATE = 48000


def _speech(text: str, lead_s: float, tail_s: float) -> np.ndarray:
    import soxr

    from kefu.ai_bridge.listen.heldout import piper_voice, speak

    pcm = speak(piper_voice(), text, noise_scale=0, noise_w_scale=0)
    voiced = soxr.resample(pcm, 16000, RATE).astype(np.int16)
    lead, tail = np.zeros(int(RATE * lead_s), np.int16), np.zeros(int(RATE * tail_s), np.int16)
    return np.concatenate([lead, voiced, tail])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("fo"), nodes=2, media_mode="ai") as running:
        yield running


def _room_host(cluster: Cluster, room: str, ask: int = 1) -> str:
    """The node hosting ``room``, as node ``ask`` reads the registry."""
    request = urllib.request.Request(
        cluster.nodes[ask].http_url + "/api/cluster",
        headers={"Authorization": f"Bearer {mint_token(cluster.jwt_secret, 'ops', 'admin')}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        view = json.loads(answer.read())
    [host] = [r["node"] for r in view["rooms"] if r["room"] == room]
    return str(host)


def _bot_line(
    reader: EventsReader, node: str, words: tuple[str, ...], within: float, *, here: str
) -> str:
    """A line the bot said on ``node`` with one of ``words``; the reader is on node ``here``
    (its own events carry no ``node`` field, other nodes' do)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for event in list(reader.events):
            if (
                event.get("type") == "transcript.final"
                and event.get("speaker") == "bot"
                and event.get("node", here) == node
            ):
                text = str(event.get("text", "")).lower()
                if any(w in text for w in words):
                    return text
        time.sleep(0.1)
    lines = [(e.get("node"), e.get("speaker"), e.get("text")) for e in reader.events
             if e.get("type") == "transcript.final"]  # fmt: skip
    raise AssertionError(f"no bot line with {words} from {node} in {within} s: {lines}")


async def _resume_refused(ws_url: str, token: str, session: str, within: float) -> str:
    """Resume ``session`` through ``ws_url`` until the answer is final; that answer's code."""
    deadline = time.monotonic() + within
    answers: list[str] = []
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.ws_connect(f"{ws_url}?token={token}") as ws:
                await ws.send_json({"v": 1, "type": "resume", "session": session, "token": token})
                msg = await ws.receive(timeout=10)
            answers.append(str(msg.data)[:120])
            if msg.type is aiohttp.WSMsgType.TEXT:
                code = str(json.loads(msg.data).get("code", ""))
                if code == "unknown_session":
                    return code
            await asyncio.sleep(0.25)  # room_unavailable: the dead node still looks alive
    raise AssertionError(f"resume not refused as unknown_session in {within} s: {answers[-5:]}")


@pytest.mark.timeout(420)
async def test_a_web_caller_continues_on_a_live_node_and_the_ai_remembers(
    cluster: Cluster,
) -> None:
    room = f"failover-{int(time.time())}"
    token = mint_token(cluster.jwt_secret, "caller", "customer", 600.0, room)
    ws = {k: n.http_url.replace("http://", "ws://") + "/ws" for k, n in cluster.nodes.items()}
    first = WebRtcClient(mic=PacedPcmTrack(_speech(QUESTION, 4.0, 60.0)))
    await first.connect_ws(ws[1], room, token=token)
    host = _room_host(cluster, room)
    dead_k = int(host.split("-")[1])
    [live_k] = [k for k in cluster.nodes if k != dead_k]
    live = f"node-{live_k}"
    reader = EventsReader(cluster.nodes[live_k].http_url, cluster.jwt_secret)
    with reader:
        answer = await asyncio.to_thread(_bot_line, reader, host, ("return",), 90.0, here=live)
        assert "30 days" in answer
        await asyncio.sleep(1.0)  # the turn's state reaches Redis within milliseconds
        session = first.session_id
        assert session
        killed_at = time.monotonic()
        cluster.kill_node(dead_k, signal.SIGKILL)
        await first.close()
        code = await _resume_refused(ws[live_k], token, session, within=30.0)
        assert code == "unknown_session"
        second = WebRtcClient(mic=PacedPcmTrack(_speech(FOLLOW_UP, 3.0, 40.0)))
        try:
            await second.connect_ws(ws[live_k], room, token=token)
            rejoined_s = time.monotonic() - killed_at
            assert _room_host(cluster, room, live_k) == live
            follow = await asyncio.to_thread(
                _bot_line, reader, live, ("refund", "business"), 90.0, here=live
            )
        finally:
            await second.close()
    assert "refund" in follow and "5 to 7" in follow, follow
    assert rejoined_s < 15.0, rejoined_s
    restored = _readyz(cluster, live_k)["cluster"]["dialog"]["restored"]
    assert restored >= 1


def _readyz(cluster: Cluster, k: int) -> dict[str, Any]:
    with urllib.request.urlopen(cluster.nodes[k].http_url + "/readyz", timeout=10) as answer:
        return dict(json.loads(answer.read()))
