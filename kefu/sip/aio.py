"""The only SIP file doing I/O: UDP and TCP transports around the sans-IO :class:`UserAgent`.

After anything is fed in (a datagram, a TCP chunk, a timer, an action by the application) the
owner calls :meth:`SipTransport.flush`, which sends what the user agent queued and re-arms its
one timer. The user agent answers to the packet's source (RFC 3261 §18.2.2 with ``received`` /
``rport``), so nothing here ever resolves a host name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import cast

import structlog

from kefu.errors import SipParseError
from kefu.sip.message import StreamFramer
from kefu.sip.ua import Peer, UserAgent

log = structlog.get_logger("kefu.sip")

MAX_TCP_BUFFER = 256 * 1024


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, owner: SipTransport) -> None:
        self.owner = owner
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not a registered asyncio.DatagramTransport subclass.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.owner.receive(data, Peer("udp", str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable for a peer that went away; transactions time out on their own.
        log.debug("udp_error", error=str(exc))


class _TcpConnection(asyncio.Protocol):
    def __init__(self, owner: SipTransport) -> None:
        self.owner = owner
        self.framer = StreamFramer()
        self.peer: Peer | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        host, port = transport.get_extra_info("peername")[:2]
        self.peer = Peer("tcp", str(host), int(port))
        self.owner.tcp_connections[self.peer] = self

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.transport is not None
        try:
            messages = self.framer.feed(data)
        except SipParseError as exc:
            # A stream that cannot be framed cannot be resynchronised: RFC 3261 §18.3.
            log.info("tcp_framing_error", peer=str(self.peer), error=str(exc))
            self.owner.ua.reject_unframeable(exc, self.peer, time.monotonic())
            self.owner.flush()
            self.transport.close()
            return
        for raw in messages:
            self.owner.receive(raw, self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.owner.tcp_connections.pop(self.peer, None)


class SipTransport:
    """Binds UDP and TCP on one address and pumps the user agent."""

    def __init__(self, ua: UserAgent, on_events: Callable[[], None]) -> None:
        self.ua = ua
        self.on_events = on_events
        self.udp: _Udp | None = None
        self.tcp_server: asyncio.Server | None = None
        self.tcp_connections: dict[Peer, _TcpConnection] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(
            lambda: _Udp(self), local_addr=(host, port)
        )
        self.udp = protocol
        bound = transport.get_extra_info("sockname")
        self.tcp_server = await loop.create_server(
            lambda: _TcpConnection(self), host, bound[1], reuse_address=True
        )
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        if self._timer:
            self._timer.cancel()
        if self.udp and self.udp.transport:
            self.udp.transport.close()
        if self.tcp_server:
            self.tcp_server.close()
            for conn in list(self.tcp_connections.values()):
                if conn.transport:
                    conn.transport.close()
            await self.tcp_server.wait_closed()

    def receive(self, data: bytes, peer: Peer) -> None:
        self.ua.receive(data, peer, time.monotonic())
        self.flush()

    def flush(self) -> None:
        """Send what the user agent queued, re-arm its timer, let the owner see its events."""
        self.send_pending()
        self.on_events()

    def send_pending(self) -> None:
        for data, peer in self.ua.datagrams_to_send():
            if peer.transport == "udp":
                if self.udp and self.udp.transport:
                    self.udp.transport.sendto(data, (peer.host, peer.port))
            else:
                conn = self.tcp_connections.get(peer)
                if conn and conn.transport and not conn.transport.is_closing():
                    conn.transport.write(data)
                else:
                    self.ua.transport_error(peer, time.monotonic())
        self._arm_timer()

    def _arm_timer(self) -> None:
        when = self.ua.get_timer()
        if when == self._timer_at:
            return
        if self._timer:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, when - time.monotonic())
            self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self.ua.handle_timer(time.monotonic())
        self.flush()
