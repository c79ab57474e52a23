"""Two real kefu nodes sharing a real redis-server (and Kamailio in front, unused here).

A WebRTC client joining through either node reaches the one node hosting the room; a call's
events on one node reach an events reader on the other; a workbench action on one node
reaches the call on the other; ``/api/cluster`` shows both nodes and the room.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from helpers.events_reader import EventsReader

from kefu.signaling.tokens import mint_token
from loadtest.cluster import Cluster, missing_peers, start_cluster
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import run_sipp, sipp_media_port
from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

pytestmark = [
    pytest.mark.netns,
    pytest.mark.peer,
    pytest.mark.skipif(
        bool(missing_peers()),
        reason=f"{', '.join(missing_peers())} not installed (./scripts/setup.sh --test)",
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("cl"), nodes=2, media_mode="echo") as running:
        yield running


def _api(url: str, token: str | None, method: str = "GET") -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _dominant_hz(pcm: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    spectrum[:5] = 0
    return float(np.argmax(spectrum)) * 48000 / len(pcm)


def test_the_cluster_view_lists_both_nodes_for_admins_only(cluster: Cluster) -> None:
    url = cluster.nodes[1].http_url + "/api/cluster"
    admin = mint_token(cluster.jwt_secret, "ops", "admin")
    status, view = _api(url, admin)
    assert status == 200, view
    assert [n["id"] for n in view["nodes"]] == ["node-1", "node-2"]
    assert [n["self"] for n in view["nodes"]] == [True, False]
    assert {n["sip"] for n in view["nodes"]} == {n.sip for n in cluster.nodes.values()}
    assert view["state"]["redis"]["up"] is True
    assert _api(url, mint_token(cluster.jwt_secret, "amy", "agent"))[0] == 403
    assert _api(url, None)[0] == 401


async def test_callers_joining_through_different_nodes_meet_in_one_room(
    cluster: Cluster,
) -> None:
    room = "cross-node-room"
    a = WebRtcClient(mic=PacedPcmTrack.tone(440.0, seconds=30))
    b = WebRtcClient(mic=PacedPcmTrack.tone(660.0, seconds=30))
    try:
        for client, k in ((a, 1), (b, 2)):
            ws = cluster.nodes[k].http_url.replace("http://", "ws://") + "/ws"
            token = mint_token(cluster.jwt_secret, f"c{k}", "admin", 600.0, room)
            await client.connect_ws(ws, room, token=token)
        await asyncio.wait_for(asyncio.gather(a.connected.wait(), b.connected.wait()), 15)
        await asyncio.sleep(3.0)  # three seconds of each other's tone
        heard_by_a, heard_by_b = a.heard()[-48000:], b.heard()[-48000:]
    finally:
        await a.close()
        await b.close()
    assert abs(_dominant_hz(heard_by_a) - 660.0) < 15
    assert abs(_dominant_hz(heard_by_b) - 440.0) < 15
    admin = mint_token(cluster.jwt_secret, "ops", "admin")
    _, view = _api(cluster.nodes[2].http_url + "/api/cluster", admin)
    hosts = [r["node"] for r in view["rooms"] if r["room"] == room]
    assert len(hosts) == 1 and hosts[0] in ("node-1", "node-2")


async def test_a_forged_cluster_hop_is_not_believed(cluster: Cluster) -> None:
    """A client claiming to be another node (hop header, wrong key) is routed like anyone:
    it meets the room's first participant on the room's node instead of opening a second
    room of the same name where it connected."""
    room = "forged-hop-room"
    token = mint_token(cluster.jwt_secret, "admin-a", "admin", 600.0, room)
    ws = {k: n.http_url.replace("http://", "ws://") + "/ws" for k, n in cluster.nodes.items()}
    forged = {
        "X-Kefu-Cluster-Hop": "node-9",
        "X-Kefu-Relay-Key": "0" * 64,
        "X-Kefu-Client-Ip": "203.0.113.66",
    }
    async with aiohttp.ClientSession() as http:
        first = await http.ws_connect(f"{ws[1]}?token={token}")
        await first.send_json({"v": 1, "type": "join", "room": room})
        joined = await first.receive_json(timeout=10)
        assert joined["type"] == "joined", joined
        host = _room_of(cluster, room)
        other = 2 if host == "node-1" else 1
        token_b = mint_token(cluster.jwt_secret, "admin-b", "admin", 600.0, room)
        second = await http.ws_connect(f"{ws[other]}?token={token_b}", headers=forged)
        await second.send_json({"v": 1, "type": "join", "room": room})
        met = await second.receive_json(timeout=10)
        assert met["type"] == "joined", met
        assert [p["id"] for p in met["participants"]] == [joined["participant"]]
        await first.close()
        await second.close()


def _room_of(cluster: Cluster, room: str) -> str:
    admin = mint_token(cluster.jwt_secret, "ops", "admin")
    _, view = _api(cluster.nodes[1].http_url + "/api/cluster", admin)
    [host] = [r["node"] for r in view["rooms"] if r["room"] == room]
    return str(host)


def test_a_call_on_one_node_is_seen_and_hung_up_from_the_other(
    cluster: Cluster, tmp_path: Path
) -> None:
    pcap = tmp_path / "speech.pcap"
    make_rtp_pcap(pcap, speech_like_pcm(20.0))
    result: dict[str, Any] = {}

    def call() -> None:  # node 2 answers; kefu must hang up (the scenario waits for BYE)
        result["sipp"] = run_sipp(
            "uac_wait_bye",
            cluster.nodes[2].sip,
            media_port=sipp_media_port(),
            keys={"pcap": pcap},
            timeout=30,
        )

    with EventsReader(cluster.nodes[1].http_url, cluster.jwt_secret) as reader:
        caller = threading.Thread(target=call)
        caller.start()
        started = reader.wait_for("call.started", timeout=20)
        assert started["node"] == "node-2"
        call_id = started["call_id"]
        supervisor = mint_token(cluster.jwt_secret, "sue", "supervisor")
        status, listed = _api(cluster.nodes[1].http_url + "/api/calls", supervisor)
        assert status == 200
        assert [c["node"] for c in listed["calls"] if c["call_id"] == call_id] == ["node-2"]
        url = f"{cluster.nodes[1].http_url}/api/calls/{call_id}/hangup"
        status, answer = _api(url, supervisor, method="POST")
        assert status in (200, 202, 204), answer
        caller.join(40)
        ended = reader.wait_for("call.ended", timeout=20)
    assert result["sipp"].ok, result["sipp"].errors
    assert ended["call_id"] == call_id and ended["reason"] == "api"
    assert ended["node"] == "node-2"


def test_kefu_hangs_up_a_call_that_came_through_kamailio_along_its_record_route(
    cluster: Cluster, tmp_path: Path
) -> None:
    """kefu's own BYE (an API hang-up) follows the route set Kamailio recorded."""
    pcap = tmp_path / "speech.pcap"
    make_rtp_pcap(pcap, speech_like_pcm(20.0))
    result: dict[str, Any] = {}

    def call() -> None:
        result["sipp"] = run_sipp(
            "uac_wait_bye", cluster.entry, media_port=sipp_media_port(), keys={"pcap": pcap},
            timeout=30,
        )  # fmt: skip

    with EventsReader(cluster.nodes[1].http_url, cluster.jwt_secret) as reader:
        caller = threading.Thread(target=call)
        caller.start()
        started = reader.wait_for("call.started", timeout=20)
        supervisor = mint_token(cluster.jwt_secret, "sue", "supervisor")
        url = f"{cluster.nodes[1].http_url}/api/calls/{started['call_id']}/hangup"
        status, answer = _api(url, supervisor, method="POST")
        assert status in (200, 202, 204), answer
        caller.join(40)
    assert result["sipp"].ok, result["sipp"].errors


def test_a_draining_node_leaves_kamailios_rotation_and_its_call_finishes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """SIGTERM: node 2 drains (its call goes on), answers Kamailio's probes 503 and gets no
    new call; all of them go to node 1. Last in this module: node 2 is gone afterwards."""
    pcap = tmp_path / "speech.pcap"
    make_rtp_pcap(pcap, speech_like_pcm(6.0))
    short = tmp_path / "short.pcap"
    make_rtp_pcap(short, speech_like_pcm(0.5))
    result: dict[str, Any] = {}

    def long_call() -> None:  # straight to node 2, 6 s of audio, then the caller hangs up
        result["long"] = run_sipp(
            "uac_echo", cluster.nodes[2].sip, media_port=sipp_media_port(),
            keys={"pcap": pcap}, timeout=30,
        )  # fmt: skip

    with EventsReader(cluster.nodes[1].http_url, cluster.jwt_secret) as reader:
        caller = threading.Thread(target=long_call)
        caller.start()
        reader.wait_for("call.started", timeout=20)
        cluster.kill_node(2, signal.SIGTERM)
        cluster.wait_dispatcher({cluster.nodes[2].sip: False}, timeout=10)
        before = cluster.nodes[1].metric("kefu_calls_total", 'result="completed"')
        new = run_sipp(
            "uac_echo", cluster.entry, calls=10, rate=10, media_port=sipp_media_port(),
            keys={"pcap": short}, timeout=30,
        )  # fmt: skip
        caller.join(40)
    assert new.ok and new.successful == 10, new.errors
    deadline = time.monotonic() + 5.0  # a call is counted once its teardown is done
    while (done := cluster.nodes[1].metric("kefu_calls_total", 'result="completed"')) < (
        before + 10
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert done - before == 10  # every new call went to node 1
    assert result["long"].ok, result["long"].errors  # the draining node's call finished
