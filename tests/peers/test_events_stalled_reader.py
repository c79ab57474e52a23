"""A ``/api/events`` reader that stops reading for 60 s while 20 SIPp calls run keeps kefu flat.

The reader is a raw TCP socket with a 4 KiB receive buffer that does the WebSocket upgrade
and then reads nothing: kefu's sender blocks on the socket, its bounded subscription drops the
oldest events. Each call sends RFC 4733 DTMF five times a second (about 6,000 events in all).
kefu's RSS is read from /proc between 10 s into the calls and their end; afterwards the reader
reads again and must be told how many events it lost.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from kefu.signaling.tokens import mint_token
from loadtest.pcap import DtmfEvent, make_rtp_pcap, speech_like_pcm
from loadtest.peers import run_sipp_async, sipp_media_port

pytestmark = [pytest.mark.netns, pytest.mark.peer]

CALLS = 20
CALL_S = 60.0
DIGITS = "123456789*#"
RSS_GROWTH_LIMIT_KB = 6 * 1024


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def stalled_reader(http_url: str, token: str) -> socket.socket:
    """Upgrade to the events WebSocket, read the 101, then stop reading."""
    host, port = http_url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /api/events HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        byte = sock.recv(1)  # one at a time: nothing after the headers is consumed
        assert byte, "kefu closed the events socket during the upgrade"
        head += byte
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def read_messages(sock: socket.socket, until: float) -> list[dict[str, Any]]:
    """Server-to-client text frames (unmasked) until the socket is quiet for 2 s."""
    sock.settimeout(2.0)
    buf = b""
    messages: list[dict[str, Any]] = []
    while time.monotonic() < until:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 2:
            length, at = buf[1] & 0x7F, 2
            if length == 126:
                if len(buf) < 4:
                    break
                length, at = struct.unpack("!H", buf[2:4])[0], 4
            elif length == 127:
                if len(buf) < 10:
                    break
                length, at = struct.unpack("!Q", buf[2:10])[0], 10
            if len(buf) < at + length:
                break
            opcode, payload, buf = buf[0] & 0x0F, buf[at : at + length], buf[at + length :]
            if opcode == 0x1:
                messages.append(json.loads(payload))
    return messages


async def test_a_reader_that_stops_reading_for_a_minute_costs_kefu_no_memory(
    kefu_factory, tmp_path: Path
) -> None:
    kefu = kefu_factory()
    secret = (kefu.log_path.parent / "state" / "jwt-secret").read_text().strip()
    reader = stalled_reader(kefu.http, mint_token(secret, "sue", "supervisor"))
    pcap = tmp_path / "dtmf.pcap"
    keys = range(int(CALL_S * 5) - 5)
    dtmf = [DtmfEvent(DIGITS[i % len(DIGITS)], at=0.5 + 0.2 * i) for i in keys]
    seconds = make_rtp_pcap(pcap, speech_like_pcm(CALL_S), dtmf=dtmf)
    calls = asyncio.create_task(
        run_sipp_async(
            "uac_echo",
            kefu.sip,
            calls=CALLS,
            rate=CALLS,
            max_concurrent=CALLS,
            media_port=sipp_media_port(),
            keys={"pcap": pcap},
            variables={"audio_ms": int(seconds * 1000)},
            timeout=CALL_S + 40,
        )
    )
    await asyncio.sleep(10)
    before = rss_kb(kefu.pid)
    digits_early = len(kefu.events("dtmf"))
    result = await calls
    after = rss_kb(kefu.pid)
    assert result.ok, result.errors or result.stderr_tail
    digits = len(kefu.events("dtmf"))
    assert digits_early > 500 and digits > 5000, (digits_early, digits)  # the events were there
    assert after - before < RSS_GROWTH_LIMIT_KB, f"RSS grew {before} -> {after} kB"

    messages = read_messages(reader, time.monotonic() + 30)
    reader.close()
    dropped = sum(m["count"] for m in messages if m["type"] == "events.dropped")
    delivered = [m for m in messages if m["type"] == "call.dtmf"]
    print(f"rss_kb {before} -> {after}; dtmf {digits}, delivered {len(delivered)}, lost {dropped}")
    assert dropped > digits // 2, (dropped, len(delivered), digits)
    assert dropped + len(delivered) >= digits
    assert any(m["type"] == "call.ended" for m in messages)  # the stream survived the stall
