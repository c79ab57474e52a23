"""RTP data packets (RFC 3550 §5.1, §5.3.1) and RTP/RTCP demultiplexing (RFC 5761 §4).

API CONTRACT:

    RtpPacket.parse(data: bytes) -> RtpPacket       # raises kefu.errors.RtpError
    bytes(pkt) / pkt.serialize() -> bytes
    RtpPacket(payload_type, sequence_number, timestamp, ssrc, payload=b"", marker=False,
              csrc=(), extension=None, padding=0)   frozen; version is always 2
    RtpExtension(profile: int, data: bytes)         the one header extension (§5.3.1)
    is_rtcp(data: bytes) -> bool                    True for RTCP on a muxed port
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kefu.errors import RtpError

RTP_VERSION = 2
HEADER_LENGTH = 12
_HEADER = struct.Struct("!BBHII")
_EXTENSION_HEADER = struct.Struct("!HH")
_MAX_CSRC = 15


def is_rtcp(data: bytes) -> bool:
    """Tell RTCP from RTP on a muxed port.

    RFC 5761 §4: RTCP packet types 192–223 land on RTP payload types 64–95 once the marker
    bit is masked off, and those payload types must not be used for RTP when muxing.
    """
    return len(data) >= 2 and 64 <= (data[1] & 0x7F) <= 95


@dataclass(frozen=True, slots=True)
class RtpExtension:
    """The single RTP header extension (RFC 3550 §5.3.1)."""

    profile: int
    """16-bit "defined by profile" field, e.g. 0xBEDE for RFC 8285 one-byte headers."""
    data: bytes
    """Extension body; its length must be a multiple of 4 (the wire length is in words)."""

    def __post_init__(self) -> None:
        if not 0 <= self.profile <= 0xFFFF:
            raise ValueError(f"extension profile {self.profile} out of 16-bit range")
        if len(self.data) % 4:
            raise ValueError(f"extension data length {len(self.data)} not a multiple of 4")
        if len(self.data) // 4 > 0xFFFF:
            raise ValueError("extension data longer than 65535 words")


@dataclass(frozen=True, slots=True)
class RtpPacket:
    """One RTP data packet (RFC 3550 §5.1)."""

    payload_type: int
    """PT, 7 bits (§5.1); static values in RFC 3551 §6, dynamic 96–127."""
    sequence_number: int
    """16-bit sequence number, +1 per packet, random start (§5.1)."""
    timestamp: int
    """32-bit sampling instant of the first octet, in clock-rate ticks (§5.1)."""
    ssrc: int
    """32-bit synchronization source identifier (§5.1, §8)."""
    payload: bytes = b""
    """Payload octets, padding excluded."""
    marker: bool = False
    """M bit (§5.1): for audio, the first packet of a talkspurt (RFC 3551 §4.1)."""
    csrc: tuple[int, ...] = field(default=())
    """Contributing sources, at most 15 (§5.1 CC field)."""
    extension: RtpExtension | None = None
    """Header extension when the X bit is set (§5.3.1)."""
    padding: int = 0
    """Padding octets after the payload, the last holding the count (§5.1 P bit); 0 = none."""
    version: int = RTP_VERSION
    """Always 2 (§5.1 V field); anything else is rejected by parse()."""

    def __post_init__(self) -> None:
        if self.version != RTP_VERSION:
            raise ValueError(f"RTP version must be 2, not {self.version}")
        if not 0 <= self.payload_type <= 0x7F:
            raise ValueError(f"payload type {self.payload_type} out of 7-bit range")
        if not 0 <= self.sequence_number <= 0xFFFF:
            raise ValueError(f"sequence number {self.sequence_number} out of 16-bit range")
        if not 0 <= self.timestamp <= 0xFFFFFFFF:
            raise ValueError(f"timestamp {self.timestamp} out of 32-bit range")
        if not 0 <= self.ssrc <= 0xFFFFFFFF:
            raise ValueError(f"SSRC {self.ssrc} out of 32-bit range")
        if len(self.csrc) > _MAX_CSRC:
            raise ValueError(f"{len(self.csrc)} CSRCs, at most 15 allowed")
        if not 0 <= self.padding <= 255:
            raise ValueError(f"padding {self.padding} out of range 0..255")

    @classmethod
    def parse(cls, data: bytes) -> RtpPacket:
        """Parse one RTP packet; raise RtpError saying what is wrong."""
        if len(data) < HEADER_LENGTH:
            raise RtpError(f"RTP packet too short: {len(data)} bytes, header needs 12")
        first, second, seq, timestamp, ssrc = _HEADER.unpack_from(data)
        version = first >> 6
        if version != RTP_VERSION:
            raise RtpError(f"RTP version {version}, expected 2")
        has_padding = bool(first & 0x20)
        has_extension = bool(first & 0x10)
        csrc_count = first & 0x0F
        pos = HEADER_LENGTH + 4 * csrc_count
        if pos > len(data):
            raise RtpError(f"CSRC count {csrc_count} overruns a {len(data)}-byte packet")
        csrc = struct.unpack_from(f"!{csrc_count}I", data, HEADER_LENGTH)

        extension = None
        if has_extension:
            if pos + 4 > len(data):
                raise RtpError("header extension flagged but packet ends before it")
            profile, words = _EXTENSION_HEADER.unpack_from(data, pos)
            pos += 4
            if pos + 4 * words > len(data):
                raise RtpError(f"header extension length {words} words overruns the packet")
            extension = RtpExtension(profile, bytes(data[pos : pos + 4 * words]))
            pos += 4 * words

        end = len(data)
        padding = 0
        if has_padding:
            padding = data[-1]
            # The count includes itself, so 0 is meaningless and more than the space left
            # after the header would eat into it.
            if padding == 0 or pos + padding > end:
                raise RtpError(f"bad padding length {padding} for {end - pos} payload bytes")
            end -= padding

        return cls(
            payload_type=second & 0x7F,
            sequence_number=seq,
            timestamp=timestamp,
            ssrc=ssrc,
            payload=bytes(data[pos:end]),
            marker=bool(second & 0x80),
            csrc=tuple(csrc),
            extension=extension,
            padding=padding,
        )

    def serialize(self) -> bytes:
        """Encode to wire bytes; padding octets are zeros with the count last (§5.1)."""
        first = (
            (self.version << 6)
            | (0x20 if self.padding else 0)
            | (0x10 if self.extension is not None else 0)
            | len(self.csrc)
        )
        second = (0x80 if self.marker else 0) | self.payload_type
        parts = [_HEADER.pack(first, second, self.sequence_number, self.timestamp, self.ssrc)]
        if self.csrc:
            parts.append(struct.pack(f"!{len(self.csrc)}I", *self.csrc))
        if self.extension is not None:
            ext = self.extension
            parts.append(_EXTENSION_HEADER.pack(ext.profile, len(ext.data) // 4))
            parts.append(ext.data)
        parts.append(self.payload)
        if self.padding:
            parts.append(bytes(self.padding - 1) + bytes([self.padding]))
        return b"".join(parts)

    def __bytes__(self) -> bytes:
        return self.serialize()
