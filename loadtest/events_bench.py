"""``python -m loadtest events``: call events through the bus to ``/api/events`` readers.

One process, one event loop: kefu's HTTP app (the real :func:`kefu.signaling.http.build_app`
with :func:`kefu.signaling.events_ws.add_event_routes` on a real :class:`EventBus`) listens on
127.0.0.1, and N WebSocket readers (aiohttp clients) connect to it with an agent token. Two
phases per reader count:

* ``paced``: events published at ``rate``/s for ``seconds``; each reader notes, per event, the
  delay from publish (the event's own ``at``) to the JSON arriving on its socket: p50/p99;
* ``burst``: ``burst`` events published back to back (yielding to the loop between events);
  the publish rate, and the deliveries per second summed over the readers until every reader
  has seen the last event or been told what it dropped.

Readers and server share the loop, so the numbers are what one kefu core does for both sides
of the socket: a floor for the server alone. Bounded: at most ``rate × seconds + burst``
events per reader count, loopback only.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.events import DtmfReceived, event_json
from kefu.signaling.auth import Authenticator
from kefu.signaling.events_ws import EventStreamSettings, add_event_routes
from kefu.signaling.http import build_app
from kefu.signaling.tokens import mint_token

SECRET = "events-bench-secret-0123456789abcdef"


class _NoCalls:
    """The call-control side of the app; the benchmark only reads events."""

    def ready(self) -> tuple[bool, dict[str, Any]]:
        return True, {}

    def metrics_text(self) -> bytes:
        return b""

    def list_calls(self) -> list[dict[str, Any]]:
        return []

    def transfer(self, call_id: str, target: str | None) -> None:
        raise KeyError(call_id)

    def hangup(self, call_id: str) -> None:
        raise KeyError(call_id)

    def takeover(self, call_id: str, who: str) -> None:
        raise KeyError(call_id)

    def handback(self, call_id: str, who: str) -> None:
        raise KeyError(call_id)


@dataclass
class _Reader:
    delays_ms: list[float] = field(default_factory=list)
    received: int = 0
    dropped: int = 0
    last_seq: int = -1


async def _read(ws: aiohttp.ClientWebSocketResponse, reader: _Reader, done: int) -> None:
    async for msg in ws:
        if msg.type is not aiohttp.WSMsgType.TEXT:
            break
        event = json.loads(msg.data)
        if event["type"] == "events.dropped":
            reader.dropped += int(event["count"])
            continue
        if event["type"] != "call.dtmf":
            continue
        reader.received += 1
        reader.delays_ms.append((time.time() - event["at"]) * 1000)
        reader.last_seq = int(event["call_id"].rsplit("-", 1)[1])
        if reader.last_seq >= done:
            return


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def _phase(
    bus: EventBus, url: str, readers: int, count: int, interval: float
) -> dict[str, Any]:
    token = mint_token(SECRET, "bench", "agent")
    async with aiohttp.ClientSession() as session:
        sockets = [await session.ws_connect(f"{url}?token={token}") for _ in range(readers)]
        for ws in sockets:  # the stream's first message says the subscription is live
            first = await ws.receive_json(timeout=10)
            assert first["type"] == "events.subscribed", first
        state = [_Reader() for _ in sockets]
        tasks = [
            asyncio.create_task(_read(ws, r, count - 1))
            for ws, r in zip(sockets, state, strict=True)
        ]
        t0 = time.perf_counter()
        for seq in range(count):
            bus.publish(DtmfReceived(f"bench-{seq}", time.time(), "5", "rfc4733"))
            if interval:
                await asyncio.sleep(max(0.0, t0 + (seq + 1) * interval - time.perf_counter()))
            else:
                await asyncio.sleep(0)
        published_s = time.perf_counter() - t0
        # A reader that lost the last event to its bounded queue never sees it: bound the wait.
        await asyncio.wait(tasks, timeout=30)
        drained_s = time.perf_counter() - t0
        for task in tasks:
            task.cancel()
        for ws in sockets:
            await ws.close()
    delays = [d for r in state for d in r.delays_ms]
    delivered = sum(r.received for r in state)
    return {
        "readers": readers,
        "published": count,
        "publish_per_s": round(count / published_s),
        "delivered": delivered,
        "dropped": sum(r.dropped for r in state),
        "deliveries_per_s": round(delivered / drained_s),
        "delay_ms_p50": _pct(delays, 0.5),
        "delay_ms_p99": _pct(delays, 0.99),
        "delay_ms_mean": round(statistics.fmean(delays), 2) if delays else None,
    }


async def run(
    reader_counts: list[int], rate: float, seconds: float, burst: int, queue: int
) -> dict[str, Any]:
    auth = Authenticator(secret=SECRET)
    bus = EventBus()
    app = build_app(_NoCalls(), auth=auth)
    add_event_routes(
        app, bus, event_json, auth, EventStreamSettings(queue_size=queue, max_readers=200)
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/api/events"
    results: list[dict[str, Any]] = []
    try:
        for n in reader_counts:
            paced = await _phase(bus, url, n, int(rate * seconds), 1.0 / rate)
            bursty = await _phase(bus, url, n, burst, 0.0)
            results.append({"paced": paced, "burst": bursty})
    finally:
        await runner.cleanup()
    return {"rate": rate, "seconds": seconds, "burst": burst, "queue": queue, "runs": results}


def table(summary: dict[str, Any]) -> tuple[str, str]:
    header = (
        "| readers | paced events/s | delay p50 ms | delay p99 ms | dropped (paced) "
        "| burst publish/s | burst deliveries/s | dropped (burst) |\n| --- | --- | --- | --- "
        "| --- | --- | --- | --- |"
    )
    rows = []
    for run in summary["runs"]:
        p, b = run["paced"], run["burst"]
        rows.append(
            f"| {p['readers']} | {summary['rate']:g} | {p['delay_ms_p50']} | {p['delay_ms_p99']} "
            f"| {p['dropped']} | {b['publish_per_s']} | {b['deliveries_per_s']} | {b['dropped']} |"
        )
    return header, "\n".join(rows)
