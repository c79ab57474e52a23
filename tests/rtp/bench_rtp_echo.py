"""CPU cost of echoing RTP: N echo legs in this process, N callers in a child process.

Not collected by pytest. Run inside a private netns (it only uses 127.0.0.1):

    unshare -n sh -c 'ip link set lo up && python3 tests/rtp/bench_rtp_echo.py --calls 50'

Prints the server process's CPU time per echoed packet (one packet in + one out, including
decode, jitter buffer, encode and the UDP syscalls) and its share of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).parent))

from rtp_tracks import ToneTrack  # noqa: E402

from kefu.codecs.registry import codec_info  # noqa: E402
from kefu.rtp.aio import RtpEndpoint  # noqa: E402
from kefu.rtp.ports import PortAllocator  # noqa: E402

SERVER_PORTS = 42000
CLIENT_PORTS = 44000
PAYLOAD_TYPES = {"PCMU": 0, "PCMA": 8, "G722": 9, "opus": 111}


async def open_legs(base: int, peer_base: int, calls: int, codec_name: str) -> list[RtpEndpoint]:
    ports = PortAllocator(base, base + 2 * calls + 1)
    codec = codec_info(codec_name)
    legs = []
    for i in range(calls):
        ep = await RtpEndpoint.open("127.0.0.1", ports)
        assert ep.local_port == base + 2 * i
        ep.start(("127.0.0.1", peer_base + 2 * i), codec, PAYLOAD_TYPES[codec_name], 101)
        legs.append(ep)
    return legs


async def server(args: argparse.Namespace) -> dict[str, float]:
    legs = await open_legs(SERVER_PORTS, CLIENT_PORTS, args.calls, args.codec)
    for ep in legs:
        ep.play(ep.inbound)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--role",
        "client",
        "--calls",
        str(args.calls),
        "--codec",
        args.codec,
        "--seconds",
        str(args.seconds + args.warmup + 1),
    )
    try:
        await asyncio.sleep(args.warmup)
        cpu0, wall0 = time.process_time(), time.monotonic()
        sent0 = sum(ep.stats.packets_sent for ep in legs)
        await asyncio.sleep(args.seconds)
        cpu1, wall1 = time.process_time(), time.monotonic()
        sent1 = sum(ep.stats.packets_sent for ep in legs)
        received = sum(ep.stats.packets_received for ep in legs)
        concealed = sum(ep.inbound.frames_concealed for ep in legs)
        skipped = sum(ep.sender.slots_skipped for ep in legs if ep.sender)
    finally:
        for ep in legs:
            await ep.close()
        await child.wait()
    echoed = sent1 - sent0
    cpu = cpu1 - cpu0
    return {
        "calls": args.calls,
        "codec": args.codec,
        "seconds": round(wall1 - wall0, 3),
        "packets_echoed": echoed,
        "expected_packets": args.calls * 50 * (wall1 - wall0),
        "cpu_seconds": round(cpu, 3),
        "cpu_us_per_echoed_packet": round(1e6 * cpu / max(echoed, 1), 1),
        "core_share": round(cpu / (wall1 - wall0), 3),
        "received_total": received,
        "frames_concealed_total": concealed,
        "sender_slots_skipped": skipped,
    }


async def client(args: argparse.Namespace) -> None:
    legs = await open_legs(CLIENT_PORTS, SERVER_PORTS, args.calls, args.codec)
    for ep in legs:
        ep.play(ToneTrack(440.0, rate=8000, layout="mono"))

    async def drain(ep: RtpEndpoint) -> None:
        while True:
            await ep.inbound.recv()

    tasks = [asyncio.ensure_future(drain(ep)) for ep in legs]
    cpu0, wall0 = time.process_time(), time.monotonic()
    await asyncio.sleep(args.seconds)
    share = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    print(json.dumps({"client_core_share": round(share, 3)}), file=sys.stderr)
    for t in tasks:
        t.cancel()
    for ep in legs:
        await ep.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--codec", default="PCMU", choices=sorted(PAYLOAD_TYPES))
    parser.add_argument("--role", default="server", choices=["server", "client"])
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.uvloop:
        import uvloop

        uvloop.install()
    if args.role == "client":
        asyncio.run(client(args))
    else:
        print(json.dumps(asyncio.run(server(args))))


if __name__ == "__main__":
    main()
