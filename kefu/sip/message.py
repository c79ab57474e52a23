"""SIP messages (RFC 3261 §7, §20): parse and serialize (stream framing: framing.py).

API CONTRACT (other modules code against this; keep it stable):

    msg = parse_message(data: bytes) -> Request | Response      # raises SipParseError
    bytes(msg) / msg.serialize() -> bytes                        # Content-Length recomputed
    Headers: ordered, case-insensitive multi-map of header name -> raw value string.
        Compact forms (v, f, t, i, m, l, c, k, s, e, o, r, b, u, x, y, ...) are normalised to
        canonical names on parse ("Via", "From", "To", "Call-ID", "Contact", "Content-Length",
        "Content-Type", "Supported", "Subject", "Content-Encoding", "Event", "Refer-To",
        "Referred-By", "Allow-Events", "Session-Expires", ...).
        h.get(name) -> str | None          first value
        h.get_all(name) -> list[str]       every value; comma-separated lists split for
                                           headers that allow it (Via, Contact, Route,
                                           Record-Route, Allow, Supported, Require, ...)
        h.set(name, value) / h.add(name, value) / h.remove(name) -> new Headers (immutable)
        iteration yields (name, value) in wire order
    Request(method, uri, headers, body=b"", version="SIP/2.0")      frozen
    Response(status, reason, headers, body=b"", version="SIP/2.0")  frozen
    msg.call_id, msg.cseq (CSeq value object), msg.top_via (Via value object),
    msg.from_ (NameAddr), msg.to (NameAddr)  — convenience properties, parsed lazily
    Request.replace(**changes) / Response.replace(**changes) -> copy (dataclasses.replace)

    make_response(request, status, reason=None, *, to_tag=None, headers=(), body=b"")
        copies Via (all), From, To (adding to_tag if To has none), Call-ID, CSeq per
        RFC 3261 §8.2.6; reason defaults to the standard phrase for the status.

    StreamFramer().feed(data: bytes) -> list[bytes]   complete messages from a TCP stream
        (skips CRLF keep-alives; a bad Content-Length raises SipParseError(framing=True)).

Value objects (kefu/sip/headers.py, uri.py): Via, NameAddr, CSeq, SipUri with parse()/__str__.

Extensions beyond the contract (additive):
    Request.uri is a SipUri (a str given to the constructor is parsed; unknown schemes are
    kept opaque so validate can answer 416); a list of (name, value) pairs is accepted for
    ``headers``. parse_message(data, max_size=65535) -> SipParseError(status=513) above it.
    Headers.get_raw(name) (lines unsplit), .count(name), .prepend(name, value), .items().
    msg.vias, msg.contacts, msg.content_type, msg.max_forwards; Response.is_provisional.
    StreamFramer (kefu/sip/framing.py, re-exported): max_size, .take_pings(), .buffered.
    reason_phrase(status), canonical_name(name), split_header_lines(), Headers.from_canonical().
Header values stay raw text until a property parses them; kefu/sip/validate.py says which
problems the parser rejects and which the UAS checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from kefu.errors import LocalError, SipParseError
from kefu.sip.framing import (
    DEFAULT_MAX_SIZE,
    StreamFramer,
    find_header_end,
    parse_content_length,
    skip_leading_crlf,
)
from kefu.sip.headers import (
    CSeq,
    NameAddr,
    SipUri,
    Via,
    canonical_name,
    is_list_header,
    is_token,
    split_list,
)

__all__ = [
    "DEFAULT_MAX_SIZE",
    "Headers",
    "InvalidHeaderValue",
    "Message",
    "Request",
    "Response",
    "StreamFramer",
    "canonical_name",
    "make_response",
    "parse_message",
    "reason_phrase",
    "split_header_lines",
]

_T = TypeVar("_T")

# RFC 3261 §21 and the extensions kefu meets (RFC 3265, 3329, 4028, 6228, 6665).
_REASONS = {
    int(entry[:3]): entry[4:]
    for entry in (
        "100 Trying|180 Ringing|181 Call Is Being Forwarded|182 Queued|183 Session Progress|"
        "199 Early Dialog Terminated|200 OK|202 Accepted|204 No Notification|"
        "300 Multiple Choices|301 Moved Permanently|302 Moved Temporarily|305 Use Proxy|"
        "380 Alternative Service|400 Bad Request|401 Unauthorized|402 Payment Required|"
        "403 Forbidden|404 Not Found|405 Method Not Allowed|406 Not Acceptable|"
        "407 Proxy Authentication Required|408 Request Timeout|410 Gone|"
        "412 Conditional Request Failed|413 Request Entity Too Large|414 Request-URI Too Long|"
        "415 Unsupported Media Type|416 Unsupported URI Scheme|420 Bad Extension|"
        "421 Extension Required|422 Session Interval Too Small|423 Interval Too Brief|"
        "480 Temporarily Unavailable|481 Call/Transaction Does Not Exist|482 Loop Detected|"
        "483 Too Many Hops|484 Address Incomplete|485 Ambiguous|486 Busy Here|"
        "487 Request Terminated|488 Not Acceptable Here|489 Bad Event|491 Request Pending|"
        "493 Undecipherable|500 Server Internal Error|501 Not Implemented|502 Bad Gateway|"
        "503 Service Unavailable|504 Server Time-out|505 Version Not Supported|"
        "513 Message Too Large|580 Precondition Failure|600 Busy Everywhere|603 Decline|"
        "604 Does Not Exist Anywhere|606 Not Acceptable"
    ).split("|")
}

_VERSION_RE = re.compile(r"SIP/\d+\.\d+", re.IGNORECASE)
_STATUS_RE = re.compile(r"[1-6]\d\d")


def reason_phrase(status: int) -> str:
    """The RFC 3261 §21 (and extensions') reason phrase, or a class-generic one."""
    phrase = _REASONS.get(status)
    if phrase is not None:
        return phrase
    return _REASONS.get(status - status % 100, "Unknown")


class InvalidHeaderValue(LocalError, ValueError):
    """Code tried to build a header line break or an empty name (header injection)."""


def _checked(name: str, value: str) -> tuple[str, str]:
    # Values from our own code may come from callers' input (display names, URIs); a
    # line break there would let them forge headers, so refuse it at the API boundary.
    if "\n" in value or "\r" in value or not name or ":" in name:
        raise InvalidHeaderValue(f"refusing header {name!r}: {value[:40]!r}")
    return canonical_name(name), value


class Headers:
    """Immutable, ordered, case-insensitive multi-map of header name -> raw value.

    Names are canonicalised on construction (``v`` -> ``Via``, ``cseq`` -> ``CSeq``);
    unknown extension names keep their received spelling. Values are the raw text after
    the colon with folding already undone. Mutators return new instances.
    """

    __slots__ = ("_index", "_items", "_split")

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._init(tuple(_checked(n, v) for n, v in items))

    def _init(self, items: tuple[tuple[str, str], ...]) -> None:
        index: dict[str, list[str]] = {}
        for name, value in items:
            key = name.lower()
            bucket = index.get(key)
            if bucket is None:
                index[key] = [value]
            else:
                bucket.append(value)
        self._items = items
        self._index = index
        # get_all() results per name; safe to memoise since instances never change.
        self._split: dict[str, list[str]] = {}

    @classmethod
    def from_canonical(cls, items: tuple[tuple[str, str], ...]) -> Headers:
        """Wrap pairs that are already canonical and CR/LF-free (parser output), unchecked."""
        h = cls.__new__(cls)
        h._init(items)
        return h

    def get(self, name: str, default: str | None = None) -> str | None:
        """First raw value of ``name`` (the whole line, lists not split)."""
        bucket = self._index.get(canonical_name(name).lower())
        return bucket[0] if bucket else default

    def get_raw(self, name: str) -> list[str]:
        """Every header line of ``name`` as received, lists not split."""
        return list(self._index.get(canonical_name(name).lower(), ()))

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name``; comma-separated lists split for list headers."""
        key = canonical_name(name).lower()
        cached = self._split.get(key)
        if cached is None:
            lines = self._index.get(key, [])
            if is_list_header(key):
                cached = [v for line in lines for v in split_list(line)]
            else:
                cached = list(lines)
            self._split[key] = cached
        return list(cached)

    def count(self, name: str) -> int:
        """Number of header lines named ``name`` (duplicates of scalar headers show here)."""
        return len(self._index.get(canonical_name(name).lower(), ()))

    def set(self, name: str, value: str) -> Headers:
        """Replace every ``name`` line by one, at the first one's position (else appended)."""
        cname, value = _checked(name, value)
        key = cname.lower()
        out: list[tuple[str, str]] = []
        placed = False
        for n, v in self._items:
            if n.lower() == key:
                if not placed:
                    out.append((cname, value))
                    placed = True
            else:
                out.append((n, v))
        if not placed:
            out.append((cname, value))
        return Headers.from_canonical(tuple(out))

    def add(self, name: str, value: str) -> Headers:
        """Append a ``name`` line after all others."""
        return Headers.from_canonical((*self._items, _checked(name, value)))

    def prepend(self, name: str, value: str) -> Headers:
        """Insert a ``name`` line before the first one of that name (Via, Record-Route)."""
        cname, value = _checked(name, value)
        key = cname.lower()
        items = list(self._items)
        for i, (n, _) in enumerate(items):
            if n.lower() == key:
                items.insert(i, (cname, value))
                break
        else:
            items.append((cname, value))
        return Headers.from_canonical(tuple(items))

    def remove(self, name: str) -> Headers:
        """Drop every ``name`` line."""
        key = canonical_name(name).lower()
        if key not in self._index:
            return self
        return Headers.from_canonical(tuple(p for p in self._items if p[0].lower() != key))

    def items(self) -> tuple[tuple[str, str], ...]:
        return self._items

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and canonical_name(name).lower() in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Headers) and self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"Headers({list(self._items)!r})"


def _as_headers(value: object) -> Headers:
    if isinstance(value, Headers):
        return value
    return Headers(cast(Iterable[tuple[str, str]], value))


class _MessageMixin:
    """Lazily parsed views of the headers every message carries (RFC 3261 §8.1.1)."""

    __slots__ = ()
    headers: Headers
    body: bytes
    version: str
    _cache: dict[str, Any]

    def _memo(self, key: str, make: Callable[[], _T]) -> _T:
        try:
            return cast(_T, self._cache[key])
        except KeyError:
            value = make()
            self._cache[key] = value
            return value

    def _required(self, name: str) -> str:
        value = self.headers.get(name)
        if value is None:
            raise SipParseError(f"missing {name} header", header=name)
        return value

    def _parse_one(self, name: str, parser: Callable[[str], _T]) -> _T:
        raw = self._required(name)
        try:
            return parser(raw)
        except SipParseError as exc:
            raise SipParseError(f"bad {name} header: {exc}", header=name) from exc

    @property
    def call_id(self) -> str:
        """RFC 3261 §20.8 Call-ID (raises SipParseError(header="Call-ID") when missing)."""
        return self._memo("call_id", lambda: self._parse_one("Call-ID", _parse_call_id))

    @property
    def cseq(self) -> CSeq:
        """RFC 3261 §20.16 CSeq."""
        return self._memo("cseq", lambda: self._parse_one("CSeq", CSeq.parse))

    @property
    def from_(self) -> NameAddr:
        """RFC 3261 §20.20 From."""
        return self._memo("from", lambda: self._parse_one("From", NameAddr.parse))

    @property
    def to(self) -> NameAddr:
        """RFC 3261 §20.39 To."""
        return self._memo("to", lambda: self._parse_one("To", NameAddr.parse))

    @property
    def vias(self) -> tuple[Via, ...]:
        """Every Via, topmost first (RFC 3261 §20.42)."""
        return self._memo("vias", self._parse_vias)

    @property
    def top_via(self) -> Via:
        """The topmost Via: the transaction's branch and the response's return address."""
        return self.vias[0]

    @property
    def contacts(self) -> tuple[NameAddr, ...]:
        """Every Contact (RFC 3261 §20.10); the REGISTER wildcard ``*`` is skipped."""
        return self._memo("contacts", self._parse_contacts)

    @property
    def content_type(self) -> str | None:
        """Media type of the body, lower-cased, parameters dropped (RFC 3261 §20.15)."""
        raw = self.headers.get("Content-Type")
        return None if raw is None else raw.split(";", 1)[0].strip().lower()

    @property
    def max_forwards(self) -> int | None:
        """RFC 3261 §20.22 Max-Forwards (None when absent, e.g. RFC 2543 peers)."""
        raw = self.headers.get("Max-Forwards")
        if raw is None:
            return None
        raw = raw.strip()
        # RFC 3261 §20.22: an integer 0..255.
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 5 or int(raw) > 255:
            raise SipParseError("bad Max-Forwards header", header="Max-Forwards")
        return int(raw)

    def _parse_vias(self) -> tuple[Via, ...]:
        values = self.headers.get_all("Via")
        if not values:
            raise SipParseError("missing Via header", header="Via")
        try:
            return tuple(Via.parse(v) for v in values)
        except SipParseError as exc:
            raise SipParseError(f"bad Via header: {exc}", header="Via") from exc

    def _parse_contacts(self) -> tuple[NameAddr, ...]:
        try:
            return tuple(
                NameAddr.parse(v) for v in self.headers.get_all("Contact") if v.strip() != "*"
            )
        except SipParseError as exc:
            raise SipParseError(f"bad Contact header: {exc}", header="Contact") from exc

    def _serialize(self, start_line: str) -> bytes:
        parts = [start_line, "\r\n"]
        length_line = f"Content-Length: {len(self.body)}\r\n"
        wrote_length = False
        for name, value in self.headers:
            if name == "Content-Length":
                if not wrote_length:
                    parts.append(length_line)
                    wrote_length = True
                continue
            parts += [name, ": ", value, "\r\n"]
        if not wrote_length:
            parts.append(length_line)
        parts.append("\r\n")
        return "".join(parts).encode("utf-8", "surrogateescape") + self.body


def _parse_call_id(raw: str) -> str:
    value = raw.strip()
    if not value or any(c in value for c in " \t"):
        raise SipParseError("Call-ID must be one non-empty word")
    return value


@dataclass(frozen=True, slots=True)
class Request(_MessageMixin):
    """A SIP request (RFC 3261 §7.1). ``uri`` may be given as text; it is parsed."""

    method: str
    """RFC 3261 §7.1 method (case-sensitive token)."""
    uri: SipUri
    """RFC 3261 §7.1 Request-URI."""
    headers: Headers
    """RFC 3261 §7.3 header fields in wire order."""
    body: bytes = b""
    """RFC 3261 §7.4 message body, exactly Content-Length octets."""
    version: str = "SIP/2.0"
    """RFC 3261 §7.1 SIP-Version."""
    _cache: dict[str, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        # Accept the convenient spellings (a URI string, a list of pairs) at construction.
        if not isinstance(self.uri, SipUri):
            object.__setattr__(self, "uri", SipUri.parse(str(self.uri)))
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", _as_headers(self.headers))

    def serialize(self) -> bytes:
        """Wire form with Content-Length recomputed from the body."""
        return self._serialize(f"{self.method} {self.uri} {self.version}")

    def __bytes__(self) -> bytes:
        return self.serialize()

    def replace(self, **changes: Any) -> Request:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Response(_MessageMixin):
    """A SIP response (RFC 3261 §7.2)."""

    status: int
    """RFC 3261 §7.2 Status-Code, 100..699."""
    reason: str
    """RFC 3261 §7.2 Reason-Phrase (may be empty, may be UTF-8)."""
    headers: Headers
    """RFC 3261 §7.3 header fields in wire order."""
    body: bytes = b""
    """RFC 3261 §7.4 message body."""
    version: str = "SIP/2.0"
    """RFC 3261 §7.2 SIP-Version."""
    _cache: dict[str, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not 100 <= self.status <= 699:
            raise SipParseError(f"status {self.status} outside 100..699")
        if not isinstance(self.headers, Headers):
            object.__setattr__(self, "headers", _as_headers(self.headers))

    @property
    def is_provisional(self) -> bool:
        return self.status < 200

    @property
    def is_success(self) -> bool:
        return 200 <= self.status < 300

    def serialize(self) -> bytes:
        return self._serialize(f"{self.version} {self.status} {self.reason}")

    def __bytes__(self) -> bytes:
        return self.serialize()

    def replace(self, **changes: Any) -> Response:
        return replace(self, **changes)


Message = Request | Response


def split_header_lines(head: str) -> tuple[str, list[tuple[str, str]]]:
    """Start line and unfolded (canonical name, value) pairs of a decoded header block."""
    lines = head.split("\n")
    start_line = lines[0].rstrip("\r")
    if "\r" in start_line:
        raise SipParseError("bare CR in the start line")
    fields: list[tuple[str, str]] = []
    for raw in lines[1:]:
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line:
            continue
        if line[0] in " \t":
            # RFC 3261 §7.3.1: a continuation line folds into the previous value.
            if not fields:
                raise SipParseError("continuation line before the first header")
            name, value = fields[-1]
            if "\r" in line:
                raise SipParseError(f"bare CR in {name} header", header=name)
            fields[-1] = (name, f"{value} {line.strip()}".strip())
            continue
        colon = line.find(":")
        if colon <= 0:
            raise SipParseError(f"header line without a name and colon: {line[:40]!r}")
        name = line[:colon].rstrip(" \t")
        if not is_token(name):
            raise SipParseError(f"bad header name {name[:40]!r}")
        name = canonical_name(name)
        if "\r" in line:
            # RFC 3261 §25.1: no rule allows a CR inside a value, not even quoted-pair; echoed
            # into a response, a peer may read it as a line break (response splitting).
            raise SipParseError(f"bare CR in {name} header", header=name)
        fields.append((name, line[colon + 1 :].strip(" \t")))
    return start_line, fields


def parse_message(data: bytes, *, max_size: int = DEFAULT_MAX_SIZE) -> Request | Response:
    """Parse one datagram (or one message cut out by :class:`StreamFramer`).

    The body is exactly Content-Length octets; extra trailing octets are ignored (RFC 4475
    dblreq). Without Content-Length the body is the rest of the datagram (RFC 3261 §18.3).
    A header block missing its final empty line is accepted when nothing follows it.
    """
    if len(data) > max_size:
        raise SipParseError(f"message of {len(data)} octets exceeds {max_size}", status=513)
    data = bytes(data)  # a bytearray or memoryview from a transport must not leak into body
    start = skip_leading_crlf(data)
    end, body_start = find_header_end(data, start)
    if end < 0:
        if not data.endswith(b"\n"):
            raise SipParseError("header block not terminated by an empty line", framing=True)
        end = body_start = len(data)
    start_line, fields = split_header_lines(data[start:end].decode("utf-8", "surrogateescape"))
    headers = Headers.from_canonical(tuple(fields))
    length = parse_content_length(headers.get_raw("Content-Length"))
    if length is None:
        body = data[body_start:]
    else:
        if length > len(data) - body_start:
            raise SipParseError(
                f"Content-Length {length} exceeds the {len(data) - body_start} octets received",
                header="Content-Length",
                framing=True,
            )
        body = data[body_start : body_start + length]
    if start_line[:4].upper() == "SIP/":
        return _parse_status_line(start_line, headers, body)
    return _parse_request_line(start_line, headers, body)


def _parse_request_line(line: str, headers: Headers, body: bytes) -> Request:
    parts = line.split(" ")
    if len(parts) != 3 or not all(parts):
        raise SipParseError(f"malformed Request-Line {line[:80]!r}")
    method, uri_text, version = parts
    if not is_token(method):
        raise SipParseError(f"bad method {method[:40]!r}")
    if not _VERSION_RE.fullmatch(version):
        raise SipParseError(f"bad SIP-Version {version[:20]!r}")
    if version.upper() != "SIP/2.0":
        raise SipParseError(f"unsupported SIP version {version!r}", status=505)
    try:
        uri = SipUri.parse(uri_text)
    except SipParseError as exc:
        raise SipParseError(f"bad Request-URI: {exc}", header="Request-URI") from exc
    return Request(method, uri, headers, body, "SIP/2.0")


def _parse_status_line(line: str, headers: Headers, body: bytes) -> Response:
    version, _, rest = line.partition(" ")
    code, _, reason = rest.partition(" ")
    if not _VERSION_RE.fullmatch(version):
        raise SipParseError(f"bad SIP-Version {version[:20]!r}")
    if version.upper() != "SIP/2.0":
        raise SipParseError(f"unsupported SIP version {version!r}", status=505)
    if not _STATUS_RE.fullmatch(code):
        raise SipParseError(f"bad status code {code[:20]!r}")
    return Response(int(code), reason.strip(" \t"), headers, body, "SIP/2.0")


def make_response(
    request: Request,
    status: int,
    reason: str | None = None,
    *,
    to_tag: str | None = None,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
) -> Response:
    """Build a response to ``request`` per RFC 3261 §8.2.6.

    Via lines (all, in order), From, Call-ID and CSeq are copied verbatim; To is copied and
    gets ``;tag=to_tag`` unless it already has a tag. A 100 also copies Timestamp
    (§8.2.6.1). ``headers`` are appended after those.
    """
    out: list[tuple[str, str]] = [("Via", v) for v in request.headers.get_raw("Via")]
    for name in ("From", "To", "Call-ID", "CSeq"):
        value = request.headers.get(name)
        if value is None:
            continue
        if name == "To" and to_tag is not None and not _has_tag(value):
            value = f"{value};tag={to_tag}"
        out.append((name, value))
    if status == 100:
        timestamp = request.headers.get("Timestamp")
        if timestamp is not None:
            out.append(("Timestamp", timestamp))
    out += [_checked(n, v) for n, v in headers]
    return Response(
        status,
        reason_phrase(status) if reason is None else reason,
        Headers.from_canonical(tuple(out)),
        body,
    )


def _has_tag(to_value: str) -> bool:
    try:
        return NameAddr.parse(to_value).tag is not None
    except SipParseError:
        # Unparseable To: fall back to a textual look so we never add a second tag.
        return ";tag=" in to_value.replace(" ", "").lower()
