"""``python -m loadtest outbound``: kefu places N outbound calls at R calls/s through a SIPp
trunk that challenges every INVITE with a 401 digest challenge (loadtest/sipp/
uas_digest_answer.xml), answers it, and gets kefu's BYE ``--hold`` seconds later.

Reported (JSON, and one Markdown row for docs/BENCHMARKS.md):

* ``wire_ms``: INVITE → 200 on the wire (tshark on loopback): from kefu's first INVITE of a
  call to the trunk's 200 OK, i.e. the 401 round trip, the second INVITE and the answer;
* ``kefu_ms``: the same span as kefu measured it (``call.answered``'s ``setup_ms``);
* ``api_ms``: ``POST /api/calls`` sent → ``call.answered`` read on ``/api/events``, what an
  application placing call-backs sees;
* failures: calls that were not answered (``call.failed`` statuses), API refusals, and
  SIPp's own verdict (it checks the digest credentials and the ACK of every call).

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && .venv/bin/python -m loadtest outbound --rate 20
--calls 200'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from kefu.signaling.tokens import mint_token
from loadtest.kefu_process import cpu_percent, load_average, sample_cpu, start_kefu
from loadtest.peers import TsharkCapture, sipp_media_port, start_sipp_uas, take_ports
from loadtest.sip_load import percentile, setup_latencies

SECRET = "loadtest-outbound-secret-0123456789"
HEADER = (
    "| calls/s | calls | answered | failed | wire INVITE→200 p50 / p95 / p99 ms "
    "| kefu setup p50 / p99 ms | API→answered p50 / p99 ms | kefu CPU % | SIPp ok/failed |\n"
    + "|"
    + " --- |" * 9
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=20.0, help="calls placed per second")
    parser.add_argument("--calls", type=int, default=200, help="calls in all")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds before kefu's BYE")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2) if values else float("nan"),
    }


async def _place_all(http: str, rate: float, calls: int, to: str) -> dict[str, Any]:
    """POST ``calls`` calls at ``rate``; follow them on /api/events until each is answered
    or failed."""
    token = mint_token(SECRET, "loadtest", "agent", 3600.0, None)
    headers = {"Authorization": f"Bearer {token}"}
    posted: dict[str, float] = {}
    answered: dict[str, dict[str, Any]] = {}
    failed: dict[str, dict[str, Any]] = {}
    refused: list[int] = []
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{http}/api/events", headers=headers)
        assert (await ws.receive_json())["type"] == "events.subscribed"

        async def reader() -> None:
            async for msg in ws:
                event = json.loads(msg.data)
                kind, call_id = event.get("type"), event.get("call_id")
                if kind == "call.answered":
                    answered[call_id] = {**event, "read": time.monotonic()}
                elif kind == "call.failed":
                    failed[call_id] = event
                if len(answered) + len(failed) + len(refused) >= calls:
                    return

        async def place(i: int, start: float) -> None:
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            sent = time.monotonic()
            async with session.post(
                f"{http}/api/calls", json={"to": to, "media_mode": "echo"}, headers=headers
            ) as resp:
                body = await resp.json(content_type=None)
                if resp.status == 202:
                    posted[body["call_id"]] = sent
                else:
                    refused.append(resp.status)

        reading = asyncio.ensure_future(reader())
        start = time.monotonic()
        await asyncio.gather(*(place(i, start) for i in range(calls)))
        try:
            await asyncio.wait_for(reading, 60.0)
        except TimeoutError:
            pass
        await ws.close()
    api_ms = [1000 * (e["read"] - posted[c]) for c, e in answered.items() if c in posted]
    return {
        "answered": len(answered),
        "failed": len(failed),
        "failed_statuses": sorted({e["status"] for e in failed.values()}),
        "refused": refused,
        "unfinished": calls - len(answered) - len(failed) - len(refused),
        "kefu_setup_ms": [float(e["setup_ms"]) for e in answered.values()],
        "api_ms": api_ms,
    }


def outbound(rate: float, calls: int, hold: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kefu-bench-outbound-") as tmp:
        work = Path(tmp)
        trunk_port = take_ports()
        trunk = start_sipp_uas(
            "uas_digest_answer",
            port=trunk_port,
            media_port=sipp_media_port(),
            rtp_echo=False,
            calls=calls,
            variables={"alg": "MD5"},
        )
        try:
            kefu = start_kefu(
                work,
                env={
                    "KEFU_CALLS_MEDIA_MODE": "echo",
                    "KEFU_WEBRTC_ROOM_WORKERS": "1",
                    "KEFU_SERVER_STATE_DIR": str(work / "state"),
                    "KEFU_AUTH_JWT_SECRET": SECRET,
                    "KEFU_TRUNK_OUTBOUND_PROXY": f"127.0.0.1:{trunk_port}",
                    "KEFU_TRUNK_USERNAME": "kefu",
                    "KEFU_TRUNK_PASSWORD": "trunk-secret",
                    "KEFU_CALLS_MAX_CALL_SECONDS": f"{hold:g}",
                },
            )
            try:
                with TsharkCapture(
                    capture_filter=f"udp and port {trunk_port}", path=work / "sip.pcap"
                ) as capture:
                    a = sample_cpu({"kefu": kefu.pid})
                    placed = asyncio.run(
                        _place_all(kefu.http, rate, calls, "sip:4001@trunk.example")
                    )
                    b = sample_cpu({"kefu": kefu.pid})
                    sipp = trunk.wait(hold + 30)
                wire_ms = [1000 * x for x in setup_latencies(capture.path, trunk_port)]
            finally:
                kefu.stop()
        finally:
            trunk.stop()
    return {
        "benchmark": "outbound",
        "rate": rate,
        "calls": calls,
        "hold_s": hold,
        "answered": placed["answered"],
        "failed": placed["failed"],
        "failed_statuses": placed["failed_statuses"],
        "refused_http": placed["refused"],
        "unfinished": placed["unfinished"],
        "wire_ms": _stats(wire_ms),
        "kefu_ms": _stats(placed["kefu_setup_ms"]),
        "api_ms": _stats(placed["api_ms"]),
        "kefu_cpu_pct": round(cpu_percent(a, b, "kefu"), 1),
        "sipp": {"successful": sipp.successful, "failed": sipp.failed, "ok": sipp.ok},
        "load_average": load_average(),
    }


def row(s: dict[str, Any]) -> str:
    w, k, a = s["wire_ms"], s["kefu_ms"], s["api_ms"]
    return (
        f"| {s['rate']:g} | {s['calls']} | {s['answered']} | {s['failed']} "
        f"| {w['p50']:.1f} / {w['p95']:.1f} / {w['p99']:.1f} "
        f"| {k['p50']:.1f} / {k['p99']:.1f} | {a['p50']:.1f} / {a['p99']:.1f} "
        f"| {s['kefu_cpu_pct']:.1f} | {s['sipp']['successful']}/{s['sipp']['failed']} |"
    )


def main(args: argparse.Namespace) -> int:
    summary = outbound(args.rate, args.calls, args.hold)
    text = json.dumps(summary, indent=2)
    print(text + "\n\n" + HEADER + "\n" + row(summary))  # noqa: T201
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    ok = summary["answered"] == args.calls and summary["sipp"]["ok"]
    return 0 if ok else 1
