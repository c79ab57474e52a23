"""Sans-IO RTP/RTCP session for one call leg (RFC 3550, RFC 4733 events, RFC 5761 mux).

API CONTRACT:

    s = RtpSession(payload_type=0, clock_rate=8000, dtmf_payload_type=101,
                   remote=("192.0.2.1", 4000), latching="sdp_host")
    s.receive_datagram(data, addr, now) -> list[RtpEvent]   # never raises on peer input
        RtpEvent = AudioPacket | DtmfReceived | RtcpReceived | SourceLatched
    s.packetize(payload, timestamp_step, now, marker=False) -> bytes
    s.advance_timestamp(ticks)                  # RTP time passing with nothing sent
    s.dtmf_datagrams(digit, now=None, duration_ms=160) -> list[bytes]  # send one per ptime
    s.get_timer() -> float | None; s.handle_timer(now); s.rtcp_to_send() -> list[bytes]
    s.bye(now) -> bytes                         # final compound: report + SDES + BYE
    s.set_remote(remote, remote_rtcp=None); s.set_codec(payload_type, clock_rate, ...)
    s.remote_address / s.rtcp_address -> where to send RTP / RTCP now
    s.stats -> RtpStats

Source latching (symmetric RTP, cf. RFC 4961, and the usual B2BUA practice):

* ``sdp_host`` (default): like ``symmetric``, but only packets from the host (IP) the SDP
  named may latch or re-latch; the port may differ (a NAT in front of that host picks its
  own). Anyone else on the network gets nothing: not the first latch (a packet racing the
  caller's first one) and not a re-latch after the caller falls silent. With no SDP address
  (none signalled yet) nothing latches.
* ``symmetric``: the first parseable RTP packet with a negotiated payload type, from any
  address, fixes the peer's media address; we also send there, which is what gets media
  through a NAT when the caller's SDP names a private address it cannot be reached at. Any
  host can race the caller's first packet or take over a silent call: opt in only when
  callers' SDP addresses are known to be unreachable.
* ``strict``: the exact SDP address (host and port) is the only accepted source, ever.
* Packets from any other address are dropped and counted (``dropped_unlatched``).
* Re-latching (``sdp_host`` and ``symmetric``) needs BOTH a new SSRC and ``relatch_after``
  seconds of silence from the latched address. A changed source with the old one quiet is
  what a real media move looks like (the VCC re-anchors media after a transfer without a
  re-INVITE, a NAT rebinds the port); an injected stream while the real peer is still
  talking (the "RTP bleed" attack) is not, and an attacker replaying the real SSRC from
  elsewhere gets nothing either.
* set_remote() (a re-INVITE with a new address) unlatches; strict mode latches the new one.

RTCP is accepted from the latched host (any port: without rtcp-mux it comes from the odd
port). Receive statistics follow RFC 3550 A.1/A.3/A.8 (see reception.py); jitter is computed
over audio packets only, because RFC 4733 event packets repeat one timestamp for the whole
event and would read as huge jitter.
"""

from __future__ import annotations

import ipaddress
import random
import struct
import time
from dataclasses import dataclass
from typing import Literal

from kefu.codecs.dtmf import DtmfReceiver, dtmf_packets
from kefu.errors import CodecError, RtpError
from kefu.rtp.packet import RtpPacket, is_rtcp
from kefu.rtp.reception import SourceStatistics
from kefu.rtp.rtcp import (
    Bye,
    ReceiverReport,
    ReportBlock,
    RtcpPacket,
    Sdes,
    SenderReport,
    ntp_from_unix,
    ntp_middle32,
    parse_compound,
    serialize_compound,
)

Address = tuple[str, int]
Latching = Literal["sdp_host", "symmetric", "strict"]
LATCHING_MODES: tuple[Latching, ...] = ("sdp_host", "symmetric", "strict")
"""The accepted ``latching`` values, the default first (see the module docstring)."""

RTCP_INTERVAL = 5.0  # RFC 3550 §6.2 minimum; one call's RTCP bandwidth never exceeds it
_RTP_HEADER = struct.Struct("!BBHII")
_MAX_RTCP_QUEUED = 8


@dataclass(frozen=True, slots=True)
class AudioPacket:
    """An audio payload from the latched source, in arrival order (not yet de-jittered)."""

    seq: int
    """RTP sequence number (RFC 3550 §5.1)."""
    timestamp: int
    """RTP timestamp in codec clock ticks (§5.1)."""
    payload: bytes
    """Encoded audio, one frame for the codecs we negotiate."""
    marker: bool
    """M bit: start of a talkspurt (RFC 3551 §4.1)."""
    arrival: float
    """Local receive time, the `now` the datagram was passed with."""


@dataclass(frozen=True, slots=True)
class DtmfReceived:
    """A completed telephone-event digit (RFC 4733 §2.3)."""

    digit: str
    """'0'-'9', '*', '#', 'A'-'D' (RFC 4733 §3.2 events 0–15)."""
    timestamp: int
    """RTP timestamp of the event start (§2.5.1.1)."""
    arrival: float
    """Local receive time of the packet that completed the event."""


@dataclass(frozen=True, slots=True)
class RtcpReceived:
    """An RTCP compound packet from the peer (RFC 3550 §6.1), already applied to stats."""

    packets: tuple[RtcpPacket, ...]
    """The packets of the compound, in wire order."""
    arrival: float
    """Local receive time."""


@dataclass(frozen=True, slots=True)
class SourceLatched:
    """The session (re-)latched to a media source address."""

    address: Address
    """The peer's RTP source address we now accept and send to."""
    ssrc: int
    """SSRC of the packet that caused the latch (RFC 3550 §8)."""
    relatched: bool
    """True when this replaced an earlier latch (see the module docstring)."""


RtpEvent = AudioPacket | DtmfReceived | RtcpReceived | SourceLatched


@dataclass(frozen=True, slots=True)
class RtpStats:
    """A snapshot of one session's counters (RFC 3550 §6.4 and A.3/A.8 terms)."""

    packets_received: int
    """RTP packets accepted from the latched source (§6.4.1 'received')."""
    packets_sent: int
    """RTP packets we sent (§6.4.1 sender's packet count)."""
    bytes_received: int
    """Payload octets received (headers and padding excluded, like §6.4.1's octet count)."""
    bytes_sent: int
    """Payload octets sent (§6.4.1 sender's octet count)."""
    packets_lost: int
    """Cumulative lost: expected - received (A.3); may go negative on duplicates."""
    fraction_lost: float
    """Fraction lost over the last RTCP interval, 0..1 (A.3); the current one before any."""
    jitter_ms: float
    """Interarrival jitter (A.8), converted from timestamp units to milliseconds."""
    dropped_unlatched: int
    """Valid RTP/RTCP packets dropped because they came from a non-latched address."""
    dropped_malformed: int
    """Datagrams that failed RTP/RTCP parsing or carried an undecodable event."""
    dropped_unknown_payload: int
    """Packets from the latched source with a payload type we did not negotiate."""
    dropped_out_of_sequence: int
    """Packets discarded by A.1's resync probe (a jump of over 3000 sequence numbers)."""
    latched_address: Address | None
    """The peer's media address we latched to, None before the first packet."""
    remote_ssrc: int | None
    """SSRC of the latched source."""
    remote_fraction_lost: float | None
    """The peer's view of our stream: fraction lost from its last report block (§6.4.1)."""
    remote_packets_lost: int | None
    """The peer's cumulative lost count for our stream."""
    remote_jitter_ms: float | None
    """The peer's interarrival jitter for our stream, in ms."""
    rtt_ms: float | None
    """Round-trip time from the peer's LSR/DLSR (§6.4.1), None until it echoes an SR."""
    dtmf_received: int
    """Telephone-event digits completed."""


def _digit_of(result: object) -> str:
    # The codec's receiver may hand back a plain str or a small dataclass with .digit.
    digit = getattr(result, "digit", result)
    return str(digit)


def _host_key(host: str) -> str:
    """``host`` in one canonical spelling, so the SDP text and the socket's report compare
    equal (``::FFFF:192.0.2.1`` from a dual-stack socket is ``192.0.2.1``; ``0:0::1`` is
    ``::1``). Names that are not IP literals compare as written."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


class RtpSession:
    """One call leg's RTP state: latching, receive stats, sequencing, RTCP reports."""

    def __init__(
        self,
        *,
        payload_type: int,
        clock_rate: int,
        dtmf_payload_type: int | None = None,
        dtmf_clock_rate: int | None = None,
        remote: Address | None = None,
        remote_rtcp: Address | None = None,
        rtcp_mux: bool = False,
        latching: Latching = "sdp_host",
        relatch_after: float = 2.0,
        ptime_ms: int = 20,
        cname: str | None = None,
        ssrc: int | None = None,
        rng: random.Random | None = None,
        wall_offset: float | None = None,
        rtcp_interval: float = RTCP_INTERVAL,
    ) -> None:
        if latching not in LATCHING_MODES:
            raise ValueError(
                f"latching must be one of {', '.join(LATCHING_MODES)}, not {latching!r}"
            )
        self._rng = rng or random.Random()
        self.ssrc = ssrc if ssrc is not None else self._rng.getrandbits(32)
        self.cname = cname or f"kefu-{self.ssrc:08x}"
        self.latching: Latching = latching
        self.relatch_after = relatch_after
        self.rtcp_mux = rtcp_mux
        self.ptime_ms = ptime_ms
        self.rtcp_interval = rtcp_interval
        # NTP time = wall_offset + now; tests pin it, production derives it once from the
        # wall clock so `now` can stay monotonic.
        self._wall_offset = (
            wall_offset if wall_offset is not None else time.time() - time.monotonic()
        )
        self._source: SourceStatistics | None = None
        self.set_codec(payload_type, clock_rate, dtmf_payload_type, dtmf_clock_rate)

        self._remote = remote
        self._remote_host = _host_key(remote[0]) if remote is not None else None
        self._remote_rtcp = remote_rtcp
        self._latched: Address | None = remote if latching == "strict" else None
        self._latch_announced = False
        self._last_from_latched = 0.0
        self._rtcp_source: Address | None = None

        self._source_ssrc: int | None = None
        self._peer_lsr = 0
        self._peer_sr_at = 0.0
        self._last_fraction: float | None = None
        self._remote_block: ReportBlock | None = None
        self._rtt: float | None = None

        self._seq = self._rng.getrandbits(16)
        self._timestamp = self._rng.getrandbits(32)
        self._reflect_offsets: tuple[int, int] | None = None
        self._last_sent_ts = self._timestamp
        self._last_sent_at: float | None = None
        self._sent_since_report = False

        self._next_rtcp: float | None = None
        self._rtcp_out: list[bytes] = []

        self._packets_received = 0
        self._bytes_received = 0
        self._packets_sent = 0
        self._bytes_sent = 0
        self._dropped_unlatched = 0
        self._dropped_malformed = 0
        self._dropped_unknown = 0
        self._dropped_sequence = 0
        self._dtmf_count = 0

    # --- configuration -------------------------------------------------------------------

    def set_codec(
        self,
        payload_type: int,
        clock_rate: int,
        dtmf_payload_type: int | None = None,
        dtmf_clock_rate: int | None = None,
    ) -> None:
        """Apply a (re-)negotiated codec; jitter history restarts in the new clock units."""
        self.payload_type = payload_type
        self.clock_rate = clock_rate
        self.dtmf_payload_type = dtmf_payload_type
        self.dtmf_clock_rate = dtmf_clock_rate or clock_rate
        self._dtmf_rx = DtmfReceiver(self.dtmf_clock_rate)
        if self._source is not None:
            self._source.reset_jitter(clock_rate)

    def set_remote(self, remote: Address | None, remote_rtcp: Address | None = None) -> None:
        """A new SDP address (re-INVITE): drop the latch; strict mode latches the new one."""
        self._remote = remote
        self._remote_host = _host_key(remote[0]) if remote is not None else None
        self._remote_rtcp = remote_rtcp
        self._latched = remote if self.latching == "strict" else None
        self._latch_announced = False
        self._rtcp_source = None

    @property
    def sdp_address(self) -> Address | None:
        """The peer's media address as signalled in SDP (before any latching)."""
        return self._remote

    @property
    def remote_address(self) -> Address | None:
        """Where RTP goes: the latched source (symmetric RTP), else the SDP address."""
        return self._latched or self._remote

    @property
    def rtcp_address(self) -> Address | None:
        """Where RTCP goes: muxed with RTP, the SDP a=rtcp, where the peer's RTCP came from,
        or the RTP port + 1 (RFC 3550 §11)."""
        rtp = self.remote_address
        if self.rtcp_mux:
            return rtp
        if self._remote_rtcp is not None:
            return self._remote_rtcp
        if self._rtcp_source is not None:
            return self._rtcp_source
        if rtp is None:
            return None
        return (rtp[0], rtp[1] + 1)

    # --- receive -------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> list[RtpEvent]:
        """Feed one datagram from the socket; peer faults are counted, never raised."""
        addr = (addr[0], addr[1])  # IPv6 sockets report 4-tuples
        self._arm_timer(now)
        if is_rtcp(data):
            return self._receive_rtcp(data, addr, now)
        try:
            packet = RtpPacket.parse(data)
        except RtpError:
            self._dropped_malformed += 1
            return []
        known = packet.payload_type in (self.payload_type, self.dtmf_payload_type)
        events: list[RtpEvent] = []
        if self._latched is None:
            if self.latching == "strict" or not known or not self._may_latch(addr):
                self._dropped_unlatched += 1
                return []
            self._latch(addr, packet.ssrc, events)
        elif addr != self._latched:
            if not (
                self.latching != "strict"
                and known
                and self._may_latch(addr)
                and packet.ssrc != self._source_ssrc
                and now - self._last_from_latched >= self.relatch_after
            ):
                self._dropped_unlatched += 1
                return []
            self._latch(addr, packet.ssrc, events)
        elif not self._latch_announced:
            # strict mode: the latch was set from SDP; announce it on first media.
            self._latch_announced = True
            events.append(SourceLatched(addr, packet.ssrc, relatched=False))
        self._last_from_latched = now

        if packet.ssrc != self._source_ssrc or self._source is None:
            # A new SSRC is a new source (RFC 3550 §8.2): its statistics start over.
            self._source_ssrc = packet.ssrc
            self._source = SourceStatistics(self.clock_rate, packet.sequence_number)
            self._peer_lsr = 0
            self._last_fraction = None
        if not self._source.update_seq(packet.sequence_number):
            self._dropped_sequence += 1
            return events
        self._packets_received += 1
        self._bytes_received += len(packet.payload)

        if packet.payload_type == self.payload_type:
            self._source.update_jitter(packet.timestamp, now)
            events.append(
                AudioPacket(
                    packet.sequence_number,
                    packet.timestamp,
                    packet.payload,
                    packet.marker,
                    now,
                )
            )
        elif packet.payload_type == self.dtmf_payload_type:
            try:
                result = self._dtmf_rx.feed(packet.timestamp, packet.payload, packet.marker)
            except (CodecError, ValueError):
                self._dropped_malformed += 1
                return events
            if result is not None:
                self._dtmf_count += 1
                events.append(DtmfReceived(_digit_of(result), packet.timestamp, now))
        else:
            self._dropped_unknown += 1
        return events

    def _may_latch(self, addr: Address) -> bool:
        """Whether ``addr`` may become the latched source (strict mode aside)."""
        if self.latching == "symmetric":
            return True
        return self._remote_host is not None and _host_key(addr[0]) == self._remote_host

    def _latch(self, addr: Address, ssrc: int, events: list[RtpEvent]) -> None:
        relatched = self._latch_announced
        self._latched = addr
        self._latch_announced = True
        self._rtcp_source = None
        events.append(SourceLatched(addr, ssrc, relatched=relatched))

    def _receive_rtcp(self, data: bytes, addr: Address, now: float) -> list[RtpEvent]:
        expected = self._latched or self._remote
        if expected is not None and addr[0] != expected[0]:
            self._dropped_unlatched += 1
            return []
        try:
            packets = parse_compound(data)
        except RtpError:
            self._dropped_malformed += 1
            return []
        if self._latched is not None and not self.rtcp_mux:
            self._rtcp_source = addr
        for packet in packets:
            if isinstance(packet, SenderReport):
                if packet.ssrc == self._source_ssrc:
                    self._peer_lsr = ntp_middle32(packet.ntp_timestamp)
                    self._peer_sr_at = now
                self._apply_blocks(packet.reports, now)
            elif isinstance(packet, ReceiverReport):
                self._apply_blocks(packet.reports, now)
        return [RtcpReceived(tuple(packets), now)]

    def _apply_blocks(self, blocks: tuple[ReportBlock, ...], now: float) -> None:
        for block in blocks:
            if block.ssrc != self.ssrc:
                continue
            self._remote_block = block
            if block.lsr:
                arrival = ntp_middle32(self._ntp(now))
                rtt = ((arrival - block.lsr - block.dlsr) % (1 << 32)) / 65536.0
                # A wrapped or forged value shows up as a huge RTT; keep the last sane one.
                if rtt < 60.0:
                    self._rtt = rtt

    # --- send ----------------------------------------------------------------------------

    def packetize(
        self, payload: bytes, timestamp_step: int, now: float, marker: bool = False
    ) -> bytes:
        """Wrap one encoded frame; the next packet's timestamp is this one's + step."""
        data = self._build(self.payload_type, marker, self._timestamp, payload)
        self._last_sent_ts = self._timestamp
        self._last_sent_at = now
        self._timestamp = (self._timestamp + timestamp_step) & 0xFFFFFFFF
        self._arm_timer(now)
        return data

    def reflect(self, packet: AudioPacket, now: float) -> bytes:
        """Send ``packet``'s payload straight back under our SSRC (echo as a relay would).

        Sequence numbers and timestamps keep the caller's spacing, offset into our own
        number space, so gaps and jitter the caller caused stay visible to it, and kefu adds
        no pacing delay or timer of its own.
        """
        if self._reflect_offsets is None:
            self._reflect_offsets = (
                (self._seq - packet.seq) & 0xFFFF,
                (self._timestamp - packet.timestamp) & 0xFFFFFFFF,
            )
        seq_off, ts_off = self._reflect_offsets
        self._seq = (packet.seq + seq_off) & 0xFFFF
        timestamp = (packet.timestamp + ts_off) & 0xFFFFFFFF
        data = self._build(self.payload_type, packet.marker, timestamp, packet.payload)
        self._last_sent_ts = timestamp
        self._last_sent_at = now
        self._timestamp = timestamp
        self._arm_timer(now)
        return data

    def advance_timestamp(self, ticks: int) -> None:
        """Let RTP time pass without a packet (source stalled, hold): keeps peer jitter sane."""
        self._timestamp = (self._timestamp + ticks) & 0xFFFFFFFF

    def dtmf_datagrams(
        self, digit: str, now: float | None = None, duration_ms: int = 160
    ) -> list[bytes]:
        """RFC 4733 packets for one digit, to be sent one per ptime instead of audio.

        They share the event's start timestamp (§2.5.1.1); the media timestamp then jumps
        past the slots they occupy so the audio that follows stays on wall time.
        """
        if self.dtmf_payload_type is None:
            raise ValueError("no telephone-event payload type was negotiated")
        start = self._timestamp
        out = []
        for event, marker in dtmf_packets(
            digit,
            clock_rate=self.dtmf_clock_rate,
            duration_ms=duration_ms,
            packet_ms=self.ptime_ms,
        ):
            out.append(self._build(self.dtmf_payload_type, marker, start, bytes(event)))
        step = self.clock_rate * self.ptime_ms // 1000
        self._timestamp = (start + step * len(out)) & 0xFFFFFFFF
        if now is not None:
            self._last_sent_ts = start
            self._last_sent_at = now
            self._arm_timer(now)
        return out

    def _build(self, payload_type: int, marker: bool, timestamp: int, payload: bytes) -> bytes:
        # Packed by hand: this runs 50 times a second per call, RtpPacket validation does not
        # need to. tests/rtp checks it against RtpPacket.parse().
        header = _RTP_HEADER.pack(
            0x80, (0x80 if marker else 0) | payload_type, self._seq, timestamp, self.ssrc
        )
        self._seq = (self._seq + 1) & 0xFFFF
        self._packets_sent += 1
        self._bytes_sent += len(payload)
        self._sent_since_report = True
        return header + payload

    # --- RTCP timer ----------------------------------------------------------------------

    def _arm_timer(self, now: float) -> None:
        if self._next_rtcp is None:
            # §6.2: the first report comes after half the minimum interval.
            self._next_rtcp = now + self._interval() / 2

    def _interval(self) -> float:
        return self.rtcp_interval * self._rng.uniform(0.5, 1.5)

    def get_timer(self) -> float | None:
        """When handle_timer() wants to run next (None until any media flowed)."""
        return self._next_rtcp

    def handle_timer(self, now: float) -> None:
        if self._next_rtcp is None or now < self._next_rtcp:
            return
        self._next_rtcp = now + self._interval()
        if len(self._rtcp_out) < _MAX_RTCP_QUEUED:
            self._rtcp_out.append(serialize_compound(self._report(now)))

    def rtcp_to_send(self) -> list[bytes]:
        """Drain queued RTCP compound packets."""
        out, self._rtcp_out = self._rtcp_out, []
        return out

    def bye(self, now: float, reason: str = "") -> bytes:
        """The last compound packet of the session: report, SDES, BYE (§6.1, §6.6)."""
        packets = self._report(now)
        packets.append(Bye((self.ssrc,), reason.encode("utf-8")))
        return serialize_compound(packets)

    def _ntp(self, now: float) -> int:
        return ntp_from_unix(self._wall_offset + now)

    def _report(self, now: float) -> list[RtcpPacket]:
        blocks: tuple[ReportBlock, ...] = ()
        source = self._source
        if source is not None and self._source_ssrc is not None:
            fraction = source.interval_fraction_lost()
            self._last_fraction = fraction / 256.0
            dlsr = int((now - self._peer_sr_at) * 65536) if self._peer_lsr else 0
            blocks = (
                ReportBlock(
                    ssrc=self._source_ssrc,
                    fraction_lost=fraction,
                    cumulative_lost=source.cumulative_lost_24,
                    highest_sequence=source.extended_highest & 0xFFFFFFFF,
                    jitter=int(source.jitter),
                    lsr=self._peer_lsr,
                    dlsr=dlsr & 0xFFFFFFFF,
                ),
            )
        first: RtcpPacket
        if self._sent_since_report and self._last_sent_at is not None:
            elapsed = int((now - self._last_sent_at) * self.clock_rate)
            first = SenderReport(
                ssrc=self.ssrc,
                ntp_timestamp=self._ntp(now),
                rtp_timestamp=(self._last_sent_ts + elapsed) & 0xFFFFFFFF,
                packet_count=self._packets_sent & 0xFFFFFFFF,
                octet_count=self._bytes_sent & 0xFFFFFFFF,
                reports=blocks,
            )
        else:
            first = ReceiverReport(self.ssrc, blocks)
        self._sent_since_report = False
        return [first, Sdes.for_cname(self.ssrc, self.cname)]

    # --- stats ---------------------------------------------------------------------------

    @property
    def stats(self) -> RtpStats:
        source = self._source
        block = self._remote_block
        fraction = 0.0
        if source is not None:
            fraction = (
                self._last_fraction
                if self._last_fraction is not None
                else source.peek_fraction_lost()
            )
        return RtpStats(
            packets_received=self._packets_received,
            packets_sent=self._packets_sent,
            bytes_received=self._bytes_received,
            bytes_sent=self._bytes_sent,
            packets_lost=source.cumulative_lost if source else 0,
            fraction_lost=fraction,
            jitter_ms=source.jitter_ms if source else 0.0,
            dropped_unlatched=self._dropped_unlatched,
            dropped_malformed=self._dropped_malformed,
            dropped_unknown_payload=self._dropped_unknown,
            dropped_out_of_sequence=self._dropped_sequence,
            latched_address=self._latched if self._latch_announced else None,
            remote_ssrc=self._source_ssrc,
            remote_fraction_lost=block.fraction_lost / 256.0 if block else None,
            remote_packets_lost=block.cumulative_lost if block else None,
            remote_jitter_ms=1000.0 * block.jitter / self.clock_rate if block else None,
            rtt_ms=self._rtt * 1000.0 if self._rtt is not None else None,
            dtmf_received=self._dtmf_count,
        )
