"""RtpEndpoint: the only I/O in kefu/rtp — UDP sockets around a sans-IO RtpSession.

API CONTRACT:

    ep = await RtpEndpoint.open(host, ports, *, loop=None, latching="sdp_host",
                                relatch_after=2.0, rtcp_interval=5.0, log=None)
    ep.local_port -> int                      (RTCP on local_port + 1 unless rtcp-mux)
    ep.start(remote, codec, payload_type, dtmf_payload_type, ptime_ms=20, remote_rtcp=None,
             *, rtcp_mux=False, direction="sendrecv", srtp=None)
    ep.update(*, remote=..., remote_rtcp=..., codec=..., payload_type=...,
              dtmf_payload_type=..., direction=..., srtp=...)   # re-INVITE: hold, codec, keys
    ep.srtp_dropped -> int; ep.on_srtp_drop: Callable[[SrtpDrop], None] | None
    ep.inbound -> RtpInboundTrack             the caller's audio (kind "audio")
    ep.play(track | None)                     what we send; replaces the previous source
    ep.send_dtmf(digit)
    ep.dtmf -> asyncio.Queue[DtmfReceived]    bounded (32); ep.dtmf_dropped counts overflow
    ep.stats -> RtpStats; ep.on_stats: Callable[[RtpStats], None] | None (each RTCP report)
    await ep.close()                          BYE, cancel tasks, end inbound, free ports

``direction`` is ours as written in our SDP (RFC 3264 §5.1): "recvonly" and "inactive" stop
sending (the played source is still drained so it stays in real time); RTCP continues.
Both sockets accept RTP and RTCP (demuxed per RFC 5761), so rtcp-mux needs no rebinding.
Datagrams that arrive before start() are dropped: with no negotiated codec nothing can be
made of them (counted in ``dropped_before_start``).

With ``srtp`` keys (SDES, RFC 4568) every datagram is unprotected before the session sees it
and every RTP/RTCP packet protected as it leaves (:mod:`kefu.rtp.srtp`). One that fails
authentication or replay checks is dropped, counted (``srtp_dropped``, ``on_srtp_drop``;
the first logged as ``srtp_dropped``) and never decoded nor echoed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.codecs.registry import CodecInfo
from kefu.rtp.ports import PortAllocator, bind_pair
from kefu.rtp.sender import RtpSender
from kefu.rtp.session import (
    RTCP_INTERVAL,
    Address,
    AudioPacket,
    DtmfReceived,
    Latching,
    RtpSession,
    RtpStats,
    SourceLatched,
)
from kefu.rtp.srtp import SrtpContext, SrtpDrop
from kefu.rtp.track import RtpInboundTrack
from kefu.sip.sdes import SrtpKeys

Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
_SENDING: frozenset[str] = frozenset({"sendrecv", "sendonly"})
DTMF_QUEUE_SIZE = 32


class _Unset:
    """Marks an update() argument the caller did not pass (None is a meaningful value)."""


_UNSET: Any = _Unset()


class _Socket(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.on_datagram: Callable[[bytes, Address], None] | None = None
        self.errors = 0

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        if self.on_datagram is not None:
            self.on_datagram(data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable from a peer that went away: nothing to do but count.
        self.errors += 1


class RtpEndpoint:
    """One call leg's RTP/RTCP sockets, session, inbound track and sender."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ports: PortAllocator,
        port: int,
        rtp: asyncio.DatagramTransport,
        rtcp: asyncio.DatagramTransport,
        *,
        latching: Latching,
        relatch_after: float,
        rtcp_interval: float,
        log: Any,
    ) -> None:
        self._loop = loop
        self._ports = ports
        self.local_port = port
        self._rtp = rtp
        self._rtcp = rtcp
        self._latching = latching
        self._relatch_after = relatch_after
        self._rtcp_interval = rtcp_interval
        self._log = log
        self.inbound = RtpInboundTrack(loop.time)
        self.dtmf: asyncio.Queue[DtmfReceived] = asyncio.Queue(maxsize=DTMF_QUEUE_SIZE)
        self.dtmf_dropped = 0
        self.dropped_before_start = 0
        self.internal_errors = 0
        self.on_stats: Callable[[RtpStats], None] | None = None
        self.recorder: Callable[[int, float, str, bytes], None] | None = None
        """Gets (0 received / 1 sent, loop time, codec, payload) of every audio frame: the
        call's recording (kefu.mediaserver.recording). It must only copy, never block."""
        self._session: RtpSession | None = None
        self._sender: RtpSender | None = None
        self._source: MediaStreamTrack | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._reflecting = False
        self._srtp: SrtpContext | None = None
        self._srtp_dropped_before = 0
        """Drops counted by SRTP contexts replaced at a re-key."""
        self.on_srtp_drop: Callable[[SrtpDrop], None] | None = None
        """Told of each inbound datagram SRTP dropped (the server counts it in a metric)."""

    @classmethod
    async def open(
        cls,
        host: str,
        ports: PortAllocator,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        latching: Latching = "sdp_host",
        relatch_after: float = 2.0,
        rtcp_interval: float = RTCP_INTERVAL,
        log: Any = None,
    ) -> RtpEndpoint:
        """Bind an RTP/RTCP port pair on host; raises ResourceExhausted when none is free."""
        loop = loop or asyncio.get_running_loop()
        pair = await bind_pair(loop, host, ports, _Socket, _Socket)
        ep = cls(
            loop,
            ports,
            pair.port,
            pair.rtp,
            pair.rtcp,
            latching=latching,
            relatch_after=relatch_after,
            rtcp_interval=rtcp_interval,
            log=(log or structlog.get_logger("kefu.rtp")).bind(rtp_port=pair.port),
        )
        for protocol in (pair.rtp_protocol, pair.rtcp_protocol):
            assert isinstance(protocol, _Socket)
            protocol.on_datagram = ep._on_datagram
        return ep

    # --- negotiation ---------------------------------------------------------------------

    def start(
        self,
        remote: Address,
        codec: CodecInfo,
        payload_type: int,
        dtmf_payload_type: int | None,
        ptime_ms: int = 20,
        remote_rtcp: Address | None = None,
        *,
        rtcp_mux: bool = False,
        direction: Direction = "sendrecv",
        srtp: SrtpKeys | None = None,
    ) -> None:
        """Begin media once SDP is agreed (one call per endpoint; then use update())."""
        if self._closed:
            raise RuntimeError("RtpEndpoint is closed")
        if self._session is not None:
            raise RuntimeError("RtpEndpoint already started; use update()")
        self._set_srtp(srtp)
        self._ptime_ms = ptime_ms
        self._session = RtpSession(
            payload_type=payload_type,
            clock_rate=codec.clock_rate,
            dtmf_payload_type=dtmf_payload_type,
            remote=remote,
            remote_rtcp=remote_rtcp,
            rtcp_mux=rtcp_mux,
            latching=self._latching,
            relatch_after=self._relatch_after,
            ptime_ms=ptime_ms,
            rtcp_interval=self._rtcp_interval,
        )
        self.inbound.configure(codec, ptime_ms)
        self._sender = RtpSender(self._session, self._send_rtp, self._loop.time, log=self._log)
        self._sender.on_payload = lambda payload: self._record(1, self._loop.time(), payload)
        self._sender.configure(codec, ptime_ms)
        self._sender.sending = direction in _SENDING
        self._sender.set_source(self._source)
        self._sender.start()
        self._log.info(
            "rtp_started",
            remote=remote,
            codec=codec.name,
            pt=payload_type,
            srtp=srtp.suite if srtp is not None else None,
        )

    def update(
        self,
        *,
        remote: Address | None = _UNSET,
        remote_rtcp: Address | None = _UNSET,
        codec: CodecInfo | None = None,
        payload_type: int | None = None,
        dtmf_payload_type: int | None = _UNSET,
        direction: Direction | None = None,
        srtp: SrtpKeys | None = _UNSET,
    ) -> None:
        """Apply a re-INVITE: new address (unlatches), codec change, hold/unhold, new SRTP
        keys (a context is kept while its keys are unchanged: no re-key, no replay reset)."""
        session, sender = self._session, self._sender
        if session is None or sender is None:
            raise RuntimeError("RtpEndpoint.update() before start()")
        if srtp is not _UNSET:
            if srtp != self.srtp:
                self._set_srtp(srtp)
        if remote is not _UNSET or remote_rtcp is not _UNSET:
            new_remote = session.sdp_address if remote is _UNSET else remote
            new_rtcp = None if remote_rtcp is _UNSET else remote_rtcp
            session.set_remote(new_remote, new_rtcp)
        if codec is not None or payload_type is not None or dtmf_payload_type is not _UNSET:
            current = self.inbound.codec
            new_codec = codec or current
            assert new_codec is not None
            session.set_codec(
                payload_type if payload_type is not None else session.payload_type,
                new_codec.clock_rate,
                session.dtmf_payload_type if dtmf_payload_type is _UNSET else dtmf_payload_type,
            )
            if codec is not None and codec != current:
                self.inbound.configure(codec, self._ptime_ms)
                sender.configure(codec, self._ptime_ms)
        if direction is not None:
            sender.sending = direction in _SENDING
        self._log.info("rtp_updated", remote=session.remote_address, direction=direction)

    # --- media ---------------------------------------------------------------------------

    def play(self, track: MediaStreamTrack | None) -> None:
        """Send this track's audio (any format; converted); None sends nothing."""
        self._reflecting = False
        self._source = track
        if self._sender is not None:
            self._sender.set_source(track)

    def reflect(self) -> None:
        """Echo by sending each received packet straight back (no jitter buffer, no pacing).

        The cheapest echo (one syscall per packet, no timers), what an RTP relay does; the
        inbound track gets nothing while reflecting. ``play()`` ends it.
        """
        self.play(None)
        self._reflecting = True

    def send_dtmf(self, digit: str) -> None:
        """Queue an RFC 4733 digit; it replaces audio for its ~200 ms on the wire."""
        if self._sender is None:
            raise RuntimeError("RtpEndpoint.send_dtmf() before start()")
        self._sender.queue_dtmf(digit)

    @property
    def sender(self) -> RtpSender | None:
        return self._sender

    @property
    def srtp(self) -> SrtpKeys | None:
        """The SRTP keys in use; None for plain RTP."""
        return self._srtp.keys if self._srtp is not None else None

    @property
    def srtp_dropped(self) -> int:
        """Inbound datagrams SRTP dropped on this call (bad tag, replay, malformed)."""
        now = self._srtp.dropped_total if self._srtp is not None else 0
        return self._srtp_dropped_before + now

    def _set_srtp(self, keys: SrtpKeys | None) -> None:
        if self._srtp is not None:
            self._srtp_dropped_before += self._srtp.dropped_total
        self._srtp = SrtpContext(keys) if keys is not None else None

    @property
    def stats(self) -> RtpStats:
        if self._session is None:
            return _EMPTY_STATS
        return self._session.stats

    # --- receive path --------------------------------------------------------------------

    def _on_datagram(self, data: bytes, addr: Address) -> None:
        session = self._session
        if session is None or self._closed:
            self.dropped_before_start += 1
            return
        if self._srtp is not None:
            clear = self._srtp.unprotect(data)
            if isinstance(clear, SrtpDrop):
                self._srtp_refused(clear, addr)
                return
            data = clear
        try:
            events = session.receive_datagram(data, addr, self._loop.time())
            for event in events:
                if isinstance(event, AudioPacket):
                    self._record(0, event.arrival, event.payload)
                    if self._reflecting:
                        if self._sender is not None and self._sender.sending:
                            self._send_rtp(session.reflect(event, event.arrival))
                            self._record(1, event.arrival, event.payload)
                    else:
                        self.inbound.push(event)
                elif isinstance(event, DtmfReceived):
                    self._queue_dtmf(event)
                elif isinstance(event, SourceLatched):
                    self._log.info("rtp_latched", source=event.address, relatched=event.relatched)
        except Exception:
            # Peer faults are counted by the session and never raise; this is our own bug.
            # Log the first one, count the rest, and keep the call (and the loop) alive.
            self.internal_errors += 1
            if self.internal_errors == 1:
                self._log.exception("rtp_receive_failed")
        if self._timer is None:
            self._arm_rtcp()

    def _srtp_refused(self, drop: SrtpDrop, addr: Address) -> None:
        if self.srtp_dropped == 1:
            self._log.warning("srtp_dropped", reason=drop.reason, source=addr, error=drop.detail)
        if self.on_srtp_drop is not None:
            self.on_srtp_drop(drop)

    def loop_time(self) -> float:
        """The clock of this endpoint's packet times (the event loop's)."""
        return self._loop.time()

    def _record(self, channel: int, at: float, payload: bytes) -> None:
        codec = self.inbound.codec
        if self.recorder is not None and codec is not None:
            self.recorder(channel, at, codec.name, payload)

    def _queue_dtmf(self, event: DtmfReceived) -> None:
        if self.dtmf.full():
            # Drop the oldest: a listener that fell behind wants the latest digits.
            self.dtmf.get_nowait()
            self.dtmf_dropped += 1
        self.dtmf.put_nowait(event)

    # --- send path -----------------------------------------------------------------------

    def _send_rtp(self, data: bytes) -> None:
        session = self._session
        if session is None or self._closed:
            return
        remote = session.remote_address
        if remote is not None:
            if self._srtp is not None:
                data = self._srtp.protect_rtp(data)
            self._rtp.sendto(data, remote)
        if self._timer is None:
            self._arm_rtcp()

    def _send_rtcp(self, data: bytes) -> None:
        session = self._session
        if session is None:
            return
        remote = session.rtcp_address
        if remote is None:
            return
        transport = self._rtp if session.rtcp_mux else self._rtcp
        if self._srtp is not None:
            data = self._srtp.protect_rtcp(data)
        transport.sendto(data, remote)

    def _arm_rtcp(self) -> None:
        session = self._session
        if session is None or self._closed:
            return
        when = session.get_timer()
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_rtcp_timer)

    def _on_rtcp_timer(self) -> None:
        self._timer = None
        session = self._session
        if session is None or self._closed:
            return
        session.handle_timer(self._loop.time())
        for data in session.rtcp_to_send():
            self._send_rtcp(data)
        if self.on_stats is not None:
            try:
                self.on_stats(session.stats)
            except Exception:
                self._log.exception("rtp_on_stats_failed")
        self._arm_rtcp()

    # --- teardown ------------------------------------------------------------------------

    async def close(self) -> None:
        """Send BYE, stop the sender, end the inbound track and free the port pair."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        session = self._session
        if session is not None:
            self._send_rtcp(session.bye(self._loop.time()))
        if self._sender is not None:
            await self._sender.stop()
        self.inbound.stop()
        self._rtp.close()
        self._rtcp.close()
        self._ports.release(self.local_port)
        self._log.info("rtp_closed", stats=str(self.stats))


_EMPTY_STATS = RtpStats(
    packets_received=0,
    packets_sent=0,
    bytes_received=0,
    bytes_sent=0,
    packets_lost=0,
    fraction_lost=0.0,
    jitter_ms=0.0,
    dropped_unlatched=0,
    dropped_malformed=0,
    dropped_unknown_payload=0,
    dropped_out_of_sequence=0,
    latched_address=None,
    remote_ssrc=None,
    remote_fraction_lost=None,
    remote_packets_lost=None,
    remote_jitter_ms=None,
    rtt_ms=None,
    dtmf_received=0,
)
