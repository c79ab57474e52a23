"""SIP over TLS with SDES-SRTP, and HTTPS, through the whole server in-process.

The caller is a Python peer, not kefu's own RTP code: a TLS client (Python's ssl, with the
test CA and a client certificate) places a ``sips:`` INVITE offering ``RTP/SAVP`` with an
``a=crypto`` line, then protects its RTP with libsrtp (pylibsrtp) itself and unprotects
kefu's echo with the key from kefu's answer. Certificates are made at run time
(loadtest/certs.py). Debian's SIPp has no TLS, so no SIPp here.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pylibsrtp
import pytest
from helpers.inproc import server_config
from sfu_util import until

from kefu.codecs.g711 import ulaw_encode
from kefu.mediaserver.server import KefuServer
from kefu.rtp.packet import is_rtcp
from kefu.sip.message import Response, StreamFramer, parse_message
from kefu.sip.sdes import CryptoAttribute
from loadtest.certs import Pki, make_pki

pytestmark = pytest.mark.netns

SUITE = "AES_CM_128_HMAC_SHA1_80"
PROFILE = pylibsrtp.Policy.SRTP_PROFILE_AES128_CM_SHA1_80


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def server(tmp_path: Path, pki: Pki) -> AsyncIterator[KefuServer]:
    config = server_config(
        tmp_path,
        sip={
            "tls_listen": "127.0.0.1:0",
            "tls_cert": pki.cert("server"),
            "tls_key": pki.key("server"),
            "tls_ca": pki.cert("ca"),
            "tls_verify_client": True,
            "tcp_message_timeout": 3.0,
        },
        http={"tls_cert": pki.cert("server"), "tls_key": pki.key("server")},
    )
    srv = KefuServer(config)
    await srv.start()
    yield srv
    await srv.stop()


def client_context(pki: Pki, cert: str | None = "client") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.cert("ca"))
    if cert is not None:
        context.load_cert_chain(pki.cert(cert), pki.key(cert))
    return context


class TlsTrunk:
    """A SIP trunk on one TLS connection: writes requests, reads framed responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.framer = StreamFramer()
        self.pending: list[bytes] = []
        host, port = writer.get_extra_info("sockname")[:2]
        self.via = f"{host}:{port}"

    @classmethod
    async def connect(cls, server: KefuServer, context: ssl.SSLContext) -> TlsTrunk:
        assert server.sip_tls_address is not None
        reader, writer = await asyncio.open_connection(
            *server.sip_tls_address, ssl=context, server_hostname="127.0.0.1"
        )
        return cls(reader, writer)

    def send(self, method: str, *, cseq: int, to_tag: str = "", body: str = "") -> None:
        assert_tls = self.writer.get_extra_info("ssl_object")
        assert assert_tls is not None
        to = "<sips:ai@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
        head = (
            f"{method} sips:ai@127.0.0.1 SIP/2.0\r\n"
            f"Via: SIP/2.0/TLS {self.via};branch=z9hG4bK-{method}-{cseq};rport\r\n"
            f"From: <sips:trunk@127.0.0.1>;tag=t1\r\nTo: {to}\r\nCall-ID: tls-1\r\n"
            f"CSeq: {cseq} {method}\r\nContact: <sips:trunk@{self.via}>\r\nMax-Forwards: 70\r\n"
        )
        if body:
            head += "Content-Type: application/sdp\r\n"
        self.writer.write((head + f"Content-Length: {len(body)}\r\n\r\n" + body).encode())

    async def expect(self, status: int) -> Response:
        while True:
            while not self.pending:
                data = await asyncio.wait_for(self.reader.read(65536), 5.0)
                assert data, "kefu closed the TLS connection"
                self.pending += self.framer.feed(data)
            msg = parse_message(self.pending.pop(0))
            if isinstance(msg, Response) and msg.status == status:
                return msg


class SrtpPhone(asyncio.DatagramProtocol):
    """The caller's media: PCMU over SRTP, protected and checked with libsrtp directly."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def datagram_received(self, data, addr):  # type: ignore[no-untyped-def]
        if not is_rtcp(data):
            self.received.put_nowait(data)

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])


def sdp_offer(rtp_port: int, key: bytes) -> str:
    crypto = CryptoAttribute(1, SUITE, key).serialize()
    return (
        "v=0\r\no=t 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        f"m=audio {rtp_port} RTP/SAVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n"
        f"a=crypto:{crypto}\r\n"
    )


def tone_frames(count: int) -> list[bytes]:
    t = np.arange(count * 160) / 8000
    pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    encoded = ulaw_encode(pcm)
    return [bytes(encoded[i * 160 : (i + 1) * 160]) for i in range(count)]


def rtp(seq: int, payload: bytes) -> bytes:
    return struct.pack("!BBHII", 0x80, 0, seq, seq * 160, 0x1234ABCD) + payload


def session(key: bytes, inbound: bool) -> pylibsrtp.Session:
    kind = pylibsrtp.Policy.SSRC_ANY_INBOUND if inbound else pylibsrtp.Policy.SSRC_ANY_OUTBOUND
    return pylibsrtp.Session(pylibsrtp.Policy(key=key, ssrc_type=kind, srtp_profile=PROFILE))


async def place_call(
    server: KefuServer, pki: Pki, offered_key: bytes
) -> tuple[TlsTrunk, SrtpPhone, int, bytes, str]:
    """A TLS INVITE offering SRTP; (trunk, phone, kefu's RTP port, kefu's key, to-tag)."""
    loop = asyncio.get_running_loop()
    _, phone = await loop.create_datagram_endpoint(SrtpPhone, local_addr=("127.0.0.1", 0))
    trunk = await TlsTrunk.connect(server, client_context(pki))
    trunk.send("INVITE", cseq=1, body=sdp_offer(phone.port, offered_key))
    ok = await trunk.expect(200)
    # kefu answers on the connection the INVITE came on, as a sips: dialog over TLS.
    contact = ok.headers.get("Contact") or ""
    assert contact.startswith("<sips:kefu@127.0.0.1:"), contact
    assert contact.endswith(f":{server.sip_tls_address[1]}>")  # type: ignore[index]
    answer = ok.body.decode()
    assert "m=audio " in answer and " RTP/SAVP 0" in answer
    crypto = [line for line in answer.split("\r\n") if line.startswith("a=crypto:")]
    assert len(crypto) == 1
    ours = CryptoAttribute.parse(crypto[0].removeprefix("a=crypto:"))
    assert (ours.tag, ours.suite) == (1, SUITE) and ours.key != offered_key
    kefu_rtp = int(answer.split("m=audio ")[1].split()[0])
    trunk.send("ACK", cseq=1, to_tag=ok.to.tag or "")
    return trunk, phone, kefu_rtp, ours.key, ok.to.tag or ""


async def test_srtp_echo_over_tls_decrypts_to_the_same_audio(server: KefuServer, pki: Pki) -> None:
    our_key = bytes(range(30))
    trunk, phone, kefu_rtp, kefu_key, tag = await place_call(server, pki, our_key)
    tx, rx = session(our_key, inbound=False), session(kefu_key, inbound=True)
    frames = tone_frames(50)
    assert phone.transport is not None
    for seq, payload in enumerate(frames, 1000):
        packet = tx.protect(rtp(seq, payload))
        assert payload not in packet  # really encrypted on the wire
        phone.transport.sendto(packet, ("127.0.0.1", kefu_rtp))
        await asyncio.sleep(0.02)
    echoed: list[bytes] = []
    while len(echoed) < len(frames):
        data = await asyncio.wait_for(phone.received.get(), 3.0)
        assert frames[0] not in data  # kefu's echo is encrypted too
        clear = rx.unprotect(data)
        echoed.append(bytes(clear[12:]))
    # The echo decrypts, under kefu's key, to exactly the audio the caller sent.
    assert echoed == frames
    calls = await server.list_calls()
    assert calls[0]["rtp"]["srtp"] == SUITE and calls[0]["rtp"]["srtp_dropped"] == 0
    trunk.send("BYE", cseq=2, to_tag=tag)
    await trunk.expect(200)
    trunk.writer.close()
    assert phone.transport is not None
    phone.transport.close()


async def test_wrong_key_packets_are_dropped_counted_and_never_echoed(
    server: KefuServer, pki: Pki
) -> None:
    offered = bytes(range(30))
    trunk, phone, kefu_rtp, _, tag = await place_call(server, pki, offered)
    wrong = session(bytes(range(1, 31)), inbound=False)  # not the key the SDP offered
    assert phone.transport is not None
    for seq, payload in enumerate(tone_frames(20), 1):
        phone.transport.sendto(wrong.protect(rtp(seq, payload)), ("127.0.0.1", kefu_rtp))
        await asyncio.sleep(0.005)
    metric = 'kefu_rtp_dropped_total{reason="srtp_auth"} 20.0'
    await until(lambda: metric in server.metrics_text().decode())
    calls = await server.list_calls()
    assert calls[0]["rtp"]["srtp_dropped"] == 20 and calls[0]["rtp"]["received"] == 0
    # Nothing reached the caller's ears: no RTP came back at all.
    await asyncio.sleep(0.3)
    assert phone.received.empty()
    trunk.send("BYE", cseq=2, to_tag=tag)
    await trunk.expect(200)
    trunk.writer.close()
    phone.transport.close()


@pytest.mark.parametrize(
    ("client_cert", "reason"),
    [("expired", "tls_bad_certificate"), ("selfsigned", "tls_bad_certificate"), (None, "tls_")],
)
async def test_bad_client_certificates_are_refused_and_counted(
    server: KefuServer, pki: Pki, client_cert: str | None, reason: str
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
        trunk = await TlsTrunk.connect(server, client_context(pki, client_cert))
        # TLS 1.3: the client learns of the refusal on its first read.
        trunk.send("OPTIONS", cseq=1)
        data = await asyncio.wait_for(trunk.reader.read(100), 3.0)
        if not data:
            raise ConnectionError("closed")
    text = server.metrics_text().decode()
    assert f'kefu_sip_dropped_total{{reason="{reason}' in text
    # The listener lives on: a trunk with a good certificate is served.
    good = await TlsTrunk.connect(server, client_context(pki))
    good.send("OPTIONS", cseq=1)
    assert (await good.expect(200)).status == 200
    good.writer.close()


async def test_untrusted_server_certificate_is_refused_by_the_client(
    server: KefuServer, pki: Pki
) -> None:
    context = ssl.create_default_context()  # the system CAs: the test CA is not among them
    context.load_cert_chain(pki.cert("client"), pki.key("client"))
    with pytest.raises(ssl.SSLCertVerificationError):
        await TlsTrunk.connect(server, context)
    await until(lambda: "tls_handshake_failed" in server.metrics_text().decode())


async def test_https_healthz_with_the_test_ca(server: KefuServer, pki: Pki) -> None:
    assert server.http_address is not None
    host, port = server.http_address
    context = ssl.create_default_context(cafile=pki.cert("ca"))

    def get(url: str) -> tuple[int, bytes]:
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return response.status, response.read()

    status, body = await asyncio.to_thread(get, f"https://{host}:{port}/healthz")
    assert status == 200 and body
    with pytest.raises(Exception):  # noqa: B017 - plain HTTP to a TLS port gets nothing
        await asyncio.to_thread(get, f"http://{host}:{port}/healthz")
