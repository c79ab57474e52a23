"""The whole server in-process: a scripted trunk calls it over real UDP sockets and RTP.

The trunk side uses kefu's own RTP endpoint as the caller's phone; SIPp and baresip do the
same from the outside in tests/peers/.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError
from sfu_util import until

from kefu.codecs.info import codec_info
from kefu.mediaserver.config import load_config
from kefu.mediaserver.media import PcmTrack
from kefu.mediaserver.server import KefuServer
from kefu.rtp.aio import RtpEndpoint
from kefu.rtp.ports import PortAllocator
from kefu.sip.message import Response, parse_message

pytestmark = pytest.mark.netns


class Trunk(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Response | bytes] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def datagram_received(self, data, addr):  # type: ignore[no-untyped-def]
        msg = parse_message(data)
        self.inbox.put_nowait(msg if isinstance(msg, Response) else data)

    async def expect(self, status: int, wait: float = 3.0) -> Response:
        while True:
            msg = await asyncio.wait_for(self.inbox.get(), wait)
            if isinstance(msg, Response) and msg.status == status:
                return msg


def sip(
    method: str,
    port: int,
    rtp_port: int | None = None,
    *,
    cseq: int = 1,
    to_tag: str = "",
    branch: str = "z9hG4bK-a",
    call_id: str = "echo-1",
    direction: str = "",
) -> bytes:
    body = ""
    if rtp_port is not None:
        body = (
            "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {rtp_port} RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n"
        )
        if direction:
            body += f"a={direction}\r\n"
    to = "<sip:ai@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
    head = (
        f"{method} sip:ai@127.0.0.1:{port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:1;branch={branch};rport\r\n"
        f"From: <sip:trunk@127.0.0.1>;tag=t1\r\nTo: {to}\r\nCall-ID: {call_id}\r\n"
        f"CSeq: {cseq} {method}\r\nContact: <sip:trunk@127.0.0.1>\r\nMax-Forwards: 70\r\n"
    )
    if body:
        head += "Content-Type: application/sdp\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n" + body).encode()


def tone(seconds: float, rate: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


@pytest.fixture
async def server(tmp_path):
    config = load_config(
        environ={},
        overrides={
            "sip": {"listen": "127.0.0.1:0"},
            "http": {"listen": "127.0.0.1:0"},
            "rtp": {"ports": "32000-32099"},
            "calls": {"max_concurrent": 2, "media_mode": "echo"},
            "server": {"state_dir": str(tmp_path)},
        },
    )
    srv = KefuServer(config)
    await srv.start()
    yield srv
    await srv.stop()


async def trunk_socket(host: str = "127.0.0.1") -> Trunk:
    """A trunk's SIP socket on ``host`` (any 127.x.y.z is loopback: a second trunk)."""
    loop = asyncio.get_running_loop()
    _, trunk = await loop.create_datagram_endpoint(Trunk, local_addr=(host, 0))
    return trunk


async def test_echo_call_round_trip(server: KefuServer) -> None:
    port = server.sip_address[1]
    trunk = await trunk_socket()
    phone = await RtpEndpoint.open("127.0.0.1", PortAllocator(33000, 33009))
    trunk.transport.sendto(sip("INVITE", port, phone.local_port), server.sip_address)
    ok = await trunk.expect(200)
    answer = ok.body.decode()
    kefu_rtp = int(answer.split("m=audio ")[1].split()[0])
    tag = ok.to.tag or ""
    trunk.transport.sendto(
        sip("ACK", port, cseq=1, to_tag=tag, branch="z9hG4bK-ack"), server.sip_address
    )
    phone.start(("127.0.0.1", kefu_rtp), codec_info("PCMU"), 0, 101)
    sent = tone(1.0)
    phone.play(PcmTrack(sent, 8000))
    received = []
    try:
        while len(received) < 60:
            frame = await asyncio.wait_for(phone.inbound.recv(), 5.0)
            received.append(frame.to_ndarray().reshape(-1))
    except (TimeoutError, MediaStreamError):
        pass
    echo = np.concatenate(received).astype(np.float64)
    assert len(received) >= 40
    # The echo is the tone: most of its energy sits at 440 Hz.
    spectrum = np.abs(np.fft.rfft(echo))
    peak_hz = np.argmax(spectrum) * 8000 / len(echo)
    assert abs(peak_hz - 440) < 10
    calls = await server.list_calls()
    assert calls[0]["codec"] == "PCMU" and calls[0]["state"] == "ai_active"
    phone.send_dtmf("7")
    await until(lambda: 'kefu_dtmf_total{source="rfc4733"} 1.0' in server.metrics_text().decode())
    trunk.transport.sendto(
        sip("BYE", port, cseq=2, to_tag=tag, branch="z9hG4bK-bye"), server.sip_address
    )
    await trunk.expect(200)
    await until(lambda: server.calls == {} and server.ports.in_use == 0)
    await phone.close()


async def test_over_capacity_gets_503_with_retry_after(server: KefuServer) -> None:
    port = server.sip_address[1]
    trunk = await trunk_socket()
    for n in range(3):
        trunk.transport.sendto(
            sip("INVITE", port, 40000 + 2 * n, branch=f"z9hG4bK-{n}", call_id=f"cap-{n}"),
            server.sip_address,
        )
    finals: dict[str, tuple[int, str | None]] = {}
    while len(finals) < 3:
        msg = await asyncio.wait_for(trunk.inbox.get(), 3)
        if isinstance(msg, Response) and msg.status >= 200:
            finals[msg.call_id] = (msg.status, msg.headers.get("Retry-After"))
    assert sorted(finals.values(), key=lambda s: s[0]) == [(200, None), (200, None), (503, "30")]


async def test_unsupported_media_is_488_with_warning(server: KefuServer) -> None:
    port = server.sip_address[1]
    trunk = await trunk_socket()
    data = sip("INVITE", port, 40000).replace(b"RTP/AVP 0 101", b"RTP/AVP 18   ")
    trunk.transport.sendto(data, server.sip_address)
    resp = await trunk.expect(488)
    assert resp.headers.get("Warning", "").startswith("3")
    assert server.calls == {}


async def test_draining_refuses_new_calls(server: KefuServer) -> None:
    port = server.sip_address[1]
    trunk = await trunk_socket()
    await server.drain(grace=0.1)
    trunk.transport.sendto(sip("INVITE", port, 40000), server.sip_address)
    resp = await trunk.expect(503)
    assert resp.headers.get("Retry-After") == "30"
    assert server.ready()[0] is False


async def _answered_call(server: KefuServer, trunk: Trunk, phone: RtpEndpoint, call_id: str):
    port = server.sip_address[1]
    trunk.transport.sendto(
        sip("INVITE", port, phone.local_port, call_id=call_id, branch=f"z9hG4bK-{call_id}"),
        server.sip_address,
    )
    ok = await trunk.expect(200)
    tag = ok.to.tag or ""
    trunk.transport.sendto(
        sip("ACK", port, call_id=call_id, to_tag=tag, branch=f"z9hG4bK-ack-{call_id}"),
        server.sip_address,
    )
    kefu_rtp = int(ok.body.decode().split("m=audio ")[1].split()[0])
    phone.start(("127.0.0.1", kefu_rtp), codec_info("PCMU"), 0, 101)
    return tag, kefu_rtp


async def test_reinvite_hold_then_unhold_stops_and_resumes_our_audio(server: KefuServer) -> None:
    port = server.sip_address[1]
    trunk = await trunk_socket()
    phone = await RtpEndpoint.open("127.0.0.1", PortAllocator(33010, 33019))
    tag, _ = await _answered_call(server, trunk, phone, "hold-1")
    phone.play(PcmTrack(tone(3.0), 8000))
    (call,) = server.calls.values()
    await until(lambda: call.endpoint.sender.sending and call.endpoint.stats.packets_sent > 0)

    hold = sip(
        "INVITE",
        port,
        phone.local_port,
        cseq=2,
        to_tag=tag,
        branch="z9hG4bK-h",
        call_id="hold-1",
        direction="sendonly",
    )
    trunk.transport.sendto(hold, server.sip_address)
    ok = await trunk.expect(200)
    assert b"a=recvonly" in ok.body
    assert not call.endpoint.sender.sending
    sent_on_hold = call.endpoint.stats.packets_sent
    await asyncio.sleep(0.3)  # proving that nothing is sent takes a wait; it cannot flake
    assert call.endpoint.stats.packets_sent == sent_on_hold

    unhold = sip(
        "INVITE", port, phone.local_port, cseq=3, to_tag=tag, branch="z9hG4bK-u", call_id="hold-1"
    )
    trunk.transport.sendto(unhold, server.sip_address)
    ok = await trunk.expect(200)
    assert b"a=sendrecv" in ok.body or b"a=recvonly" not in ok.body
    await until(lambda: call.endpoint.stats.packets_sent > sent_on_hold)
    await phone.close()


async def test_rtp_garbage_and_strangers_are_dropped_and_the_call_goes_on(
    server: KefuServer,
) -> None:
    trunk = await trunk_socket()
    phone = await RtpEndpoint.open("127.0.0.1", PortAllocator(33020, 33029))
    _, kefu_rtp = await _answered_call(server, trunk, phone, "garbage-1")
    phone.play(PcmTrack(tone(2.0), 8000))
    (call,) = server.calls.values()
    await until(lambda: call.endpoint.stats.packets_received > 0)  # latched to the phone
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.bind(("127.0.0.1", 0))
        for payload in (b"", b"\x00", b"\xff" * 11, b"garbage" * 50):
            stranger.sendto(payload, ("127.0.0.1", kefu_rtp))
        # A well-formed RTP packet from an address kefu did not latch to.
        stranger.sendto(
            bytes([0x80, 0, 0, 1, 0, 0, 0, 160, 1, 2, 3, 4]) + b"\xff" * 160,
            ("127.0.0.1", kefu_rtp),
        )

    def dropped() -> int:
        return call.endpoint.stats.dropped_malformed + call.endpoint.stats.dropped_unlatched

    await until(lambda: dropped() >= 5)
    stats = call.endpoint.stats
    assert stats.dropped_unlatched >= 1
    received_before = stats.packets_received
    await until(lambda: call.endpoint.stats.packets_received > received_before)  # still flowing
    await phone.close()
