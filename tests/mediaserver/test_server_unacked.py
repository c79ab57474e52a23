"""Calls answered and never ACKed: capped per source, and their slots and ports come back.

The whole server in-process on loopback UDP. One seam: the transaction timers run with
T1 = 50 ms so that timer H (64·T1) ends an unACKed call in 3.2 s instead of 32 s.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from kefu.mediaserver.config import load_config
from kefu.mediaserver.server import KefuServer
from kefu.sip.message import Response, parse_message
from kefu.sip.transaction import TimerConfig, TransactionLayer

pytestmark = pytest.mark.netns

FAST = TimerConfig(t1=0.05, t2=0.4, t4=0.5, d=1.0)


class Trunk(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.responses: asyncio.Queue[Response] = asyncio.Queue()
        self.transport: Any = None

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def datagram_received(self, data, addr):  # type: ignore[no-untyped-def]
        msg = parse_message(data)
        if isinstance(msg, Response):
            self.responses.put_nowait(msg)

    async def finals(self, count: int, wait: float = 5.0) -> dict[str, int]:
        """Call-ID -> first final status, once ``count`` INVITEs have one (``wait`` s at most)."""
        out: dict[str, int] = {}
        async with asyncio.timeout(wait):
            while len(out) < count:
                msg = await self.responses.get()
                if msg.status >= 200 and msg.cseq.method == "INVITE":
                    out.setdefault(msg.call_id, msg.status)
        return out


def invite(port: int, host: str, call_id: str) -> bytes:
    body = (
        f"v=0\r\no=t 1 1 IN IP4 {host}\r\ns=-\r\nc=IN IP4 {host}\r\nt=0 0\r\n"
        "m=audio 7000 RTP/AVP 0\r\n"
    )
    return (
        f"INVITE sip:ai@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP {host}:1;branch=z9hG4bK-{call_id};rport\r\n"
        f"From: <sip:trunk@{host}>;tag=t1\r\nTo: <sip:ai@127.0.0.1>\r\nCall-ID: {call_id}\r\n"
        f"CSeq: 1 INVITE\r\nContact: <sip:trunk@{host}>\r\nMax-Forwards: 70\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def trunk_at(host: str) -> Trunk:
    loop = asyncio.get_running_loop()
    _, trunk = await loop.create_datagram_endpoint(Trunk, local_addr=(host, 0))
    return trunk


@pytest.fixture
async def server(tmp_path):  # type: ignore[no-untyped-def]
    config = load_config(
        environ={},
        overrides={
            "sip": {"listen": "127.0.0.1:0"},
            "http": {"listen": "127.0.0.1:0"},
            "rtp": {"ports": "32100-32199"},
            "calls": {"max_concurrent": 10, "media_mode": "echo", "max_unacked_per_source": 3},
            "server": {"state_dir": str(tmp_path)},
        },
    )
    srv = KefuServer(config)
    srv.ua.settings = replace(srv.ua.settings, timers=FAST)
    srv.ua.transactions = TransactionLayer(FAST)
    await srv.start()
    yield srv
    await srv.stop()


def dropped(srv: KefuServer, reason: str) -> float:
    return srv.metrics.sip_dropped.labels(reason)._value.get()


async def test_unacked_calls_are_capped_per_source_and_freed_by_timer_h(
    server: KefuServer,
) -> None:
    port = server.sip_address[1]
    flood, trunk = await trunk_at("127.0.0.2"), await trunk_at("127.0.0.1")
    for i in range(5):
        flood.transport.sendto(invite(port, "127.0.0.2", f"f{i}"), server.sip_address)
        await asyncio.sleep(0.05)  # in order, each handled before the next
    trunk.transport.sendto(invite(port, "127.0.0.1", "legit"), server.sip_address)
    flood_finals, trunk_finals = await asyncio.gather(flood.finals(4), trunk.finals(1))
    # Three answered and never ACKed, the fourth refused, the fifth dropped unparsed.
    assert flood_finals == {"f0": 200, "f1": 200, "f2": 200, "f3": 503}
    assert dropped(server, "source_held") == 1
    assert server.metrics.calls_total.labels("rejected_unacked")._value.get() == 1
    # Another source is not held back by the flooder.
    assert trunk_finals == {"legit": 200}
    assert len(server.calls) == 4
    ports_per_call = server.ports.in_use // 4
    assert ports_per_call >= 1

    # Timer H (64·T1) ends every unACKed call: slots and RTP ports come back.
    await asyncio.wait_for(server._idle.wait(), 10.0)  # set when no call is left
    assert not server.calls
    assert server.ports.in_use == 0
    assert server.metrics.active_calls._value.get() == 0

    # The hold has lapsed: the same source is served again.
    await asyncio.sleep(1.0)
    while not flood.responses.empty():  # 2xx retransmissions from before timer H
        flood.responses.get_nowait()
    flood.transport.sendto(invite(port, "127.0.0.2", "f5"), server.sip_address)
    assert await flood.finals(1) == {"f5": 200}
    flood.transport.close()
    trunk.transport.close()
