"""SDP building blocks: the value types an SDP body is made of, below the session level.

Here live the types for single lines (``o=`` :class:`Origin`, ``c=`` :class:`Connection`,
``b=`` :class:`Bandwidth`, ``t=`` :class:`Timing`, ``a=rtpmap`` :class:`RtpMap`), the media
section (:class:`MediaDescription`, one ``m=`` line and what follows it), the attribute
lookups shared with the session level, the RFC 3551 static payload table and the helpers that
write these lines back out. The whole body, :class:`~kefu.sip.sdp.SessionDescription`, and the
parser that builds all of these live in :mod:`kefu.sip.sdp`.

Attribute helpers (``rtpmaps()``, ``fmtp()``, ``ptime()``...) are lenient: a malformed
``a=rtpmap`` is skipped rather than failing the whole body, since RFC 4475 bodies carry
``a=rtpmap:31 LPC`` and must still negotiate their audio.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kefu.sip.sdp import SessionDescription


Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
DIRECTIONS: tuple[Direction, ...] = ("sendrecv", "sendonly", "recvonly", "inactive")

DIGITS = re.compile(r"[0-9]{1,20}")
"""A numeric SDP field: 1 to 20 ASCII digits; also used by the parser in kefu.sip.sdp."""
_HOLD_ADDRESSES = frozenset({"0.0.0.0", "::"})


@dataclass(frozen=True, slots=True)
class RtpMap:
    """One ``a=rtpmap`` entry, or the RFC 3551 static default for a payload type."""

    encoding: str
    """Encoding name as written by the peer, e.g. ``PCMU`` or ``opus`` (RFC 8866 §6.6)."""
    clock_rate: int
    """RTP timestamp clock in Hz (RFC 8866 §6.6; RFC 3551 §4.5 for static types)."""
    channels: int = 1
    """Audio channel count; 1 when omitted (RFC 8866 §6.6)."""

    def __str__(self) -> str:
        if self.channels != 1:
            return f"{self.encoding}/{self.clock_rate}/{self.channels}"
        return f"{self.encoding}/{self.clock_rate}"


# RFC 3551 §6 tables 4 and 5, as "pt encoding/clock[/channels]".
_STATIC_TABLE = (
    "0 PCMU/8000,3 GSM/8000,4 G723/8000,5 DVI4/8000,6 DVI4/16000,7 LPC/8000,8 PCMA/8000,"
    "9 G722/8000,10 L16/44100/2,11 L16/44100,12 QCELP/8000,13 CN/8000,14 MPA/90000,"
    "15 G728/8000,16 DVI4/11025,17 DVI4/22050,18 G729/8000,25 CelB/90000,26 JPEG/90000,"
    "28 nv/90000,31 H261/90000,32 MPV/90000,33 MP2T/90000,34 H263/90000"
)


@dataclass(frozen=True, slots=True)
class Origin:
    """The ``o=`` line (RFC 8866 §5.2)."""

    username: str
    """Login of the originating user, ``-`` when none (RFC 8866 §5.2)."""
    session_id: int
    """Numeric session id, kept for the life of the session (RFC 8866 §5.2, RFC 3264 §8)."""
    session_version: int
    """Incremented on every change of the description (RFC 8866 §5.2, RFC 3264 §8)."""
    net_type: str = "IN"
    """Network type, ``IN`` for the Internet (RFC 8866 §5.2)."""
    addr_type: str = "IP4"
    """``IP4`` or ``IP6`` (RFC 8866 §5.2)."""
    address: str = "0.0.0.0"
    """Address or FQDN of the machine that created the description (RFC 8866 §5.2)."""

    def __str__(self) -> str:
        return (
            f"{self.username} {self.session_id} {self.session_version} "
            f"{self.net_type} {self.addr_type} {self.address}"
        )


@dataclass(frozen=True, slots=True)
class Connection:
    """A ``c=`` line (RFC 8866 §5.7)."""

    address: str
    """Unicast address, multicast group or FQDN, without the ``/`` suffix (RFC 8866 §5.7)."""
    addr_type: str = "IP4"
    """``IP4`` or ``IP6`` (RFC 8866 §5.7)."""
    net_type: str = "IN"
    """Network type, ``IN`` (RFC 8866 §5.7)."""
    multicast: str = ""
    """Multicast ``/ttl/count`` suffix as written, empty for unicast (RFC 8866 §5.7)."""

    @property
    def is_hold(self) -> bool:
        """True for the RFC 2543 hold address 0.0.0.0 (RFC 3264 §8.4)."""
        return self.address in _HOLD_ADDRESSES

    def __str__(self) -> str:
        return f"{self.net_type} {self.addr_type} {self.address}{self.multicast}"


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A ``b=`` line (RFC 8866 §5.8)."""

    type: str
    """Bandwidth modifier: ``CT``, ``AS``, ``TIAS``, ``RS``, ``RR``... (RFC 8866 §5.8)."""
    value: int
    """Kilobits per second for CT/AS, bits per second for TIAS (RFC 8866 §5.8, RFC 3890)."""

    def __str__(self) -> str:
        return f"{self.type}:{self.value}"


@dataclass(frozen=True, slots=True)
class Timing:
    """A ``t=`` line and the ``r=`` lines under it (RFC 8866 §5.9, §5.10)."""

    start: int = 0
    """NTP start time, 0 for an unbounded session (RFC 8866 §5.9)."""
    stop: int = 0
    """NTP stop time, 0 for an unbounded session (RFC 8866 §5.9)."""
    repeats: tuple[str, ...] = ()
    """Raw ``r=`` values; kept for round trips, never interpreted (RFC 8866 §5.10)."""


Attribute = tuple[str, str | None]


class AttributeLookups:
    """Lookups shared by the session and media levels; ``a=`` names are case-sensitive."""

    __slots__ = ()
    attributes: tuple[Attribute, ...]

    def attribute(self, name: str) -> str | None:
        """Value of the first ``a=name``; None when absent or a flag."""
        return next((value for key, value in self.attributes if key == name), None)

    def has_attribute(self, name: str) -> bool:
        return any(key == name for key, _ in self.attributes)

    def attribute_values(self, name: str) -> tuple[str | None, ...]:
        return tuple(value for key, value in self.attributes if key == name)


def _direction_of(attributes: tuple[Attribute, ...]) -> Direction | None:
    # The last one wins, like most stacks; two of them is a peer bug either way.
    return next((d for key, _ in reversed(attributes) for d in DIRECTIONS if key == d), None)


def extra_lines(extra: tuple[tuple[str, str], ...], kinds: str) -> Iterator[str]:
    """The ``extra`` lines whose letter is in ``kinds``, written as ``x=value``."""
    # RFC 8866 §5 fixes the order of line types; within one type the peer's order is kept.
    for kind in kinds:
        yield from (f"{k}={value}" for k, value in extra if k == kind)


def attribute_lines(attributes: tuple[Attribute, ...]) -> Iterator[str]:
    """The ``a=`` lines for ``attributes``, in order."""
    for name, value in attributes:
        yield f"a={name}" if value is None else f"a={name}:{value}"


@dataclass(frozen=True, slots=True)
class MediaDescription(AttributeLookups):
    """One media section, from its ``m=`` line to the next (RFC 8866 §5.14)."""

    media: str
    """Media type: ``audio``, ``video``, ``application``... (RFC 8866 §5.14)."""
    port: int
    """Transport port; 0 means the stream is rejected or disabled (RFC 3264 §5.1, §6)."""
    proto: str
    """``RTP/AVP``, ``RTP/SAVP``, ``UDP/TLS/RTP/SAVPF``... (RFC 8866 §5.14, RFC 5764)."""
    formats: tuple[str, ...]
    """Format list; RTP payload types as decimal strings for RTP protos (RFC 8866 §5.14)."""
    port_count: int = 1
    """Number of ports from the ``port/count`` form (RFC 8866 §5.14)."""
    connection: Connection | None = None
    """Media-level ``c=``, overriding the session one (RFC 8866 §5.7)."""
    bandwidths: tuple[Bandwidth, ...] = ()
    """``b=`` lines (RFC 8866 §5.8)."""
    extra: tuple[tuple[str, str], ...] = ()
    """Uninterpreted ``i=`` and ``k=`` lines as (letter, value) (RFC 8866 §5.4, §5.12)."""
    attributes: tuple[Attribute, ...] = ()
    """``a=`` lines in order as (name, value or None for flags) (RFC 8866 §5.13)."""

    @property
    def is_rtp(self) -> bool:
        """True when the formats are RTP payload types (RFC 8866 §5.14)."""
        return "RTP/" in self.proto

    @property
    def payload_types(self) -> tuple[int, ...]:
        """The format list as integers; empty for non-RTP protos."""
        return tuple(int(f) for f in self.formats) if self.is_rtp else ()

    def rtpmaps(self) -> dict[int, RtpMap]:
        """Map of every listed payload type to its encoding.

        Explicit ``a=rtpmap`` wins; otherwise the RFC 3551 static default applies. Dynamic
        types without an rtpmap and malformed rtpmap lines are left out.
        """
        listed = self.payload_types
        explicit: dict[int, RtpMap] = {}
        for value in self.attribute_values("rtpmap"):
            parsed = _parse_rtpmap(value)
            if parsed is not None and parsed[0] in listed and parsed[0] not in explicit:
                explicit[parsed[0]] = parsed[1]
        result: dict[int, RtpMap] = {}
        for pt in listed:
            entry = explicit.get(pt) or STATIC_PAYLOAD_TYPES.get(pt)
            if entry is not None:
                result[pt] = entry
        return result

    def fmtp(self, payload_type: int) -> str | None:
        """Parameters of the first ``a=fmtp:<pt>`` line (RFC 8866 §6.15)."""
        for value in self.attribute_values("fmtp"):
            if value is None:
                continue
            pt, _, params = value.partition(" ")
            if pt == str(payload_type):
                return params.strip()
        return None

    def ptime(self) -> int | None:
        """``a=ptime`` in whole milliseconds, None when absent or unreadable (RFC 8866 §6.4)."""
        return _milliseconds(self.attribute("ptime"))

    def maxptime(self) -> int | None:
        """``a=maxptime`` in whole milliseconds (RFC 8866 §6.5)."""
        return _milliseconds(self.attribute("maxptime"))

    def rtcp_port(self) -> int | None:
        """Port from ``a=rtcp`` (RFC 3605), None when absent or malformed."""
        port = (self.attribute("rtcp") or "").split(" ", 1)[0]
        return int(port) if DIGITS.fullmatch(port) and int(port) <= 65535 else None

    def effective_connection(self, session: SessionDescription | None = None) -> Connection | None:
        """Media ``c=`` if present, else the session's (RFC 8866 §5.7)."""
        if self.connection is not None:
            return self.connection
        return session.connection if session is not None else None

    def direction(self, session: SessionDescription | None = None) -> Direction:
        """Direction the *writer* of this description wants for this stream.

        Media-level attributes override session-level ones; the default is sendrecv
        (RFC 3264 §5.1). An RFC 2543 hold (c=0.0.0.0) means the writer cannot receive,
        so sendrecv reads as sendonly and recvonly as inactive (RFC 3264 §8.4). With ICE,
        0.0.0.0 is only a placeholder for candidates (RFC 8839 §4.2.1) and means nothing.
        """
        found = _direction_of(self.attributes)
        if found is None and session is not None:
            found = _direction_of(session.attributes)
        direction: Direction = found or "sendrecv"
        conn = self.effective_connection(session)
        ice = self.has_attribute("ice-ufrag") or (
            session is not None and session.has_attribute("ice-ufrag")
        )
        if conn is not None and conn.is_hold and not ice:
            if direction == "sendrecv":
                return "sendonly"
            if direction == "recvonly":
                return "inactive"
        return direction

    def lines(self) -> Iterator[str]:
        port = f"{self.port}/{self.port_count}" if self.port_count != 1 else str(self.port)
        yield f"m={self.media} {port} {self.proto} {' '.join(self.formats)}"
        yield from extra_lines(self.extra, "i")
        if self.connection is not None:
            yield f"c={self.connection}"
        for bw in self.bandwidths:
            yield f"b={bw}"
        yield from extra_lines(self.extra, "k")
        yield from attribute_lines(self.attributes)


# --- parsing helpers ---------------------------------------------------------------------


def _milliseconds(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        ms = float(value.strip())
    except ValueError:
        return None
    if not 0 < ms <= 10_000:
        return None
    return round(ms)


def _parse_rtpmap(value: str | None) -> tuple[int, RtpMap] | None:
    if value is None:
        return None
    pt_text, _, rest = value.strip().partition(" ")
    parts = rest.strip().split("/")
    if not DIGITS.fullmatch(pt_text) or int(pt_text) > 127 or len(parts) not in (2, 3):
        return None
    if not parts[0] or not all(DIGITS.fullmatch(p) for p in parts[1:]):
        return None
    clock = int(parts[1])
    channels = int(parts[2]) if len(parts) == 3 else 1
    if clock == 0 or channels == 0:
        return None
    return int(pt_text), RtpMap(parts[0], clock, channels)


STATIC_PAYLOAD_TYPES: Mapping[int, RtpMap] = MappingProxyType(
    dict(entry for entry in map(_parse_rtpmap, _STATIC_TABLE.split(",")) if entry is not None)
)
"""What a static payload type means without ``a=rtpmap`` (RFC 3551 §6)."""
