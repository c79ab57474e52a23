"""The only SIP file doing I/O: UDP, TCP and TLS transports around the sans-IO :class:`UserAgent`.

TLS (RFC 3261 §26.2, ``sips:``) is TCP with the TLS record layer done here through an
:class:`ssl.SSLObject` on memory BIOs: the same connection code, caps and deadlines (the
handshake must finish within ``message_timeout``), and a handshake that fails (an expired,
self-signed or untrusted certificate, a client speaking plain TCP) is logged, counted
(``tls_handshake_failed`` / ``tls_bad_certificate``) and closes only that connection.

After anything is fed in (a datagram, a TCP chunk, a timer, an action by the application) the
owner calls :meth:`SipTransport.flush`, which sends what the user agent queued and re-arms its
one timer. The user agent answers to the packet's source (RFC 3261 §18.2.2 with ``received`` /
``rport``), so nothing here ever resolves a host name.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import structlog

from kefu.errors import SipParseError
from kefu.sip.admission import DROP_REASONS, AdmissionLimits, SourceGate
from kefu.sip.framing import DEFAULT_MAX_SIZE
from kefu.sip.message import StreamFramer
from kefu.sip.ua import Peer, UserAgent

__all__ = ["TCP_DROP_REASONS", "SipTransport", "TcpLimits"]

log = structlog.get_logger("kefu.sip")

DEFAULT_HANDSHAKE_TIMEOUT = 10.0
"""Seconds a TLS handshake may take when ``message_timeout`` is 0."""

BIND_ATTEMPTS = 8
"""Ephemeral UDP ports tried before giving up when TCP cannot take the same number."""

TCP_DROP_REASONS = (
    "tcp_over_cap",
    "tcp_source_over_cap",
    "tcp_idle",
    "tcp_message_timeout",
    "too_large",
    "tls_handshake_failed",
    "tls_bad_certificate",
)
"""Why the transport closed or refused a TCP connection (bounded metric label set)."""


@dataclass(frozen=True, slots=True)
class TcpLimits:
    """What one SIP-over-TCP listener tolerates (config ``sip.tcp_*``, RFC 3261 §18.3)."""

    max_connections: int = 1000
    """Open connections, all sources together; a new one beyond it is closed at once."""
    max_connections_per_source: int = 100
    """Open connections from one source IP; a new one beyond it is closed at once."""
    idle_timeout: float = 120.0
    """Seconds without a complete message (or CRLF keep-alive) after which a connection no
    dialog uses is closed; 0: never."""
    message_timeout: float = 10.0
    """Seconds a started message may take to arrive complete (slowloris); 0: no limit."""
    max_message_bytes: int = DEFAULT_MAX_SIZE
    """Largest header block + body; a larger one closes the connection (config
    ``sip.max_message_bytes``)."""


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, owner: SipTransport) -> None:
        self.owner = owner
        self.transport: asyncio.DatagramTransport | None = None
        self.closed = asyncio.Event()
        """Set once the socket is really closed (``close()`` only schedules it)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport is not a registered asyncio.DatagramTransport subclass.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.owner.admit(data, Peer("udp", str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable for a peer that went away; transactions time out on their own.
        log.debug("udp_error", error=str(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


class _TcpConnection(asyncio.Protocol):
    """One accepted connection: framing, its two deadlines (idle, message) and its cap."""

    def __init__(self, owner: SipTransport, tls: ssl.SSLContext | None = None) -> None:
        self.owner = owner
        self.tls_context = tls
        self._tls: ssl.SSLObject | None = None
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        self.handshake_done = tls is None
        self.framer = StreamFramer(owner.tcp_limits.max_message_bytes)
        self.peer: Peer | None = None
        self.transport: asyncio.Transport | None = None
        self.last_activity = time.monotonic()
        """When the latest complete message or keep-alive arrived (idle deadline)."""
        self.message_started: float | None = None
        """When the message now partly buffered began to arrive (slowloris deadline)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        host, port = transport.get_extra_info("peername")[:2]
        peer = Peer("tcp" if self.tls_context is None else "tls", str(host), int(port))
        refused = self.owner._tcp_refusal(peer.host)
        if refused is not None:
            self.owner.dropped(refused, peer.host)
            self.transport.abort()
            return
        self.peer = peer
        self.owner._tcp_opened(self)
        if self.tls_context is not None:
            self._tls = self.tls_context.wrap_bio(self._tls_in, self._tls_out, server_side=True)
            self.message_started = time.monotonic()  # the handshake has message_timeout
        self._arm()

    def write(self, data: bytes) -> None:
        """Send ``data`` on this connection (encrypted on TLS)."""
        assert self.transport is not None
        if self._tls is None:
            self.transport.write(data)
            return
        self._tls.write(data)
        self._flush_tls()

    def _flush_tls(self) -> None:
        out = self._tls_out.read()
        if out and self.transport is not None:
            self.transport.write(out)

    def _tls_receive(self, data: bytes) -> bytes | None:
        """The clear bytes in ``data``; None once the connection has failed and closes."""
        assert self._tls is not None and self.peer is not None and self.transport is not None
        self._tls_in.write(data)
        try:
            if not self.handshake_done:
                try:
                    self._tls.do_handshake()
                except ssl.SSLWantReadError:
                    self._flush_tls()
                    return b""
                self.handshake_done = True
                self.message_started = None
                self.owner._tls_handshaken(self)
            chunks: list[bytes] = []
            while True:
                try:
                    chunk = self._tls.read(65536)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # close_notify: answer it, then close
                    with contextlib.suppress(ssl.SSLError):
                        self._tls.unwrap()
                    self._flush_tls()
                    self.transport.close()
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        except ssl.SSLError as exc:
            self._flush_tls()  # the alert, so the peer learns why
            self.handshake_done = True  # counted once, here
            self.owner._tls_failed(self.peer, exc)
            self.transport.abort()
            return None
        self._flush_tls()
        return b"".join(chunks)

    def data_received(self, data: bytes) -> None:
        if self.peer is None or self.transport is None or self.transport.is_closing():
            return
        if self._tls is not None:
            clear = self._tls_receive(data)
            if not clear:
                return
            data = clear
        now = time.monotonic()
        try:
            messages = self.framer.feed(data)
        except SipParseError as exc:
            # A stream that cannot be framed cannot be resynchronised: RFC 3261 §18.3.
            log.info("tcp_framing_error", peer=str(self.peer), error=str(exc))
            if exc.status == 513:
                self.owner.dropped("too_large", self.peer.host)
            self.owner.ua.reject_unframeable(exc, self.peer, now)
            self.owner.flush()
            self.transport.close()
            return
        if messages or self.framer.take_pings():
            self.last_activity = now
        if not self.framer.buffered:
            self.message_started = None
        elif messages or self.message_started is None:
            self.message_started = now
        self._arm()
        for raw in messages:
            self.owner.admit(raw, self.peer)

    def _deadline(self) -> float:
        limits = self.owner.tcp_limits
        due = self.last_activity + limits.idle_timeout if limits.idle_timeout > 0 else math.inf
        if self.message_started is not None and limits.message_timeout > 0:
            due = min(due, self.message_started + limits.message_timeout)
        elif not self.handshake_done:  # a handshake never waits forever
            assert self.message_started is not None
            due = min(due, self.message_started + DEFAULT_HANDSHAKE_TIMEOUT)
        return due

    def _arm(self) -> None:
        """Keep one timer per connection, moved only when a deadline comes earlier."""
        due = self._deadline()
        if due >= self._timer_at:
            return  # the timer fires first and re-arms for the later deadline
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        if due < math.inf:
            delay = max(0.0, due - time.monotonic())
            self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        if self.peer is None or self.transport is None or self.transport.is_closing():
            return
        now = time.monotonic()
        limits = self.owner.tcp_limits
        reason: str | None = None
        if (
            self.message_started is not None
            and limits.message_timeout > 0
            and now >= self.message_started + limits.message_timeout
        ) or (not self.handshake_done and now >= self._deadline()):
            reason = "tcp_message_timeout"
        elif limits.idle_timeout > 0 and now >= self.last_activity + limits.idle_timeout:
            if self.owner.in_use(self.peer):
                self.last_activity = now  # a dialog still sends its BYE here
            else:
                reason = "tcp_idle"
        if reason is None:
            self._arm()
            return
        self.owner.dropped(reason, self.peer.host)
        log.info("tcp_closed", peer=str(self.peer), reason=reason, buffered=self.framer.buffered)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.peer is not None:
            if self._tls is not None and not self.handshake_done:
                self.owner._tls_failed(self.peer, None)
            self.owner._tcp_closed(self)


class SipTransport:
    """Binds UDP and TCP on one address and pumps the user agent.

    Every datagram and framed TCP message passes :class:`~kefu.sip.admission.SourceGate`
    before the user agent parses it; TCP connections are capped in number, per source and in
    how long they may sit idle or dribble a message (:class:`TcpLimits`). ``on_drop(reason)``
    is told of each thing dropped (reasons: a fixed set, safe as a metric label); ``in_use``
    says whether a dialog still uses a TCP peer, which keeps its connection past the idle
    timeout.
    """

    def __init__(
        self,
        ua: UserAgent,
        on_events: Callable[[], None],
        *,
        tcp_limits: TcpLimits | None = None,
        admission: AdmissionLimits | None = None,
        on_drop: Callable[[str], None] | None = None,
        in_use: Callable[[Peer], bool] | None = None,
    ) -> None:
        self.ua = ua
        self.on_events = on_events
        self.tcp_limits = tcp_limits or TcpLimits()
        self.gate = SourceGate(admission)
        self.on_drop = on_drop
        self.in_use: Callable[[Peer], bool] = in_use or (lambda peer: False)
        self.udp: _Udp | None = None
        self.tcp_server: asyncio.Server | None = None
        self.tls_server: asyncio.Server | None = None
        self.tls_handshakes = 0
        """TLS handshakes completed (failed ones are counted as drops)."""
        self.tcp_connections: dict[Peer, _TcpConnection] = {}
        self._per_source: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    async def start(
        self,
        host: str,
        port: int,
        *,
        attempts: int = BIND_ATTEMPTS,
        udp_port: Callable[[int], int] | None = None,
    ) -> tuple[str, int]:
        """Bind UDP and TCP on the same port; the address bound.

        With ``port`` 0 the UDP socket takes an ephemeral port (``udp_port(attempt)`` picks it
        instead, for tests) and TCP the same number; when another socket already holds that
        TCP port both are let go and a new port is tried, ``attempts`` times in all. A
        non-zero ``port`` that is taken raises OSError(EADDRINUSE) naming it.
        """
        loop = asyncio.get_running_loop()
        last: OSError | None = None
        for attempt in range(max(1, attempts) if port == 0 else 1):
            want = port or (udp_port(attempt) if udp_port is not None else 0)
            try:
                udp, protocol = await loop.create_datagram_endpoint(
                    lambda: _Udp(self), local_addr=(host, want)
                )
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                last = exc
                continue
            bound = udp.get_extra_info("sockname")
            try:
                server = await loop.create_server(
                    lambda: _TcpConnection(self), host, bound[1], reuse_address=True
                )
            except OSError as exc:
                udp.close()
                await protocol.closed.wait()  # the port is free again before we go on
                if exc.errno != errno.EADDRINUSE:
                    raise
                last = exc
                log.info("sip_port_taken", port=bound[1], attempt=attempt + 1)
                continue
            self.udp, self.tcp_server = protocol, server
            return str(bound[0]), int(bound[1])
        what = f"port {port}" if port else f"a free port after {attempts} attempts"
        raise OSError(
            errno.EADDRINUSE, f"SIP listen {host}: {what} is already in use (UDP or TCP): {last}"
        )

    async def start_tls(self, host: str, port: int, context: ssl.SSLContext) -> tuple[str, int]:
        """Listen for SIP over TLS on ``host:port`` (0: an ephemeral port); the address bound.

        ``context`` is a server context (:func:`kefu.sip.tls.server_context`); its
        verification settings decide whether clients must show a certificate.
        """
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _TcpConnection(self, context), host, port, reuse_address=True
        )
        self.tls_server = server
        bound = server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        if self._timer:
            self._timer.cancel()
        if self.udp and self.udp.transport:
            self.udp.transport.close()
        servers = [s for s in (self.tcp_server, self.tls_server) if s is not None]
        for server in servers:
            server.close()
        for conn in list(self.tcp_connections.values()):
            if conn.transport:
                conn.transport.close()
        for server in servers:
            await server.wait_closed()

    def receive(self, data: bytes, peer: Peer) -> None:
        self.ua.receive(data, peer, time.monotonic())
        self.flush()

    def admit(self, data: bytes, peer: Peer) -> None:
        """Pass ``data`` to the user agent unless its source is over its limits."""
        reason = self.gate.check(data, peer.host, time.monotonic())
        if reason is None:
            self.receive(data, peer)
        else:
            self.dropped(reason, peer.host)

    def dropped(self, reason: str, host: str) -> None:
        """Count a drop; log it at most once per interval per source."""
        if self.on_drop is not None:
            self.on_drop(reason)
        if reason in DROP_REASONS:
            count = self.gate.take_log(host, time.monotonic())
            if count:
                log.warning("sip_source_limited", source=host, reason=reason, dropped=count)

    def hold(self, host: str, seconds: float) -> None:
        """Drop new INVITEs from ``host`` before parsing for ``seconds``."""
        now = time.monotonic()
        self.gate.hold(host, now + seconds, now)

    def _tcp_refusal(self, host: str) -> str | None:
        limits = self.tcp_limits
        if len(self.tcp_connections) >= limits.max_connections:
            return "tcp_over_cap"
        if self._per_source.get(host, 0) >= limits.max_connections_per_source:
            return "tcp_source_over_cap"
        return None

    def _tls_handshaken(self, conn: _TcpConnection) -> None:
        self.tls_handshakes += 1
        assert conn._tls is not None
        log.debug("tls_handshake", peer=str(conn.peer), version=conn._tls.version())

    def _tls_failed(self, peer: Peer, exc: ssl.SSLError | None) -> None:
        """A handshake or record failed (``exc``), or the peer left mid-handshake (None, as
        a client that refused our certificate does): log why, count it; only this
        connection closes."""
        bad_cert = isinstance(exc, ssl.SSLCertVerificationError)
        reason = "tls_bad_certificate" if bad_cert else "tls_handshake_failed"
        detail = exc.verify_message if isinstance(exc, ssl.SSLCertVerificationError) else None
        error = "connection closed during the handshake"
        if exc is not None:
            error = getattr(exc, "reason", None) or str(exc)
        log.warning(
            "tls_handshake_failed",
            peer=str(peer),
            reason=reason,
            error=error,
            certificate=detail,
        )
        if self.on_drop is not None:
            self.on_drop(reason)

    def _tcp_opened(self, conn: _TcpConnection) -> None:
        assert conn.peer is not None
        self.tcp_connections[conn.peer] = conn
        self._per_source[conn.peer.host] = self._per_source.get(conn.peer.host, 0) + 1

    def _tcp_closed(self, conn: _TcpConnection) -> None:
        assert conn.peer is not None
        if self.tcp_connections.get(conn.peer) is conn:
            del self.tcp_connections[conn.peer]
            left = self._per_source.get(conn.peer.host, 1) - 1
            if left > 0:
                self._per_source[conn.peer.host] = left
            else:
                self._per_source.pop(conn.peer.host, None)

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
                    conn.write(data)
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
