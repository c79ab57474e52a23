"""SDP session descriptions (RFC 8866, formerly RFC 4566): parse and serialize.

Parsing is liberal where real peers are sloppy and strict where sloppiness would mislead the
media plane:

* LF-only line endings, runs of spaces between fields and blank lines are accepted;
  :meth:`SessionDescription.serialize` always writes CRLF and single spaces (the normalised
  form the golden files hold).
* A missing ``s=`` or ``t=`` line (seen from old gateways, RFC 4475 §3.1.2.14) reads as
  ``s=-`` and ``t=0 0``. ``v=0`` must come first and ``o=`` must be present.
* Ports, payload types and connection addresses must be well formed: a bad one raises
  :class:`~kefu.errors.SdpError` naming the line, because guessing would send RTP to the
  wrong place.
* Bodies over 64 KiB or with more than 16 ``m=`` lines are refused before any real work is
  done, so a hostile peer cannot make parsing expensive.

Attribute helpers (``rtpmaps()``, ``fmtp()``, ``ptime()``...) are lenient: a malformed
``a=rtpmap`` is skipped rather than failing the whole body, since RFC 4475 bodies carry
``a=rtpmap:31 LPC`` and must still negotiate their audio.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from kefu.errors import SdpError

MAX_SDP_BYTES = 64 * 1024
"""Largest body accepted; a real audio offer is under 2 KiB, WebRTC offers under 10 KiB."""

MAX_MEDIA = 16
"""Most ``m=`` lines accepted; more is never legitimate for a customer-service call."""

Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
DIRECTIONS: tuple[Direction, ...] = ("sendrecv", "sendonly", "recvonly", "inactive")

_TOKEN = re.compile(r"[!#$%&'*+\-.0-9A-Z^_`a-z{|}~]+")
_PROTO = re.compile(r"[!#$%&'*+\-.0-9A-Z^_`a-z{|}~/]+")
_HOSTNAME = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?\.?")
_DIGITS = re.compile(r"[0-9]{1,20}")
# C0 controls other than TAB, plus DEL: no SDP field may carry them (RFC 8866 §9 "text").
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_EXTRA_ORDER = "iuepzk"
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


class _Attributes:
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


def _extra_lines(extra: tuple[tuple[str, str], ...], kinds: str) -> Iterator[str]:
    # RFC 8866 §5 fixes the order of line types; within one type the peer's order is kept.
    for kind in kinds:
        yield from (f"{k}={value}" for k, value in extra if k == kind)


def _attribute_lines(attributes: tuple[Attribute, ...]) -> Iterator[str]:
    for name, value in attributes:
        yield f"a={name}" if value is None else f"a={name}:{value}"


@dataclass(frozen=True, slots=True)
class MediaDescription(_Attributes):
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
        return int(port) if _DIGITS.fullmatch(port) and int(port) <= 65535 else None

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
        yield from _extra_lines(self.extra, "i")
        if self.connection is not None:
            yield f"c={self.connection}"
        for bw in self.bandwidths:
            yield f"b={bw}"
        yield from _extra_lines(self.extra, "k")
        yield from _attribute_lines(self.attributes)


@dataclass(frozen=True, slots=True)
class SessionDescription(_Attributes):
    """A whole SDP body (RFC 8866 §5)."""

    origin: Origin
    """The ``o=`` line (RFC 8866 §5.2)."""
    session_name: str = "-"
    """The ``s=`` line; ``-`` or a single space when there is none (RFC 8866 §5.3)."""
    connection: Connection | None = None
    """Session-level ``c=`` (RFC 8866 §5.7)."""
    timings: tuple[Timing, ...] = (Timing(),)
    """``t=`` lines with their ``r=`` lines; at least one (RFC 8866 §5.9)."""
    attributes: tuple[Attribute, ...] = ()
    """Session-level ``a=`` lines in order (RFC 8866 §5.13)."""
    media: tuple[MediaDescription, ...] = ()
    """Media sections in order; order is meaningful in offer/answer (RFC 3264 §6)."""
    version: int = 0
    """The ``v=`` line, always 0 (RFC 8866 §5.1)."""
    bandwidths: tuple[Bandwidth, ...] = ()
    """Session-level ``b=`` lines (RFC 8866 §5.8)."""
    extra: tuple[tuple[str, str], ...] = ()
    """Uninterpreted ``i= u= e= p= z= k=`` lines as (letter, value) (RFC 8866 §5.4-§5.12)."""

    @property
    def timing(self) -> Timing:
        """The first ``t=`` line; the only one any SIP peer sends."""
        return self.timings[0]

    @classmethod
    def parse(cls, data: bytes | str) -> SessionDescription:
        """Parse an SDP body; raise :class:`SdpError` naming the offending line."""
        return _Parser(data).parse()

    def lines(self) -> Iterator[str]:
        yield f"v={self.version}"
        yield f"o={self.origin}"
        yield f"s={self.session_name}"
        yield from _extra_lines(self.extra, "iuep")
        if self.connection is not None:
            yield f"c={self.connection}"
        for bw in self.bandwidths:
            yield f"b={bw}"
        for timing in self.timings:
            yield f"t={timing.start} {timing.stop}"
            for repeat in timing.repeats:
                yield f"r={repeat}"
        yield from _extra_lines(self.extra, "zk")
        yield from _attribute_lines(self.attributes)
        for media in self.media:
            yield from media.lines()

    def serialize(self) -> bytes:
        """The body with CRLF line endings, fields in RFC 8866 §5 order."""
        return "".join(line + "\r\n" for line in self.lines()).encode("utf-8")

    def __bytes__(self) -> bytes:
        return self.serialize()

    def __str__(self) -> str:
        return self.serialize().decode("utf-8")


def parse_sdp(data: bytes | str) -> SessionDescription:
    """Same as :meth:`SessionDescription.parse`."""
    return _Parser(data).parse()


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
    if not _DIGITS.fullmatch(pt_text) or int(pt_text) > 127 or len(parts) not in (2, 3):
        return None
    if not parts[0] or not all(_DIGITS.fullmatch(p) for p in parts[1:]):
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


class _Parser:
    """One-shot parser; holds the per-body state so the module keeps none."""

    def __init__(self, data: bytes | str) -> None:
        self.text = self._decode(data)
        self.lineno = 0

    @staticmethod
    def _decode(data: bytes | str) -> str:
        if isinstance(data, str):
            try:
                data = data.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise SdpError(f"SDP text has an unencodable character at {exc.start}") from None
        if len(data) > MAX_SDP_BYTES:
            raise SdpError(f"SDP body of {len(data)} bytes exceeds the {MAX_SDP_BYTES}-byte limit")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SdpError(f"SDP is not valid UTF-8 (byte {exc.start})") from None

    def fail(self, what: str) -> SdpError:
        return SdpError(f"SDP line {self.lineno}: {what}")

    def parse(self) -> SessionDescription:
        raw_lines = self.text.split("\n")
        if sum(1 for line in raw_lines if line.startswith("m=")) > MAX_MEDIA:
            raise SdpError(f"SDP has more than {MAX_MEDIA} m= lines")
        top = _SectionBuilder()
        origin: Origin | None = None
        session_name: str | None = None
        timings: list[Timing] = []
        media: list[MediaDescription] = []
        section: _SectionBuilder | None = None
        seen_version = False
        for index, raw in enumerate(raw_lines, start=1):
            self.lineno = index
            line = raw[:-1] if raw.endswith("\r") else raw
            if not line.strip():
                continue
            if _CONTROL.search(line):
                raise self.fail("control character in line")
            if len(line) < 2 or line[1] != "=" or not ("a" <= line[0] <= "z"):
                raise self.fail(f"expected '<letter>=<value>', got {line[:40]!r}")
            kind, value = line[0], line[2:]
            if not seen_version:
                if kind != "v":
                    raise self.fail("first line must be v=")
                if value.strip() != "0":
                    raise self.fail(f"unsupported SDP version {value[:20]!r}")
                seen_version = True
            elif kind == "v":
                raise self.fail("duplicate v= line")
            elif kind == "m":
                if section is not None:
                    media.append(section.build_media())
                section = self.media_line(value)
            elif section is not None:
                if kind not in "icbka":
                    raise self.fail(f"{kind}= line not allowed inside a media section")
                self.common_field(section, kind, value)
            elif kind == "o":
                if origin is not None:
                    raise self.fail("duplicate o= line")
                origin = self.origin(value)
            elif kind == "s":
                if session_name is not None:
                    raise self.fail("duplicate s= line")
                session_name = value
            elif kind == "t":
                timings.append(self.timing(value))
            elif kind == "r":
                if not timings:
                    raise self.fail("r= before any t=")
                last = timings[-1]
                timings[-1] = Timing(last.start, last.stop, (*last.repeats, value))
            elif kind in "icbkauepz":
                self.common_field(top, kind, value)
            else:
                raise self.fail(f"unknown or misplaced line type {kind!r}")
        if not seen_version:
            raise SdpError("SDP is empty: missing v= line")
        if section is not None:
            media.append(section.build_media())
        if origin is None:
            raise SdpError("SDP has no o= line")
        if top.connection is None:
            for number, m in enumerate(media, start=1):
                if m.connection is None and m.port != 0:
                    raise SdpError(f"SDP m= line #{number} has no c= and there is no session c=")
        return SessionDescription(
            origin=origin,
            session_name="-" if session_name is None else session_name,
            connection=top.connection,
            timings=tuple(timings) or (Timing(),),
            attributes=tuple(top.attributes),
            media=tuple(media),
            bandwidths=tuple(top.bandwidths),
            extra=top.sorted_extra(),
        )

    def common_field(self, section: _SectionBuilder, kind: str, value: str) -> None:
        """Lines that may appear at session and media level alike."""
        if kind == "a":
            section.attributes.append(self.attribute(value))
        elif kind == "c":
            if section.connection is not None:
                raise self.fail("duplicate c= line")
            section.connection = self.connection(value)
        elif kind == "b":
            section.bandwidths.append(self.bandwidth(value))
        else:
            section.extra.append((kind, value))

    def origin(self, value: str) -> Origin:
        fields = value.split()
        if len(fields) != 6:
            raise self.fail(f"o= needs 6 fields, got {len(fields)}")
        username, sess_id, sess_version, net_type, addr_type, address = fields
        if not _DIGITS.fullmatch(sess_id) or not _DIGITS.fullmatch(sess_version):
            raise self.fail("o= session id and version must be numbers of up to 20 digits")
        if not _TOKEN.fullmatch(net_type) or not _TOKEN.fullmatch(addr_type):
            raise self.fail("o= network or address type is not a token")
        return Origin(username, int(sess_id), int(sess_version), net_type, addr_type, address)

    def connection(self, value: str) -> Connection:
        fields = value.split()
        if len(fields) != 3:
            raise self.fail(f"c= needs 3 fields, got {len(fields)}")
        net_type, addr_type, full = fields
        if net_type != "IN":
            raise self.fail(f"c= network type {net_type[:20]!r} is not IN")
        if addr_type not in ("IP4", "IP6"):
            raise self.fail(f"c= address type {addr_type[:20]!r} is not IP4 or IP6")
        address, *suffix = full.split("/")
        if len(suffix) > (2 if addr_type == "IP4" else 1):
            raise self.fail(f"c= address {full[:60]!r} has too many '/' parts")
        if not all(_DIGITS.fullmatch(s) for s in suffix):
            raise self.fail(f"c= address {full[:60]!r} has a non-numeric ttl or count")
        if not self.valid_address(address, addr_type):
            raise self.fail(f"c= address {address[:60]!r} is not a valid {addr_type} address")
        return Connection(address, addr_type, net_type, "".join(f"/{s}" for s in suffix))

    @staticmethod
    def valid_address(address: str, addr_type: str) -> bool:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            # RFC 8866 §5.7 allows an FQDN; anything made only of digits and dots or
            # containing ':' was meant as a literal and is wrong.
            return ":" not in address and _HOSTNAME.fullmatch(address) is not None
        return parsed.version == (4 if addr_type == "IP4" else 6)

    def bandwidth(self, value: str) -> Bandwidth:
        bwtype, sep, amount = value.partition(":")
        if not sep or not _TOKEN.fullmatch(bwtype) or not _DIGITS.fullmatch(amount.strip()):
            raise self.fail(f"malformed b= line {value[:40]!r}")
        return Bandwidth(bwtype, int(amount))

    def timing(self, value: str) -> Timing:
        fields = value.split()
        if len(fields) != 2 or not all(_DIGITS.fullmatch(f) for f in fields):
            raise self.fail(f"t= needs two numbers, got {value[:40]!r}")
        return Timing(int(fields[0]), int(fields[1]))

    def attribute(self, value: str) -> Attribute:
        name, sep, rest = value.partition(":")
        if not _TOKEN.fullmatch(name):
            raise self.fail(f"attribute name {name[:40]!r} is not a token")
        return (name, rest if sep else None)

    def media_line(self, value: str) -> _SectionBuilder:
        fields = value.split()
        if len(fields) < 4:
            raise self.fail(f"m= needs media, port, proto and formats, got {value[:60]!r}")
        media, port_text, proto, *formats = fields
        if not _TOKEN.fullmatch(media):
            raise self.fail(f"m= media type {media[:20]!r} is not a token")
        port_part, slash, count_part = port_text.partition("/")
        port = self.port_number(port_part, "m= port")
        count = self.port_number(count_part, "m= port count") if slash else 1
        if slash and count == 0:
            raise self.fail("m= port count must be at least 1")
        if not _PROTO.fullmatch(proto):
            raise self.fail(f"m= proto {proto[:30]!r} is malformed")
        if "RTP/" in proto:
            for fmt in formats:
                if not _DIGITS.fullmatch(fmt) or len(fmt) > 3 or int(fmt) > 127:
                    raise self.fail(f"m= payload type {fmt[:20]!r} is not a number 0-127")
        elif not all(_PROTO.fullmatch(f) or f == "*" for f in formats):
            raise self.fail("m= format is not a token")
        return _SectionBuilder(media, port, count, proto, tuple(formats))

    def port_number(self, text: str, what: str) -> int:
        if not _DIGITS.fullmatch(text) or len(text) > 5 or int(text) > 65535:
            raise self.fail(f"{what} {text[:20]!r} is not a number 0-65535")
        return int(text)


@dataclass(slots=True)
class _SectionBuilder:
    """Mutable accumulator for the session header or one media section while it is read."""

    media: str = ""
    port: int = 0
    port_count: int = 1
    proto: str = ""
    formats: tuple[str, ...] = ()
    connection: Connection | None = None
    bandwidths: list[Bandwidth] = field(default_factory=list)
    attributes: list[Attribute] = field(default_factory=list)
    extra: list[tuple[str, str]] = field(default_factory=list)

    def sorted_extra(self) -> tuple[tuple[str, str], ...]:
        # Stored in the order serialize() writes them, so a round trip compares equal.
        return tuple(sorted(self.extra, key=lambda line: _EXTRA_ORDER.index(line[0])))

    def build_media(self) -> MediaDescription:
        return MediaDescription(
            media=self.media,
            port=self.port,
            proto=self.proto,
            formats=self.formats,
            port_count=self.port_count,
            connection=self.connection,
            bandwidths=tuple(self.bandwidths),
            extra=self.sorted_extra(),
            attributes=tuple(self.attributes),
        )
