"""Where SIP messages begin and end: header-block limits and TCP stream framing.

RFC 3261 §7.5 (leading CRLFs), §7.4/§20.14 (Content-Length) and §18.3 (framing on stream
transports). :mod:`kefu.sip.message` parses what these functions delimit and re-exports
:class:`StreamFramer` and :data:`DEFAULT_MAX_SIZE`, so both import paths keep working.

    find_header_end(data, start) -> (end of header block, start of body) | (-1, -1)
    skip_leading_crlf(data) -> index of the first octet after leading CRLFs
    StreamFramer(max_size).feed(data: bytes) -> list[bytes]   complete messages
        (skips CRLF keep-alives; raises SipParseError(framing=True) on a missing/invalid
        Content-Length); .take_pings() counts RFC 5626 double-CRLF pings; .buffered.
"""

from __future__ import annotations

import re

from kefu.errors import SipParseError

__all__ = [
    "DEFAULT_MAX_SIZE",
    "StreamFramer",
    "find_header_end",
    "parse_content_length",
    "skip_leading_crlf",
]

DEFAULT_MAX_SIZE = 65535
"""Largest message accepted by default: a UDP datagram's payload cannot be larger."""

_CL_LINE_RE = re.compile(rb"^(?:content-length|l)[ \t]*:([^\r\n]*)", re.I | re.M)


def find_header_end(data: bytes | bytearray, start: int) -> tuple[int, int]:
    """(end of header block, start of body), or (-1, -1). Bare-LF messages (RFC 5118's
    files, some old UAs) are accepted as RFC 3261 §7.5 suggests tolerating."""
    crlf = data.find(b"\r\n\r\n", start)
    lf = data.find(b"\n\n", start)
    if crlf >= 0 and (lf < 0 or crlf + 1 <= lf):
        return crlf, crlf + 4
    if lf >= 0:
        return lf, lf + 2
    return -1, -1


def skip_leading_crlf(data: bytes) -> int:
    """Index of the first octet of ``data`` that is neither CR nor LF."""
    # RFC 3261 §7.5: CRLFs before the start line are ignored (keep-alives, sloppy peers).
    i = 0
    n = len(data)
    while i < n and data[i] in (13, 10):
        i += 1
    return i


def parse_content_length(values: list[str]) -> int | None:
    """The body length given by a message's Content-Length lines (RFC 3261 §20.14).

    None when there is none. Repeated lines must agree: otherwise where the body ends is
    ambiguous, so SipParseError(framing=True) is raised.
    """
    if not values:
        return None
    distinct = {v.strip() for v in values}
    if len(distinct) != 1:
        raise SipParseError(
            "conflicting Content-Length headers", header="Content-Length", framing=True
        )
    text = distinct.pop()
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise SipParseError(
            f"bad Content-Length {text[:20]!r}", header="Content-Length", framing=True
        )
    return int(text)


class StreamFramer:
    """Cut SIP messages out of a TCP/TLS byte stream (RFC 3261 §18.3).

    ``feed(data)`` returns every complete message (raw bytes, ready for
    :func:`~kefu.sip.message.parse_message`). CRLFs between messages are skipped; each
    double-CRLF keep-alive ping (RFC 5626 §3.5.1) is counted for :meth:`take_pings` so the
    transport can answer with a single CRLF pong. A stream without a valid Content-Length
    cannot be framed: SipParseError(framing=True) is raised and the connection should be
    closed; the framer must not be fed again after raising.
    """

    __slots__ = ("_buf", "_max_size", "_newlines", "_pings", "_scanned")

    def __init__(self, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self._buf = bytearray()
        self._max_size = max_size
        self._pings = 0
        self._newlines = 0
        self._scanned = 0
        """Octets of an unfinished header block already searched for its end: a message
        dribbled in small pieces (slowloris) costs linear, not quadratic, time."""

    @property
    def max_size(self) -> int:
        """Largest message (header block + body) accepted, in octets."""
        return self._max_size

    @property
    def buffered(self) -> int:
        """Octets received but not yet part of a complete message."""
        return len(self._buf)

    def take_pings(self) -> int:
        """Number of double-CRLF pings seen since the last call."""
        pings, self._pings = self._pings, 0
        return pings

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        while True:
            self._skip_keepalives()
            if not buf:
                break
            # Resume a little before where the last search stopped: the blank line may
            # straddle two feeds.
            end, body_start = find_header_end(buf, max(0, self._scanned - 3))
            if end < 0:
                if len(buf) > self._max_size:
                    raise SipParseError("header block too large", status=513, framing=True)
                self._scanned = len(buf)
                break
            length = self._content_length(bytes(buf[:end]))
            total = body_start + length
            if total > self._max_size:
                raise SipParseError(
                    f"message of {total} octets exceeds {self._max_size}",
                    status=513,
                    framing=True,
                )
            if len(buf) < total:
                break
            out.append(bytes(buf[:total]))
            del buf[:total]
            self._newlines = 0
            self._scanned = 0
        return out

    def _skip_keepalives(self) -> None:
        if self._scanned:
            return  # inside a message's header block: its CRLFs are not keep-alives
        buf = self._buf
        i = 0
        n = len(buf)
        while i < n and buf[i] in (13, 10):
            if buf[i] == 10:
                # Count LFs across feeds so a ping split over two segments still counts.
                self._newlines += 1
                if self._newlines == 2:
                    self._pings += 1
                    self._newlines = 0
            i += 1
        if i:
            del buf[:i]

    @staticmethod
    def _content_length(head: bytes) -> int:
        values = {m.group(1).strip(b" \t") for m in _CL_LINE_RE.finditer(head)}
        if not values:
            raise SipParseError(
                "missing Content-Length on a stream transport",
                header="Content-Length",
                framing=True,
            )
        if len(values) != 1:
            raise SipParseError(
                "conflicting Content-Length headers", header="Content-Length", framing=True
            )
        text = values.pop()
        if not text.isdigit() or len(text) > 10:
            raise SipParseError(
                f"bad Content-Length {text[:20]!r}", header="Content-Length", framing=True
            )
        return int(text)
