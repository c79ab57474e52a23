"""``python -m loadtest flood``: INVITE and garbage floods, legitimate traffic alongside.

A flooder bound to 127.0.0.2 (inside kefu's default ``allow_from``) sends INVITEs with a
fresh Call-ID and a valid SDP offer each, and never ACKs; or random bytes and malformed
SIP. Meanwhile a legitimate trunk on 127.0.0.1 places calls (INVITE, ACK at once, BYE after
``hold``) and pings OPTIONS. Reported: the share of legitimate calls answered and of OPTIONS
answered, kefu's RSS before and after, and its drop counters; after the floods, whether every
call slot came back (unACKed calls end by RFC 3261 timer H, 64·T1 = 32 s).

Everything goes to loopback only; run it inside ``unshare -n``. The same round runner
serves tests/peers/test_flood.py (a few seconds) and the benchmark (30 s per flood).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kefu.errors import SipParseError
from kefu.sip.message import Response, parse_message
from loadtest.kefu_process import KefuProcess, load_average, rss_kib, start_kefu

__all__ = [
    "FLOOD_HEADER",
    "RoundResult",
    "add_arguments",
    "flood_round",
    "flood_row",
    "main",
]

TRUNK_IP = "127.0.0.1"
FLOOD_IP = "127.0.0.2"
FLOOD_HEADER = (
    "| flood | rate/s | s | sent | legit calls answered | OPTIONS answered | "
    "kefu RSS before → after (MiB) | dropped | load avg |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)

_SDP = (
    "v=0\r\no=trunk {n} 1 IN IP4 {ip}\r\ns=-\r\nc=IN IP4 {ip}\r\nt=0 0\r\n"
    "m=audio {port} RTP/AVP 0 8 101\r\na=rtpmap:101 telephone-event/8000\r\na=ptime:20\r\n"
)


def _request(
    method: str,
    target: tuple[str, int],
    local: tuple[str, int],
    call_id: str,
    cseq: int,
    *,
    to: str | None = None,
    body: str = "",
) -> bytes:
    host, port = target
    ip, lport = local
    lines = [
        f"{method} sip:4001@{host}:{port} SIP/2.0",
        f"Via: SIP/2.0/UDP {ip}:{lport};branch=z9hG4bK-{os.urandom(6).hex()};rport",
        "Max-Forwards: 70",
        f"From: <sip:caller@{ip}>;tag=t-{call_id[:12]}",
        f"To: {to or f'<sip:4001@{host}:{port}>'}",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} {method}",
        f"Contact: <sip:caller@{ip}:{lport}>",
    ]
    if body:
        lines.append("Content-Type: application/sdp")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


class _Endpoint(asyncio.DatagramProtocol):
    """One UDP socket; responses are handed to whoever waits on their Call-ID."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.waiting: dict[tuple[str, str], asyncio.Queue[Response]] = {}
        self.statuses: dict[int, int] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if not data.startswith(b"SIP/2.0 "):
            return  # kefu's own BYE after timer H, or anything else: not our concern
        status = int(data[8:11]) if data[8:11].isdigit() else 0
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if not self.waiting:
            return
        try:
            msg = parse_message(data)
            assert isinstance(msg, Response)
            key = (msg.call_id, msg.cseq.method)
        except (SipParseError, AssertionError):
            return
        queue = self.waiting.get(key)
        if queue is not None:
            queue.put_nowait(msg)

    @property
    def local(self) -> tuple[str, int]:
        assert self.transport is not None
        host, port = self.transport.get_extra_info("sockname")[:2]
        return str(host), int(port)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.sendto(data)

    async def transact(
        self, data: bytes, call_id: str, method: str, deadline: float
    ) -> Response | None:
        """Send, retransmit as RFC 3261 timers A/E do (0.5 s doubling, 4 s cap) and return
        the final response, or None by ``deadline`` seconds."""
        queue: asyncio.Queue[Response] = asyncio.Queue()
        self.waiting[(call_id, method)] = queue
        interval = 0.5
        end = time.monotonic() + deadline
        try:
            self.send(data)
            while (left := end - time.monotonic()) > 0:
                try:
                    resp = await asyncio.wait_for(queue.get(), min(interval, left))
                except TimeoutError:
                    self.send(data)
                    interval = min(interval * 2, 4.0)
                    continue
                if resp.status >= 200:
                    return resp
                interval = 4.0  # provisional: stop retransmitting so fast
            return None
        finally:
            del self.waiting[(call_id, method)]


async def _open(ip: str, target: tuple[str, int]) -> _Endpoint:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_datagram_endpoint(
        _Endpoint, local_addr=(ip, 0), remote_addr=target
    )
    return proto


@dataclass
class _Legit:
    calls: int = 0
    answered: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    options: int = 0
    options_answered: int = 0


async def _legit_call(
    ep: _Endpoint, target: tuple[str, int], n: int, hold: float, out: _Legit
) -> None:
    call_id = f"legit-{n}-{os.urandom(4).hex()}"
    local = ep.local
    offer = _SDP.format(n=n, ip=local[0], port=40000 + 2 * (n % 5000))
    out.calls += 1
    resp = await ep.transact(
        _request("INVITE", target, local, call_id, 1, body=offer), call_id, "INVITE", 10.0
    )
    key = str(resp.status) if resp is not None else "timeout"
    out.statuses[key] = out.statuses.get(key, 0) + 1
    if resp is None or not 200 <= resp.status < 300:
        return
    out.answered += 1
    to = resp.headers.get("To")
    ep.send(_request("ACK", target, local, call_id, 1, to=to))
    await asyncio.sleep(hold)
    await ep.transact(_request("BYE", target, local, call_id, 2, to=to), call_id, "BYE", 10.0)


async def _legit_traffic(
    target: tuple[str, int], seconds: float, cps: float, options_rate: float, hold: float
) -> _Legit:
    out = _Legit()
    ep = await _open(TRUNK_IP, target)
    tasks: set[asyncio.Task[None]] = set()

    async def ping(n: int) -> None:
        call_id = f"ping-{n}-{os.urandom(4).hex()}"
        out.options += 1
        req = _request("OPTIONS", target, ep.local, call_id, 1)
        if await ep.transact(req, call_id, "OPTIONS", 4.0) is not None:
            out.options_answered += 1

    start = time.monotonic()
    calls = pings = 0
    try:
        while (now := time.monotonic() - start) < seconds:
            while calls < now * cps:
                tasks.add(asyncio.create_task(_legit_call(ep, target, calls, hold, out)))
                calls += 1
            while pings < now * options_rate:
                tasks.add(asyncio.create_task(ping(pings)))
                pings += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        if ep.transport is not None:
            ep.transport.close()
    return out


def _garbage(n: int, rng: random.Random) -> bytes:
    kind = n % 4
    if kind == 0:
        return rng.randbytes(rng.randint(1, 1400))
    if kind == 1:
        return b"INVITE sip:4001@kefu SIP/2.0\r\nVia: \x00\xff garbage\r\nContent-Length: 9\r\n\r\n"
    if kind == 2:
        return b"SIP/2.0 200 OK\r\nCall-ID: nothing-of-ours\r\n\r\n"
    return b"OPTIONS sip:x SIP/2.0\r\n" + b"X: " + rng.randbytes(200) + b"\r\n\r\n"


async def _flood(target: tuple[str, int], kind: str, rate: float, seconds: float) -> dict[str, Any]:
    ep = await _open(FLOOD_IP, target)
    rng = random.Random(1)
    local = ep.local
    sent = 0
    start = time.monotonic()
    try:
        while (now := time.monotonic() - start) < seconds:
            for n in range(sent, int(now * rate)):
                if kind == "invite":
                    call_id = f"flood-{n}-{rng.getrandbits(48):x}"
                    offer = _SDP.format(n=n, ip=FLOOD_IP, port=50000 + 2 * (n % 5000))
                    ep.send(_request("INVITE", target, local, call_id, 1, body=offer))
                else:
                    ep.send(_garbage(n, rng))
                sent = n + 1
            await asyncio.sleep(0.005)
    finally:
        # Keep the socket a moment: kefu's answers still arriving are counted, not refused.
        await asyncio.sleep(0.5)
        if ep.transport is not None:
            ep.transport.close()
    return {"sent": sent, "responses": dict(sorted(ep.statuses.items()))}


@dataclass
class RoundResult:
    """One flood with legitimate traffic alongside."""

    kind: str
    rate: float
    seconds: float
    flood: dict[str, Any]
    legit_calls: int
    legit_answered: int
    legit_statuses: dict[str, int]
    options: int
    options_answered: int

    @property
    def answered_pct(self) -> float:
        return 100.0 * self.legit_answered / self.legit_calls if self.legit_calls else 100.0

    @property
    def options_pct(self) -> float:
        return 100.0 * self.options_answered / self.options if self.options else 100.0

    def summary(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "legit_answered_pct": round(self.answered_pct, 2),
            "options_answered_pct": round(self.options_pct, 2),
        }


async def flood_round(
    target: tuple[str, int],
    kind: str,
    *,
    rate: float,
    seconds: float,
    cps: float,
    options_rate: float,
    hold: float = 1.0,
) -> RoundResult:
    """Flood ``target`` (``kind`` invite | garbage) while a trunk places ``cps`` calls/s."""
    flood, legit = await asyncio.gather(
        _flood(target, kind, rate, seconds),
        _legit_traffic(target, seconds, cps, options_rate, hold),
    )
    return RoundResult(
        kind,
        rate,
        seconds,
        flood,
        legit.calls,
        legit.answered,
        legit.statuses,
        legit.options,
        legit.options_answered,
    )


def _dropped(server: KefuProcess) -> dict[str, float]:
    out = {}
    for line in server.metrics().splitlines():
        if line.startswith("kefu_sip_dropped_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.split()[-1])
    return out


def _readyz(server: KefuProcess) -> dict[str, Any]:
    """kefu's /readyz detail: active calls and free RTP ports once the floods are over."""
    try:
        with urllib.request.urlopen(f"{server.http}/readyz", timeout=5) as resp:
            body: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    return body


def flood_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['kind']} | {r['rate']:.0f} | {r['seconds']:.0f} | {r['flood']['sent']} | "
        f"{r['legit_answered']}/{r['legit_calls']} ({r['legit_answered_pct']} %) | "
        f"{r['options_answered']}/{r['options']} ({r['options_answered_pct']} %) | "
        f"{r['rss_before_kib'] / 1024:.0f} → {r['rss_after_kib'] / 1024:.0f} | "
        f"{', '.join(f'{k} {v:.0f}' for k, v in sorted(r['dropped'].items()) if v)} | "
        f"{' '.join(str(x) for x in r['load_avg'])} |"
    )


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    """Start kefu (echo mode), run each flood, then wait for every call slot to come back."""
    workdir = Path(tempfile.mkdtemp(prefix="kefu-flood-"))
    env = {
        "KEFU_CALLS_MEDIA_MODE": "echo",
        "KEFU_CALLS_DRAIN_TIMEOUT": "2",
        "KEFU_SERVER_STATE_DIR": str(workdir / "state"),
        **dict(item.split("=", 1) for item in args.env),
    }
    server = start_kefu(workdir, env=env, rtp_ports="30000-39999")
    target = (server.sip_host, server.sip_port)
    rounds = []
    try:
        for kind in args.kinds.split(","):
            before = rss_kib(server.pid)
            dropped_before = _dropped(server)
            result = asyncio.run(
                flood_round(
                    target,
                    kind,
                    rate=args.rate,
                    seconds=args.seconds,
                    cps=args.cps,
                    options_rate=args.options_rate,
                    hold=args.hold,
                )
            )
            summary = result.summary()
            summary["rss_before_kib"] = before
            summary["rss_after_kib"] = rss_kib(server.pid)
            summary["load_avg"] = load_average()
            summary["dropped"] = {
                reason: count - dropped_before.get(reason, 0.0)
                for reason, count in _dropped(server).items()
            }
            rounds.append(summary)
            print(flood_row(summary), flush=True)
        # Unconfirmed flood calls end by timer H (32 s); give them that and a little more.
        deadline = time.monotonic() + args.settle
        while time.monotonic() < deadline and server.metric("kefu_active_calls") > 0:
            time.sleep(1.0)
        settled = {
            "active_calls": server.metric("kefu_active_calls"),
            "rejected_unacked": server.metric("kefu_calls_total", 'result="rejected_unacked"'),
            "rss_kib": rss_kib(server.pid),
            "readyz": _readyz(server),
        }
    finally:
        server.stop()
    return {"rounds": rounds, "settled": settled, "cpus": os.cpu_count()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=2000.0, help="flood messages/s")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each flood")
    parser.add_argument("--kinds", default="invite,garbage", help="floods, in order")
    parser.add_argument("--cps", type=float, default=20.0, help="legitimate calls/s")
    parser.add_argument("--options-rate", type=float, default=10.0, help="legit OPTIONS/s")
    parser.add_argument("--hold", type=float, default=1.0, help="legit call length (s)")
    parser.add_argument("--settle", type=float, default=45.0, help="wait for slots to free")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEFU_X=VALUE",
        help="kefu setting, e.g. KEFU_SIP_RATE_LIMIT=0 (repeatable)",
    )
    parser.add_argument("--json", dest="json_out")


def main(args: argparse.Namespace) -> int:
    import sys

    result = run_benchmark(args)
    text = json.dumps(result, indent=2, default=str)
    rows = "\n".join(flood_row(r) for r in result["rounds"])
    sys.stdout.write(text + "\n\n" + FLOOD_HEADER + "\n" + rows + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    ok = all(
        r["legit_answered_pct"] >= 99.0 and r["options_answered_pct"] >= 99.0
        for r in result["rounds"]
    )
    return 0 if ok and result["settled"]["active_calls"] == 0 else 1
