"""``python -m loadtest.cluster_bench``: what sharing state through Redis costs.

Run inside ``unshare -n`` (loopback only); each part starts its own local cluster
(:mod:`loadtest.cluster`) and stops it.

* ``events``: two echo nodes; an ``/api/events`` reader on node 1 while SIPp places ``calls``
  short calls on node 2 (``rate``/s). Per event of node 2: the delay from the event's own
  ``at`` (node 2's clock, the same box) to its JSON arriving at the reader on node 1 —
  through node 2's bus, the Redis Stream and node 1's bus: p50/p99/max.
* ``turns``: one AI node; an aiortc caller asks ``questions`` spoken questions in one web
  call. Redis commands are counted with ``INFO commandstats`` over the call and over an idle
  stretch of the same length (the heartbeat, the watchdog, the blocking stream reads); the
  difference divided by the turns is what a turn costs.

Bounded: at most ``calls`` SIP calls, one web call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kefu.cluster.dialog_store import DIALOG_PREFIX
from kefu.mediaserver.room_calls import room_call_id
from kefu.signaling.tokens import mint_token
from loadtest.cluster import Cluster, start_cluster
from loadtest.events_reader import EventsReader
from loadtest.pcap import make_rtp_pcap, speech_like_pcm
from loadtest.peers import run_sipp, sipp_media_port


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def bench_events(workdir: Path, calls: int, rate: float) -> dict[str, Any]:
    pcap = workdir / "speech.pcap"
    make_rtp_pcap(pcap, speech_like_pcm(1.0))
    with start_cluster(workdir / "events", nodes=2, media_mode="echo") as cluster:
        with EventsReader(cluster.nodes[1].http_url, cluster.jwt_secret) as reader:
            result = run_sipp(
                "uac_echo",
                cluster.nodes[2].sip,
                calls=calls,
                rate=rate,
                media_port=sipp_media_port(),
                keys={"pcap": pcap},
                timeout=calls / rate + 60,
            )
            time.sleep(2.0)  # the last calls' call.ended
    arrivals = list(zip(reader.arrived, reader.events, strict=True))
    delays = [
        (arrived - float(e["at"])) * 1000
        for arrived, e in arrivals
        if e.get("node") == "node-2" and "at" in e
    ]
    kinds = sorted({e.get("type", "") for _, e in arrivals if e.get("node") == "node-2"})
    return {
        "calls": calls,
        "rate": rate,
        "sipp_ok": result.successful,
        "sipp_failed": result.failed,
        "events": len(delays),
        "types": kinds,
        "delay_ms_p50": _pct(delays, 0.50) if delays else None,
        "delay_ms_p99": _pct(delays, 0.99) if delays else None,
        "delay_ms_max": round(max(delays), 2) if delays else None,
        "delay_ms_mean": round(statistics.fmean(delays), 2) if delays else None,
    }


def _commandstats(cluster: Cluster) -> dict[str, int]:
    import redis

    client = redis.Redis(unix_socket_path=str(cluster.redis_url.removeprefix("unix://")))
    stats = client.info("commandstats")
    client.close()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _dialog_state(cluster: Cluster, call_id: str) -> dict[str, Any]:
    import redis

    client = redis.Redis(unix_socket_path=str(cluster.redis_url.removeprefix("unix://")))
    raw = client.get(DIALOG_PREFIX + call_id)
    client.close()
    return dict(json.loads(raw)) if raw else {}


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def bench_turns(workdir: Path, questions: int) -> dict[str, Any]:
    import numpy as np
    import soxr

    from kefu.ai_bridge.listen.heldout import piper_voice, speak
    from loadtest.webrtc_client import PacedPcmTrack, WebRtcClient

    asked = [
        "How long does delivery take?",
        "Can I return an item I bought on sale?",
        "Do you ship to Canada?",
        "How do I change my password?",
    ][:questions]
    voice = piper_voice()
    parts = [np.zeros(48000 * 4, np.int16)]
    for text in asked:
        pcm = speak(voice, text, noise_scale=0, noise_w_scale=0)
        parts += [soxr.resample(pcm, 16000, 48000).astype(np.int16), np.zeros(48000 * 9, np.int16)]
    mic = np.concatenate(parts)
    seconds = len(mic) / 48000 + 2
    with start_cluster(workdir / "turns", nodes=1, media_mode="ai") as cluster:
        room = "bench-turns"
        token = mint_token(cluster.jwt_secret, "caller", "customer", 600.0, room)
        idle_before = _commandstats(cluster)
        time.sleep(seconds)
        idle = _diff(_commandstats(cluster), idle_before)

        async def call() -> int:
            client = WebRtcClient(mic=PacedPcmTrack(mic))
            ws = cluster.nodes[1].http_url.replace("http://", "ws://") + "/ws"
            await client.connect_ws(ws, room, token=token)
            await asyncio.sleep(seconds)
            state = await asyncio.to_thread(_dialog_state, cluster, room_call_id(room))
            await client.close()
            return int(state.get("turns", 0))

        before = _commandstats(cluster)
        turns_seen = asyncio.run(call())
        busy = _diff(_commandstats(cluster), before)
    extra = {k: busy.get(k, 0) - idle.get(k, 0) for k in set(busy) | set(idle)}
    extra = {k: v for k, v in extra.items() if v > 0}
    turns = max(turns_seen, 1)
    return {
        "questions": len(asked),
        "turns_traced": turns_seen,
        "seconds": round(seconds, 1),
        "idle_commands": idle,
        "call_commands": busy,
        "per_turn": {k: round(v / turns, 2) for k, v in sorted(extra.items())},
        "per_turn_total": round(sum(extra.values()) / turns, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.cluster_bench", description=__doc__)
    sub = parser.add_subparsers(dest="part", required=True)
    events = sub.add_parser("events", help="events from node 2 to a reader on node 1")
    events.add_argument("--calls", type=int, default=100)
    events.add_argument("--rate", type=float, default=10.0)
    turns = sub.add_parser("turns", help="Redis commands per AI turn")
    turns.add_argument("--questions", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kefu-cb-") as tmp:
        if args.part == "events":
            out = bench_events(Path(tmp), args.calls, args.rate)
        else:
            out = bench_turns(Path(tmp), args.questions)
    print(json.dumps(out))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
