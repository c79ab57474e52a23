"""What SIP over TLS and SRTP cost: TLS handshakes per connection, SRTP per packet.

``python -m loadtest tls-srtp``:

* **TLS handshake**: ``--connections`` sequential TLS connections to kefu's own SIP-over-TLS
  listener (:class:`kefu.sip.aio.SipTransport`, the memory-BIO code path), each closed after
  one OPTIONS is answered; the time from TCP connect to a completed handshake, p50/p95.
  Client and server share this process and its core, so the figure is the CPU of both ends
  (EC P-256 certificates from :mod:`loadtest.certs`, TLS 1.3, with and without a client
  certificate).
* **SRTP**: protect + unprotect of a 20 ms PCMU packet (172 bytes) with
  :class:`kefu.rtp.srtp.SrtpContext`, both suites: what an SRTP echo call adds per packet
  (kefu unprotects what it receives and protects what it sends).
* **SRTP echo calls** (``--echo-calls N``): a real ``kefu serve --media-mode echo`` answers
  N calls from one generator process (:func:`loadtest.rtp_relay.kefu_phase`), first plain
  RTP, then with every call SDES-SRTP (the generator protects with libsrtp and counts only
  echoes that decrypt, under kefu's key, to what it sent); kefu's CPU over the send window
  and the loss, both ways. Needs a private network namespace
  (``unshare -n sh -c 'ip link set lo up && ...'``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from kefu.mediaserver.logs import configure_logging
from kefu.rtp.srtp import SrtpContext
from kefu.sip import sdes
from kefu.sip.aio import SipTransport, TcpLimits
from kefu.sip.ua import UaSettings, UserAgent
from loadtest.certs import make_pki


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--packets", type=int, default=100_000)
    parser.add_argument("--echo-calls", type=int, default=0, help="0: no echo-calls run")
    parser.add_argument("--echo-seconds", type=float, default=20.0)
    parser.add_argument("--echo-only", action="store_true", help="skip handshakes and µs/packet")
    parser.add_argument("--json", dest="json_out")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _handshakes(count: int, mutual: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        pki = make_pki(Path(folder))
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(pki.cert("server"), pki.key("server"))
        if mutual:
            server_ctx.load_verify_locations(pki.cert("ca"))
            server_ctx.verify_mode = ssl.CERT_REQUIRED
        client_ctx = ssl.create_default_context(cafile=pki.cert("ca"))
        if mutual:
            client_ctx.load_cert_chain(pki.cert("client"), pki.key("client"))
        ua = UserAgent(UaSettings())
        transport = SipTransport(
            ua, lambda: None, tcp_limits=TcpLimits(max_connections_per_source=10**6)
        )
        host, port = await transport.start_tls("127.0.0.1", 0, server_ctx)
        ua.set_tls_port(port)
        times: list[float] = []
        for i in range(count):
            t0 = time.perf_counter()
            reader, writer = await asyncio.open_connection(
                host, port, ssl=client_ctx, server_hostname="127.0.0.1"
            )
            times.append((time.perf_counter() - t0) * 1000)
            via = "{}:{}".format(*writer.get_extra_info("sockname")[:2])
            writer.write(
                (
                    f"OPTIONS sip:kefu@{host}:{port} SIP/2.0\r\n"
                    f"Via: SIP/2.0/TLS {via};branch=z9hG4bK-{i}\r\nMax-Forwards: 70\r\n"
                    f"From: <sip:b@{host}>;tag=b\r\nTo: <sip:kefu@{host}>\r\n"
                    f"Call-ID: bench-{i}\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
                ).encode()
            )
            assert (await reader.read(4096)).startswith(b"SIP/2.0 200")
            writer.transport.abort()  # no close_notify dance: only the handshake is timed
        await transport.close()
    return {
        "p50_ms": round(_percentile(times, 0.5), 3),
        "p95_ms": round(_percentile(times, 0.95), 3),
        "completed": transport.tls_handshakes,
    }


def _srtp(packets: int, suite: str) -> dict[str, float]:
    a, b = sdes.new_key(), sdes.new_key()
    sender = SrtpContext(sdes.SrtpKeys(suite, a, b, 1))
    kefu = SrtpContext(sdes.SrtpKeys(suite, b, a, 1))
    payload = bytes(160)
    wire = [
        sender.protect_rtp(struct.pack("!BBHII", 0x80, 0, i & 0xFFFF, i * 160, 7) + payload)
        for i in range(packets)
    ]
    t0 = time.process_time()
    for data in wire:
        clear = kefu.unprotect(data)
        assert isinstance(clear, bytes)
        kefu.protect_rtp(clear)
    per_packet = (time.process_time() - t0) / packets * 1e6
    return {"protect_unprotect_us": round(per_packet, 2)}


def _echo_calls(calls: int, seconds: float) -> dict[str, Any]:
    from loadtest.kefu_process import load_average
    from loadtest.rtp_relay import kefu_phase

    before = load_average()
    plain = kefu_phase(calls, seconds, uvloop=True)
    srtp = kefu_phase(calls, seconds, uvloop=True, srtp=True)
    extra = srtp["cpu_us_per_packet"] - plain["cpu_us_per_packet"]
    return {
        "calls": calls,
        "seconds": seconds,
        "plain": plain,
        "srtp": srtp,
        "srtp_extra_us_per_packet": round(extra, 2),
        "load_average": [before, load_average()],
    }


def main(args: argparse.Namespace) -> int:
    configure_logging("warning", json=False)
    result: dict[str, Any] = {}
    if not args.echo_only:
        result["tls_handshake"] = asyncio.run(_handshakes(args.connections, mutual=False))
        result["tls_handshake_mutual"] = asyncio.run(_handshakes(args.connections, mutual=True))
        for suite in sdes.SUITES:
            result[f"srtp_{suite}"] = _srtp(min(args.packets, 60000), suite)
        us = result["srtp_AES_CM_128_HMAC_SHA1_80"]["protect_unprotect_us"]
        # An echo call moves 50 packets/s each way: unprotect in + protect out per packet.
        result["srtp_core_percent_per_100_echo_calls"] = round(us * 50 * 100 / 1e6 * 100, 2)
    if args.echo_calls > 0:
        result["echo_calls"] = _echo_calls(args.echo_calls, args.echo_seconds)
    text = json.dumps(result, indent=2)
    print(text)  # noqa: T201 - the tool's report
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0
