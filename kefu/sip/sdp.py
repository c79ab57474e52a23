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

The value types for single lines and media sections live in :mod:`kefu.sip.sdp_fields`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from kefu.errors import SdpError
from kefu.sip.sdp_fields import (
    DIGITS,
    Attribute,
    AttributeLookups,
    Bandwidth,
    Connection,
    MediaDescription,
    Origin,
    Timing,
    attribute_lines,
    extra_lines,
)

MAX_SDP_BYTES = 64 * 1024
"""Largest body accepted; a real audio offer is under 2 KiB, WebRTC offers under 10 KiB."""

MAX_MEDIA = 16
"""Most ``m=`` lines accepted; more is never legitimate for a customer-service call."""

_TOKEN = re.compile(r"[!#$%&'*+\-.0-9A-Z^_`a-z{|}~]+")
_PROTO = re.compile(r"[!#$%&'*+\-.0-9A-Z^_`a-z{|}~/]+")
_HOSTNAME = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?\.?")
# C0 controls other than TAB, plus DEL: no SDP field may carry them (RFC 8866 §9 "text").
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_EXTRA_ORDER = "iuepzk"


@dataclass(frozen=True, slots=True)
class SessionDescription(AttributeLookups):
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
        yield from extra_lines(self.extra, "iuep")
        if self.connection is not None:
            yield f"c={self.connection}"
        for bw in self.bandwidths:
            yield f"b={bw}"
        for timing in self.timings:
            yield f"t={timing.start} {timing.stop}"
            for repeat in timing.repeats:
                yield f"r={repeat}"
        yield from extra_lines(self.extra, "zk")
        yield from attribute_lines(self.attributes)
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
        if not DIGITS.fullmatch(sess_id) or not DIGITS.fullmatch(sess_version):
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
        if not all(DIGITS.fullmatch(s) for s in suffix):
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
        if not sep or not _TOKEN.fullmatch(bwtype) or not DIGITS.fullmatch(amount.strip()):
            raise self.fail(f"malformed b= line {value[:40]!r}")
        return Bandwidth(bwtype, int(amount))

    def timing(self, value: str) -> Timing:
        fields = value.split()
        if len(fields) != 2 or not all(DIGITS.fullmatch(f) for f in fields):
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
                if not DIGITS.fullmatch(fmt) or len(fmt) > 3 or int(fmt) > 127:
                    raise self.fail(f"m= payload type {fmt[:20]!r} is not a number 0-127")
        elif not all(_PROTO.fullmatch(f) or f == "*" for f in formats):
            raise self.fail("m= format is not a token")
        return _SectionBuilder(media, port, count, proto, tuple(formats))

    def port_number(self, text: str, what: str) -> int:
        if not DIGITS.fullmatch(text) or len(text) > 5 or int(text) > 65535:
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
