"""Analyse RTP in a packet capture: per-stream counts, loss, jitter, decoded audio, echo check.

SIPp's own timing is 1 ms grained and says nothing about media, so tests capture the
loopback with tshark (:class:`loadtest.peers.TsharkCapture`) and judge the call from the
wire. Streams are keyed by (source, destination, SSRC): an echo that reflects packets
unchanged keeps the SSRC, so direction has to be part of the key.
"""

from __future__ import annotations

import ipaddress
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kefu.codecs.dtmf import EVENT_TO_DIGIT
from kefu.errors import RtpError
from kefu.rtp.packet import RtpPacket, is_rtcp
from loadtest.pcap import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
    PCMA,
    PCMU,
    SAMPLE_RATE,
    TELEPHONE_EVENT,
    Capture,
    Int16Array,
    g711_decode,
    read_capture,
)

Address = tuple[str, int]
# A stream whose timestamps claim more than this is corrupt, not long: refuse to allocate it.
_MAX_RENDER_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class UdpDatagram:
    """One UDP datagram seen in a capture."""

    arrival: float
    """Capture timestamp, seconds since the epoch."""
    src: Address
    """(IP, port) it came from (RFC 768 source port)."""
    dst: Address
    """(IP, port) it went to."""
    payload: bytes
    """UDP payload (RFC 768), trimmed to the UDP length field."""


@dataclass(frozen=True, slots=True)
class CapturedRtp:
    """An RTP packet as captured: its arrival and the fields analysis needs (RFC 3550 §5.1)."""

    arrival: float
    """Capture timestamp, seconds since the epoch."""
    payload_type: int
    """PT, 7 bits (RFC 3550 §5.1; RFC 3551 §6 for the static ones)."""
    seq: int
    """Sequence number, 16 bits (RFC 3550 §5.1)."""
    timestamp: int
    """Media timestamp, 32 bits, in clock-rate units (RFC 3550 §5.1)."""
    ssrc: int
    """Synchronisation source (RFC 3550 §5.1)."""
    marker: bool
    """M bit: talkspurt start for audio, event start for telephone-event (RFC 4733 §2.5.1.2)."""
    payload: bytes
    """Payload after header, CSRCs, extension and padding."""


def _ip_layer(frame: bytes, linktype: int) -> bytes | None:
    if linktype == LINKTYPE_ETHERNET:
        offset, ethertype = 14, struct.unpack_from("!H", frame, 12)[0] if len(frame) >= 14 else 0
        while ethertype in (0x8100, 0x88A8) and len(frame) >= offset + 4:  # VLAN tags
            ethertype = struct.unpack_from("!H", frame, offset + 2)[0]
            offset += 4
        return frame[offset:] if ethertype in (0x0800, 0x86DD) else None
    if linktype == LINKTYPE_LINUX_SLL:
        if len(frame) < 16 or struct.unpack_from("!H", frame, 14)[0] not in (0x0800, 0x86DD):
            return None
        return frame[16:]
    if linktype == LINKTYPE_NULL:
        return frame[4:]
    if linktype == LINKTYPE_RAW:
        return frame
    raise ValueError(f"unsupported capture link type {linktype}")


def _udp_from_ip(packet: bytes) -> tuple[str, str, bytes] | None:
    if not packet:
        return None
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        ihl = (packet[0] & 0x0F) * 4
        flags_frag = struct.unpack_from("!H", packet, 6)[0]
        if packet[9] != 17 or flags_frag & 0x3FFF:  # not UDP, or a fragment
            return None
        src = str(ipaddress.IPv4Address(packet[12:16]))
        dst = str(ipaddress.IPv4Address(packet[16:20]))
        return src, dst, packet[ihl:]
    if version == 6 and len(packet) >= 40 and packet[6] == 17:
        src = str(ipaddress.IPv6Address(packet[8:24]))
        dst = str(ipaddress.IPv6Address(packet[24:40]))
        return src, dst, packet[40:]
    return None


def udp_datagrams(capture: Capture | str | Path) -> list[UdpDatagram]:
    """Every unfragmented UDP datagram over IPv4/IPv6 in a capture, in capture order."""
    if not isinstance(capture, Capture):
        capture = read_capture(capture)
    out: list[UdpDatagram] = []
    for ts, frame in capture.frames:
        ip = _ip_layer(frame, capture.linktype)
        parsed = _udp_from_ip(ip) if ip is not None else None
        if parsed is None or len(parsed[2]) < 8:
            continue
        src_ip, dst_ip, udp = parsed
        sport, dport, length = struct.unpack_from("!HHH", udp)
        out.append(UdpDatagram(ts, (src_ip, sport), (dst_ip, dport), udp[8:length]))
    return out


def parse_rtp(data: bytes, arrival: float = 0.0) -> CapturedRtp | None:
    """Parse RTP (kefu.rtp.packet), or None for anything else on the wire.

    SIP cannot pass: its first byte is an upper-case ASCII letter, whose top bits read as
    version 1. RTCP is told apart by its packet types (RFC 5761 §4).
    """
    if is_rtcp(data):
        return None
    try:
        p = RtpPacket.parse(data)
    except RtpError:
        return None
    return CapturedRtp(
        arrival, p.payload_type, p.sequence_number, p.timestamp, p.ssrc, p.marker, p.payload
    )


@dataclass(frozen=True, slots=True)
class StreamKey:
    """Identity of one RTP stream in a capture."""

    src: Address
    """Sender (IP, port)."""
    dst: Address
    """Receiver (IP, port)."""
    ssrc: int
    """Synchronisation source (RFC 3550 §8)."""


@dataclass(frozen=True, slots=True)
class StreamStats:
    """What a receiver report would say about a stream, computed from the capture."""

    packets: int
    """Packets captured, duplicates included."""
    expected: int
    """Highest minus lowest extended sequence number plus one (RFC 3550 §6.4.1)."""
    lost: int
    """Expected minus distinct sequence numbers seen (never negative)."""
    duplicates: int
    """Packets whose sequence number had been seen before."""
    reordered: int
    """Packets that arrived after a packet with a higher sequence number."""
    jitter_ms: float
    """Interarrival jitter at the end of the stream (RFC 3550 §6.4.1, algorithm A.8)."""
    max_jitter_ms: float
    """Largest value the running jitter estimate reached."""
    payload_types: dict[int, int]
    """Packets per payload type."""
    duration_s: float
    """Last arrival minus first arrival."""


@dataclass
class RtpStream:
    """The packets of one stream, in arrival order."""

    key: StreamKey
    packets: list[CapturedRtp] = field(default_factory=list)

    @property
    def audio_payload_type(self) -> int:
        """The most frequent payload type other than telephone-event."""
        counts = Counter(p.payload_type for p in self.packets if p.payload_type != TELEPHONE_EVENT)
        return counts.most_common(1)[0][0] if counts else TELEPHONE_EVENT

    def stats(self, clock_rate: int = SAMPLE_RATE) -> StreamStats:
        """Counts, loss and jitter. Jitter ignores telephone-event packets: an event's packets
        all carry its start timestamp, which would read as enormous transit changes."""
        ext_seqs = _extend_seq([p.seq for p in self.packets])
        seen: set[int] = set()
        duplicates = reordered = 0
        highest = None
        for ext in ext_seqs:
            if ext in seen:
                duplicates += 1
            elif highest is not None and ext < highest:
                reordered += 1
            seen.add(ext)
            highest = ext if highest is None else max(highest, ext)
        expected = max(ext_seqs) - min(ext_seqs) + 1 if ext_seqs else 0

        jitter = max_jitter = 0.0
        prev_transit: float | None = None
        prev_ts = 0
        ts_unwrapped = 0
        audio_pt = self.audio_payload_type
        for p in self.packets:
            if p.payload_type != audio_pt:
                continue
            if prev_transit is not None:
                ts_unwrapped += _signed32(p.timestamp - prev_ts)
            prev_ts = p.timestamp
            transit = p.arrival * clock_rate - ts_unwrapped
            if prev_transit is not None:
                jitter += (abs(transit - prev_transit) - jitter) / 16
                max_jitter = max(max_jitter, jitter)
            prev_transit = transit
        arrivals = [p.arrival for p in self.packets]
        return StreamStats(
            packets=len(self.packets),
            expected=expected,
            lost=max(0, expected - len(seen)),
            duplicates=duplicates,
            reordered=reordered,
            jitter_ms=jitter * 1000 / clock_rate,
            max_jitter_ms=max_jitter * 1000 / clock_rate,
            payload_types=dict(Counter(p.payload_type for p in self.packets)),
            duration_s=max(arrivals) - min(arrivals) if arrivals else 0.0,
        )

    def _audio(self) -> list[CapturedRtp]:
        return [p for p in self.packets if p.payload_type in (PCMU, PCMA)]

    def pcm(self) -> Int16Array:
        """G.711 audio placed by RTP timestamp from the first audio packet; gaps are silence."""
        audio = self._audio()
        if not audio:
            return np.zeros(0, dtype=np.int16)
        base = audio[0].timestamp
        chunks = [
            (_signed32(p.timestamp - base), g711_decode(p.payload, p.payload_type)) for p in audio
        ]
        return _render(chunks)

    def pcm_by_arrival(
        self, t0: float, rate: int = SAMPLE_RATE, *, per_packet: bool = False
    ) -> Int16Array:
        """G.711 audio on the capture's clock, sample 0 being ``t0``: how to line two
        directions up for an echo check.

        By default packets are placed by RTP timestamp, shifted by the median transit
        (arrival minus timestamp) of the stream: what a receiver's jitter buffer plays, and
        robust to a few late packets. ``per_packet`` puts every packet at its own arrival
        instead, showing the jitter; sub-sample shifts between packets then lower the
        correlation of otherwise identical audio.
        """
        audio = self._audio()
        if not audio:
            return np.zeros(0, dtype=np.int16)
        arrivals = [int(round((p.arrival - t0) * rate)) for p in audio]
        if per_packet:
            offsets = arrivals
        else:
            rel = [_signed32(p.timestamp - audio[0].timestamp) for p in audio]
            transit = int(np.median([a - r for a, r in zip(arrivals, rel, strict=True)]))
            offsets = [transit + r for r in rel]
        decoded = [g711_decode(p.payload, p.payload_type) for p in audio]
        return _render(list(zip(offsets, decoded, strict=True)))

    def dtmf_digits(self) -> str:
        """RFC 4733 events, one digit per event (retransmitted ends counted once)."""
        digits = []
        seen: set[int] = set()
        for p in self.packets:
            if p.payload_type != TELEPHONE_EVENT or len(p.payload) < 4 or p.timestamp in seen:
                continue
            seen.add(p.timestamp)
            event = p.payload[0]
            digits.append(EVENT_TO_DIGIT.get(event, "?"))
        return "".join(digits)


def _signed32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _extend_seq(seqs: Iterable[int]) -> list[int]:
    """16-bit sequence numbers to a monotonic-where-possible integer line (RFC 3550 A.1):
    each is placed at the signed 16-bit distance from the highest seen so far."""
    out: list[int] = []
    highest: int | None = None
    for s in seqs:
        if highest is None:
            ext = s
        else:
            delta = (s - highest) & 0xFFFF
            ext = highest + (delta - 0x10000 if delta >= 0x8000 else delta)
        out.append(ext)
        highest = ext if highest is None else max(highest, ext)
    return out


def _render(chunks: list[tuple[int, Int16Array]]) -> Int16Array:
    chunks = [(off, pcm) for off, pcm in chunks if off >= 0]
    if not chunks:
        return np.zeros(0, dtype=np.int16)
    length = max(off + len(pcm) for off, pcm in chunks)
    if length > _MAX_RENDER_SECONDS * SAMPLE_RATE:
        raise ValueError(f"stream spans {length} samples; timestamps look corrupt")
    out = np.zeros(length, dtype=np.int16)
    for off, pcm in chunks:
        out[off : off + len(pcm)] = pcm
    return out


def rtp_streams(
    capture: Capture | str | Path, *, ports: Iterable[int] | None = None
) -> dict[StreamKey, RtpStream]:
    """Group the RTP packets of a capture by (src, dst, SSRC).

    ``ports`` keeps only datagrams whose source or destination port is listed; without it
    every UDP datagram that parses as RTP counts.
    """
    wanted = set(ports) if ports is not None else None
    streams: dict[StreamKey, RtpStream] = {}
    for d in udp_datagrams(capture):
        if wanted is not None and d.src[1] not in wanted and d.dst[1] not in wanted:
            continue
        pkt = parse_rtp(d.payload, d.arrival)
        if pkt is None:
            continue
        key = StreamKey(d.src, d.dst, pkt.ssrc)
        streams.setdefault(key, RtpStream(key)).packets.append(pkt)
    return streams


def find_stream(
    streams: dict[StreamKey, RtpStream], *, src_port: int | None = None, dst_port: int | None = None
) -> RtpStream:
    """The one stream with these ports (the one with most packets if several match)."""
    matches = [
        s
        for k, s in streams.items()
        if (src_port is None or k.src[1] == src_port) and (dst_port is None or k.dst[1] == dst_port)
    ]
    if not matches:
        raise LookupError(f"no RTP stream with src port {src_port} and dst port {dst_port}")
    return max(matches, key=lambda s: len(s.packets))


def echo_delay_and_similarity(
    sent_pcm: Int16Array,
    received_pcm: Int16Array,
    *,
    rate: int = SAMPLE_RATE,
    max_delay_ms: float = 2000.0,
) -> tuple[float, float]:
    """(delay in ms, Pearson correlation) of ``received_pcm`` as a delayed copy of ``sent_pcm``.

    The delay is the lag in [0, max_delay_ms] with the largest cross-correlation; the
    correlation is then measured over the overlap at that lag, so 1.0 means a bit-exact echo
    and anything under ~0.5 means the echo is not the sent audio. Both signals must share a
    timeline (e.g. :meth:`RtpStream.pcm_by_arrival` with one ``t0``).
    """
    s = np.asarray(sent_pcm, dtype=np.float64)
    r = np.asarray(received_pcm, dtype=np.float64)
    if len(s) == 0 or len(r) == 0:
        return 0.0, 0.0
    max_lag = min(int(max_delay_ms * rate / 1000), len(r) - 1)
    n = 1 << int(np.ceil(np.log2(len(s) + len(r))))
    xcorr = np.fft.irfft(np.fft.rfft(r, n) * np.conj(np.fft.rfft(s, n)), n)[: max_lag + 1]
    lag = int(np.argmax(xcorr))
    overlap = min(len(s), len(r) - lag)
    a, b = s[:overlap], r[lag : lag + overlap]
    if overlap < 2 or a.std() == 0 or b.std() == 0:
        return lag * 1000 / rate, 0.0
    return lag * 1000 / rate, float(np.corrcoef(a, b)[0, 1])
