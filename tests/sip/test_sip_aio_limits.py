"""SipTransport on real loopback sockets: the port race, and SIP-over-TCP limits.

Slowloris, idle and over-cap connections are closed by kefu; oversized messages close their
connection; complete messages on the same listener are still answered. Timeouts are set
short here; the assertions are on what was closed and why, and what was answered.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from kefu.sip.aio import SipTransport, TcpLimits
from kefu.sip.message import Response, StreamFramer, parse_message
from kefu.sip.ua import Peer, UserAgent
from tests.helpers.sip_trunk import request

pytestmark = pytest.mark.netns

HOST = "127.0.0.1"


class Harness:
    def __init__(self, limits: TcpLimits, in_use: Callable[[Peer], bool] | None = None) -> None:
        self.drops: list[str] = []
        self.ua = UserAgent()
        self.sip = SipTransport(
            self.ua,
            lambda: None,
            tcp_limits=limits,
            on_drop=self.drops.append,
            in_use=in_use,
        )
        self.port = 0

    async def start(self) -> Harness:
        _, self.port = await self.sip.start(HOST, 0)
        self.ua.set_local_address(HOST, self.port)
        return self

    async def connect(
        self, source: str = HOST
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(HOST, self.port, local_addr=(source, 0))


@pytest.fixture
async def harness_factory() -> AsyncIterator[Callable[..., object]]:
    made: list[Harness] = []

    async def make(limits: TcpLimits, **kw: object) -> Harness:
        h = await Harness(limits, **kw).start()  # type: ignore[arg-type]
        made.append(h)
        return h

    yield make
    for h in made:
        await h.sip.close()


async def closed_by_peer(reader: asyncio.StreamReader, limit: float = 10.0) -> bool:
    """True once the server closed the connection (EOF or reset) within ``limit`` s."""
    try:
        async with asyncio.timeout(limit):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def options_answered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    writer.write(request("OPTIONS", call_id=f"opt-{id(writer)}@vcc"))
    await writer.drain()
    framer = StreamFramer()
    async with asyncio.timeout(5):
        while True:
            data = await reader.read(65536)
            assert data, "closed instead of answering"
            for raw in framer.feed(data):
                msg = parse_message(raw)
                assert isinstance(msg, Response)
                return msg.status


# --- the port race (item 1) ------------------------------------------------------------------


async def test_ephemeral_port_whose_tcp_twin_is_taken_is_retried() -> None:
    # Our own TCP listener holds port P; the UDP chooser hands P to the first attempt.
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind((HOST, 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    tried: list[int] = []

    def chooser(attempt: int) -> int:
        tried.append(attempt)
        return taken if attempt == 0 else 0

    sip = SipTransport(UserAgent(), lambda: None)
    try:
        host, port = await sip.start(HOST, 0, udp_port=chooser)
        assert tried == [0, 1]
        assert port != taken
        # Both transports hold the reported port: UDP and TCP OPTIONS are answered there.
        sip.ua.set_local_address(host, port)
        reader, writer = await asyncio.open_connection(HOST, port)
        assert await options_answered(reader, writer) == 200
        writer.close()
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[bytes] = asyncio.Queue()

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: object) -> None:
                answers.put_nowait(data)

        udp, _ = await loop.create_datagram_endpoint(Client, remote_addr=(HOST, port))
        udp.sendto(request("OPTIONS", call_id="udp-opt@vcc"))
        async with asyncio.timeout(5):
            msg = parse_message(await answers.get())
        assert isinstance(msg, Response) and msg.status == 200
        udp.close()
    finally:
        await sip.close()
        blocker.close()


async def test_every_attempt_colliding_is_a_clear_error_and_releases_udp() -> None:
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.bind((HOST, 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    try:
        sip = SipTransport(UserAgent(), lambda: None)
        with pytest.raises(OSError) as info:
            await sip.start(HOST, 0, attempts=3, udp_port=lambda attempt: taken)
        assert info.value.errno == errno.EADDRINUSE
        assert "after 3 attempts" in str(info.value)
        with pytest.raises(OSError) as info:
            await sip.start(HOST, taken)
        assert info.value.errno == errno.EADDRINUSE
        assert f"port {taken}" in str(info.value)
        # The UDP socket of each failed attempt was let go.
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind((HOST, taken))
        probe.close()
    finally:
        blocker.close()


# --- SIP over TCP limits (item 2) --------------------------------------------------------------


async def test_slowloris_is_closed_and_a_complete_message_still_answered(
    harness_factory: Callable[..., object],
) -> None:
    h: Harness = await harness_factory(TcpLimits(message_timeout=0.3, idle_timeout=60))  # type: ignore[misc]
    slow_r, slow_w = await h.connect()
    good_r, good_w = await h.connect()
    partial = request("OPTIONS", call_id="slow@vcc")[:-10]
    slow_w.write(partial[:20])

    async def dribble() -> None:
        for i in range(20, len(partial)):
            if slow_w.is_closing():
                return
            slow_w.write(partial[i : i + 1])
            await asyncio.sleep(0.05)

    task = asyncio.create_task(dribble())
    assert await closed_by_peer(slow_r)
    task.cancel()
    assert h.drops == ["tcp_message_timeout"]
    assert await options_answered(good_r, good_w) == 200
    assert len(h.sip.tcp_connections) == 1
    good_w.close()


async def test_idle_connection_closed_unless_a_call_uses_it(
    harness_factory: Callable[..., object],
) -> None:
    kept: set[int] = set()
    h: Harness = await harness_factory(  # type: ignore[misc]
        TcpLimits(idle_timeout=0.3, message_timeout=60),
        in_use=lambda peer: peer.port in kept,
    )
    idle_r, idle_w = await h.connect()
    used_r, used_w = await h.connect()
    kept.add(used_w.get_extra_info("sockname")[1])
    assert await options_answered(idle_r, idle_w) == 200
    assert await options_answered(used_r, used_w) == 200
    assert await closed_by_peer(idle_r)
    assert h.drops == ["tcp_idle"]
    # Two more idle periods: the connection a call uses is still open and still answers.
    assert not await closed_by_peer(used_r, limit=0.7)
    assert await options_answered(used_r, used_w) == 200
    kept.clear()
    assert await closed_by_peer(used_r)
    assert h.drops == ["tcp_idle", "tcp_idle"]


async def test_connections_over_the_caps_are_closed_at_once(
    harness_factory: Callable[..., object],
) -> None:
    h: Harness = await harness_factory(  # type: ignore[misc]
        TcpLimits(max_connections=5, max_connections_per_source=3)
    )
    mine = [await h.connect("127.0.0.1") for _ in range(3)]
    over_source = await h.connect("127.0.0.1")
    assert await closed_by_peer(over_source[0])
    others = [await h.connect("127.0.0.2") for _ in range(2)]
    over_total = await h.connect("127.0.0.3")
    assert await closed_by_peer(over_total[0])
    assert h.drops == ["tcp_source_over_cap", "tcp_over_cap"]
    for r, w in mine + others:
        assert await options_answered(r, w) == 200
    # Once one is closed there is room for another source again.
    first = Peer("tcp", HOST, mine[0][1].get_extra_info("sockname")[1])
    h.sip.tcp_connections[first].transport.close()  # type: ignore[union-attr]
    assert await closed_by_peer(mine[0][0])
    assert len(h.sip.tcp_connections) == 4
    r, w = await h.connect("127.0.0.3")
    assert await options_answered(r, w) == 200


@pytest.mark.parametrize(
    "payload",
    [
        # Content-Length beyond the limit: closed as soon as the header block is in.
        request("OPTIONS").replace(b"Content-Length: 0", b"Content-Length: 100000"),
        # A header block that never ends.
        b"OPTIONS sip:4001@127.0.0.1 SIP/2.0\r\n" + b"X-Pad: " + b"a" * 9000,
    ],
    ids=["content-length", "header-block"],
)
async def test_oversized_message_closes_the_connection(
    harness_factory: Callable[..., object], payload: bytes
) -> None:
    h: Harness = await harness_factory(TcpLimits(max_message_bytes=4096))  # type: ignore[misc]
    r, w = await h.connect()
    w.write(payload)
    assert await closed_by_peer(r)
    assert h.drops == ["too_large"]


async def test_partial_messages_hold_bounded_memory_and_are_freed(
    harness_factory: Callable[..., object],
) -> None:
    limit = 16384
    h: Harness = await harness_factory(  # type: ignore[misc]
        TcpLimits(
            max_connections=40,
            max_connections_per_source=20,
            message_timeout=0.5,
            max_message_bytes=limit,
        )
    )
    streams = []
    for i in range(60):
        r, w = await h.connect(f"127.0.0.{2 + i % 3}")
        w.write(b"OPTIONS sip:4001@127.0.0.1 SIP/2.0\r\nX-Pad: " + b"a" * (limit - 100))
        streams.append((r, w))
    for _, w in streams:
        await w.drain()
    assert len(h.sip.tcp_connections) <= 40
    assert sum(c.framer.buffered for c in h.sip.tcp_connections.values()) <= 40 * limit
    closed = await asyncio.gather(*(closed_by_peer(r) for r, _ in streams))
    assert all(closed)
    assert not h.sip.tcp_connections
    assert h.drops.count("tcp_over_cap") == 20
    assert h.drops.count("tcp_message_timeout") == 40
