"""RTCP packets (RFC 3550 §6.4–§6.6) and compound packets (§6.1), plus NTP time helpers.

API CONTRACT:

    parse_compound(data: bytes) -> list[RtcpPacket]      # raises kefu.errors.RtpError
    serialize_compound(packets: Iterable[RtcpPacket]) -> bytes
    RtcpPacket = SenderReport | ReceiverReport | Sdes | Bye | RtcpUnknown
        each with parse(data) for one packet and serialize() / bytes()
    ReportBlock(ssrc, fraction_lost, cumulative_lost, highest_sequence, jitter, lsr, dlsr)
    SdesChunk(ssrc, items) with .cname; Sdes.for_cname(ssrc, cname)
    ntp_from_unix(t) -> int (64-bit NTP), unix_from_ntp(ntp) -> float, ntp_middle32(ntp) -> int

Packet types we do not model (APP, RTPFB/PSFB feedback from WebRTC peers, XR) come back as
RtcpUnknown so a compound packet from a richer peer still parses.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kefu.errors import RtpError

RTCP_SR = 200
RTCP_RR = 201
RTCP_SDES = 202
RTCP_BYE = 203
SDES_END = 0
SDES_CNAME = 1

_HEADER = struct.Struct("!BBH")
_SR_INFO = struct.Struct("!IQIII")
_BLOCK = struct.Struct("!IB3sIIII")
_BLOCK_LENGTH = 24
_MAX_COUNT = 31

# Seconds from the NTP epoch (1900) to the Unix epoch (1970), RFC 868.
NTP_UNIX_OFFSET = 2_208_988_800


def ntp_from_unix(t: float) -> int:
    """64-bit NTP timestamp (§4: 32.32 fixed point seconds since 1900) for Unix time t."""
    seconds = int(t) + NTP_UNIX_OFFSET
    fraction = int((t - int(t)) * (1 << 32)) & 0xFFFFFFFF
    return ((seconds & 0xFFFFFFFF) << 32) | fraction


def unix_from_ntp(ntp: int) -> float:
    """Unix time for a 64-bit NTP timestamp (inverse of ntp_from_unix)."""
    return (ntp >> 32) - NTP_UNIX_OFFSET + (ntp & 0xFFFFFFFF) / (1 << 32)


def ntp_middle32(ntp: int) -> int:
    """The middle 32 bits of an NTP timestamp, the unit of LSR and DLSR (§6.4.1)."""
    return (ntp >> 16) & 0xFFFFFFFF


def _header(first_count: int, packet_type: int, body_length: int, padding: bool = False) -> bytes:
    # Length is in 32-bit words minus one, header included (§6.4.1).
    return _HEADER.pack(
        0x80 | (0x20 if padding else 0) | first_count, packet_type, (body_length + 4) // 4 - 1
    )


@dataclass(frozen=True, slots=True)
class ReportBlock:
    """One reception report block (RFC 3550 §6.4.1)."""

    ssrc: int
    """SSRC_n: the source this block reports on."""
    fraction_lost: int
    """Fraction of packets lost since the previous report, 8-bit fixed point (x/256)."""
    cumulative_lost: int
    """Cumulative packets lost, signed 24-bit (negative when duplicates arrived)."""
    highest_sequence: int
    """Extended highest sequence number received: cycles << 16 | highest seq (§6.4.1, A.1)."""
    jitter: int
    """Interarrival jitter in timestamp units (§6.4.1, A.8)."""
    lsr: int
    """Middle 32 bits of the last SR's NTP timestamp from this source, 0 if none."""
    dlsr: int
    """Delay since that SR, in 1/65536 s; 0 if no SR yet."""

    def __post_init__(self) -> None:
        if not 0 <= self.fraction_lost <= 255:
            raise ValueError(f"fraction_lost {self.fraction_lost} out of 8-bit range")
        if not -(1 << 23) <= self.cumulative_lost < (1 << 23):
            raise ValueError(f"cumulative_lost {self.cumulative_lost} out of 24-bit range")

    @classmethod
    def parse(cls, data: bytes, offset: int = 0) -> ReportBlock:
        if offset + _BLOCK_LENGTH > len(data):
            raise RtpError("RTCP report block truncated")
        ssrc, fraction, lost, highest, jitter, lsr, dlsr = _BLOCK.unpack_from(data, offset)
        cumulative = int.from_bytes(lost, "big", signed=True)
        return cls(ssrc, fraction, cumulative, highest, jitter, lsr, dlsr)

    def serialize(self) -> bytes:
        lost = self.cumulative_lost.to_bytes(3, "big", signed=True)
        return _BLOCK.pack(
            self.ssrc,
            self.fraction_lost,
            lost,
            self.highest_sequence,
            self.jitter,
            self.lsr,
            self.dlsr,
        )


def _parse_blocks(body: bytes, offset: int, count: int) -> tuple[ReportBlock, ...]:
    if offset + count * _BLOCK_LENGTH > len(body):
        raise RtpError(f"RTCP report count {count} overruns the packet")
    return tuple(ReportBlock.parse(body, offset + i * _BLOCK_LENGTH) for i in range(count))


def _check_blocks(reports: tuple[ReportBlock, ...]) -> None:
    if len(reports) > _MAX_COUNT:
        raise ValueError(f"{len(reports)} report blocks, at most 31 fit one packet")


@dataclass(frozen=True, slots=True)
class SenderReport:
    """SR: sender report (RFC 3550 §6.4.1), packet type 200."""

    ssrc: int
    """SSRC of the sender of this report."""
    ntp_timestamp: int
    """64-bit NTP wallclock time when the report was sent."""
    rtp_timestamp: int
    """The same instant in the sender's RTP timestamp units (for lip-sync and RTT)."""
    packet_count: int
    """Sender's packet count since starting transmission."""
    octet_count: int
    """Sender's payload octet count since starting transmission."""
    reports: tuple[ReportBlock, ...] = ()
    """Reception report blocks, at most 31."""

    def __post_init__(self) -> None:
        _check_blocks(self.reports)

    @classmethod
    def parse(cls, data: bytes) -> SenderReport:
        count, body = _unwrap(data, RTCP_SR)
        if len(body) < 24:
            raise RtpError(f"RTCP SR too short: {len(body)} body bytes, sender info needs 24")
        ssrc, ntp, rtp_ts, packets, octets = _SR_INFO.unpack_from(body)
        return cls(ssrc, ntp, rtp_ts, packets, octets, _parse_blocks(body, 24, count))

    def serialize(self) -> bytes:
        body = _SR_INFO.pack(
            self.ssrc, self.ntp_timestamp, self.rtp_timestamp, self.packet_count, self.octet_count
        ) + b"".join(r.serialize() for r in self.reports)
        return _header(len(self.reports), RTCP_SR, len(body)) + body

    def __bytes__(self) -> bytes:
        return self.serialize()


@dataclass(frozen=True, slots=True)
class ReceiverReport:
    """RR: receiver report (RFC 3550 §6.4.2), packet type 201."""

    ssrc: int
    """SSRC of the sender of this report."""
    reports: tuple[ReportBlock, ...] = ()
    """Reception report blocks, at most 31."""

    def __post_init__(self) -> None:
        _check_blocks(self.reports)

    @classmethod
    def parse(cls, data: bytes) -> ReceiverReport:
        count, body = _unwrap(data, RTCP_RR)
        if len(body) < 4:
            raise RtpError("RTCP RR too short for its SSRC")
        (ssrc,) = struct.unpack_from("!I", body)
        return cls(ssrc, _parse_blocks(body, 4, count))

    def serialize(self) -> bytes:
        body = struct.pack("!I", self.ssrc) + b"".join(r.serialize() for r in self.reports)
        return _header(len(self.reports), RTCP_RR, len(body)) + body

    def __bytes__(self) -> bytes:
        return self.serialize()


@dataclass(frozen=True, slots=True)
class SdesChunk:
    """One SDES chunk: an SSRC and its items (RFC 3550 §6.5)."""

    ssrc: int
    """SSRC/CSRC the items describe."""
    items: tuple[tuple[int, bytes], ...]
    """(item type, value) pairs; type 1 is CNAME (§6.5.1); values at most 255 octets."""

    @property
    def cname(self) -> str | None:
        for kind, value in self.items:
            if kind == SDES_CNAME:
                return value.decode("utf-8", "replace")
        return None

    def serialize(self) -> bytes:
        out = bytearray(struct.pack("!I", self.ssrc))
        for kind, value in self.items:
            if not 1 <= kind <= 255 or len(value) > 255:
                raise ValueError(f"SDES item type {kind} or length {len(value)} out of range")
            out += bytes([kind, len(value)]) + value
        # A null item ends the list, then nulls up to the next word (§6.5).
        out += bytes(4 - len(out) % 4)
        return bytes(out)


@dataclass(frozen=True, slots=True)
class Sdes:
    """SDES: source description (RFC 3550 §6.5), packet type 202."""

    chunks: tuple[SdesChunk, ...]
    """One chunk per described source, at most 31."""

    @classmethod
    def for_cname(cls, ssrc: int, cname: str) -> Sdes:
        return cls((SdesChunk(ssrc, ((SDES_CNAME, cname.encode("utf-8")),)),))

    @classmethod
    def parse(cls, data: bytes) -> Sdes:
        count, body = _unwrap(data, RTCP_SDES)
        chunks = []
        pos = 0
        for _ in range(count):
            if pos + 4 > len(body):
                raise RtpError(f"SDES chunk count {count} overruns the packet")
            (ssrc,) = struct.unpack_from("!I", body, pos)
            pos += 4
            items = []
            while True:
                if pos >= len(body):
                    raise RtpError("SDES chunk not terminated by a null item")
                kind = body[pos]
                if kind == SDES_END:
                    pos = (pos // 4 + 1) * 4  # skip the null and the padding to the word
                    break
                if pos + 2 > len(body) or pos + 2 + body[pos + 1] > len(body):
                    raise RtpError(f"SDES item type {kind} overruns the packet")
                length = body[pos + 1]
                items.append((kind, bytes(body[pos + 2 : pos + 2 + length])))
                pos += 2 + length
            chunks.append(SdesChunk(ssrc, tuple(items)))
        return cls(tuple(chunks))

    def serialize(self) -> bytes:
        if len(self.chunks) > _MAX_COUNT:
            raise ValueError(f"{len(self.chunks)} SDES chunks, at most 31 fit one packet")
        body = b"".join(c.serialize() for c in self.chunks)
        return _header(len(self.chunks), RTCP_SDES, len(body)) + body

    def __bytes__(self) -> bytes:
        return self.serialize()


@dataclass(frozen=True, slots=True)
class Bye:
    """BYE: goodbye (RFC 3550 §6.6), packet type 203."""

    sources: tuple[int, ...]
    """SSRCs leaving the session, at most 31."""
    reason: bytes = b""
    """Optional reason for leaving, at most 255 octets."""

    @classmethod
    def parse(cls, data: bytes) -> Bye:
        count, body = _unwrap(data, RTCP_BYE)
        if 4 * count > len(body):
            raise RtpError(f"BYE source count {count} overruns the packet")
        sources = struct.unpack_from(f"!{count}I", body)
        reason = b""
        pos = 4 * count
        if pos < len(body):
            length = body[pos]
            if pos + 1 + length > len(body):
                raise RtpError(f"BYE reason length {length} overruns the packet")
            reason = bytes(body[pos + 1 : pos + 1 + length])
        return cls(tuple(sources), reason)

    def serialize(self) -> bytes:
        if len(self.sources) > _MAX_COUNT or len(self.reason) > 255:
            raise ValueError("BYE has more than 31 sources or a reason over 255 octets")
        body = struct.pack(f"!{len(self.sources)}I", *self.sources)
        if self.reason:
            reason = bytes([len(self.reason)]) + self.reason
            body += reason + bytes(-len(reason) % 4)
        return _header(len(self.sources), RTCP_BYE, len(body)) + body

    def __bytes__(self) -> bytes:
        return self.serialize()


@dataclass(frozen=True, slots=True)
class RtcpUnknown:
    """An RTCP packet of a type we pass through uninterpreted (APP, feedback, XR)."""

    packet_type: int
    """PT field (§6.4.1), e.g. 204 APP, 205 RTPFB, 206 PSFB, 207 XR."""
    count: int
    """The 5-bit count/subtype field."""
    body: bytes
    """Everything after the 4-byte header, padding removed."""

    def serialize(self) -> bytes:
        pad = -len(self.body) % 4
        if not pad:
            return _header(self.count, self.packet_type, len(self.body)) + self.body
        # Padding must be flagged (P bit, count in the last octet, §6.4.1); bare zeros would
        # become part of the body the receiver reads.
        padding = bytes(pad - 1) + bytes([pad])
        return (
            _header(self.count, self.packet_type, len(self.body) + pad, True) + self.body + padding
        )

    def __bytes__(self) -> bytes:
        return self.serialize()


RtcpPacket = SenderReport | ReceiverReport | Sdes | Bye | RtcpUnknown


def _unwrap(data: bytes, expected_type: int) -> tuple[int, bytes]:
    """Check one packet's header; return (count field, body without header or padding)."""
    if len(data) < 4:
        raise RtpError(f"RTCP packet too short: {len(data)} bytes")
    first, packet_type, words = _HEADER.unpack_from(data)
    if first >> 6 != 2:
        raise RtpError(f"RTCP version {first >> 6}, expected 2")
    if packet_type != expected_type:
        raise RtpError(f"RTCP packet type {packet_type}, expected {expected_type}")
    length = 4 * (words + 1)
    if length > len(data):
        raise RtpError(f"RTCP length {length} exceeds the {len(data)} bytes received")
    end = length
    if first & 0x20:
        padding = data[length - 1]
        if padding == 0 or padding > length - 4:
            raise RtpError(f"bad RTCP padding length {padding}")
        end -= padding
    return first & 0x1F, bytes(data[4:end])


_PARSERS: dict[int, Callable[[bytes], RtcpPacket]] = {
    RTCP_SR: SenderReport.parse,
    RTCP_RR: ReceiverReport.parse,
    RTCP_SDES: Sdes.parse,
    RTCP_BYE: Bye.parse,
}


def parse_compound(data: bytes) -> list[RtcpPacket]:
    """Parse a compound RTCP packet (§6.1) into its packets; raise RtpError if malformed."""
    if len(data) < 4:
        raise RtpError(f"RTCP compound packet too short: {len(data)} bytes")
    packets: list[RtcpPacket] = []
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise RtpError(f"RTCP trailing {len(data) - pos} bytes are not a packet header")
        first, packet_type, words = _HEADER.unpack_from(data, pos)
        length = 4 * (words + 1)
        if pos + length > len(data):
            raise RtpError(f"RTCP packet at offset {pos} claims {length} bytes, overruns")
        chunk = data[pos : pos + length]
        parser = _PARSERS.get(packet_type)
        if parser is not None:
            packets.append(parser(chunk))
        else:
            if first >> 6 != 2:
                raise RtpError(f"RTCP version {first >> 6}, expected 2")
            if not 192 <= packet_type <= 223:
                raise RtpError(f"RTCP packet type {packet_type} outside 192..223")
            count, body = _unwrap(chunk, packet_type)
            packets.append(RtcpUnknown(packet_type, count, body))
        pos += length
    return packets


def serialize_compound(packets: Iterable[RtcpPacket]) -> bytes:
    """Concatenate packets into one compound packet (§6.1); the caller orders them."""
    return b"".join(p.serialize() for p in packets)
