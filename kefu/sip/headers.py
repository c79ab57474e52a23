"""SIP header value objects (RFC 3261 §19.1, §20, §25; RFC 5118; RFC 3581).

Every value object is frozen, has ``parse(text)`` raising :class:`kefu.errors.SipParseError`
(with ``header`` unset: the caller knows which header it was parsing and re-raises with it),
and ``__str__`` giving the wire form. :class:`SipUri` and the §25.1 grammar helpers
(tokens, parameters, hosts, ports) live in :mod:`kefu.sip.uri` and are re-exported here.

Policy: be liberal in what we accept where RFC 4475/5118 say a parser must cope (LWS almost
anywhere, unusual token characters, escaped octets kept verbatim), strict where accepting
would make us act on something ambiguous (unbalanced quotes, whitespace inside ``<>``, a bare
addr-spec carrying ``?``/``,``, a port that is not a number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kefu.errors import SipParseError
from kefu.sip.uri import (
    Params,
    SipUri,
    find_param,
    format_params,
    is_digits,
    is_ip_address,
    is_token,
    parse_host,
    parse_params,
    parse_port,
    quoted_string_end,
    set_param,
    split_outside_quotes,
    strip_brackets,
)

__all__ = [
    "MAGIC_COOKIE",
    "CSeq",
    "NameAddr",
    "Params",
    "SipUri",
    "Via",
    "is_token",
    "quote_string",
    "split_list",
    "strip_brackets",
    "parse_params",
    "canonical_name",
    "format_params",
    "is_list_header",
    "unquote_string",
]

# RFC 3261 §25.1 token characters.
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~")
_WS_RE = re.compile(r"\s")
_MAX_CSEQ = 2**31 - 1
MAGIC_COOKIE = "z9hG4bK"
"""RFC 3261 §8.1.1.7: branch prefix marking an RFC 3261 transaction id."""


def unquote_string(quoted: str) -> str:
    """The text of a quoted-string (RFC 3261 §25.1), quotes removed and quoted-pairs undone."""
    inner = quoted[1:-1]
    if "\\" not in inner:
        return inner
    out: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\" and i + 1 < len(inner):
            out.append(inner[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def quote_string(text: str) -> str:
    """``text`` as a quoted-string, escaping backslash and double quote."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def split_list(value: str) -> list[str]:
    """Split a comma-separated header value (RFC 3261 §7.3.1) into stripped elements.

    Commas inside quoted strings and ``<...>`` do not split; empty elements are dropped,
    as RFC 7230 §7 asks of recipients of ``#rule`` lists.
    """
    if "," not in value:
        stripped = value.strip()
        return [stripped] if stripped else []
    return [p for p in (s.strip() for s in split_outside_quotes(value, ",", angles=True)) if p]


# RFC 3261 §7.3.3 plus the extensions that define compact forms (RFC 3515 r, RFC 3892 b,
# RFC 4028 x, RFC 6665 o/u, RFC 3841 a/j/d, RFC 8224 y).
_COMPACT = dict(
    pair.split("=")
    for pair in (
        "a=Accept-Contact b=Referred-By c=Content-Type d=Request-Disposition e=Content-Encoding "
        "f=From i=Call-ID j=Reject-Contact k=Supported l=Content-Length m=Contact o=Event "
        "r=Refer-To s=Subject t=To u=Allow-Events v=Via x=Session-Expires y=Identity"
    ).split()
)

_KNOWN = (
    "Accept Accept-Contact Accept-Encoding Accept-Language Alert-Info Allow Allow-Events "
    "Authentication-Info Authorization Call-ID Call-Info Contact Content-Disposition "
    "Content-Encoding Content-Language Content-Length Content-Type CSeq Date Error-Info Event "
    "Expires From History-Info Identity In-Reply-To Max-Forwards Min-Expires Min-SE "
    "MIME-Version Organization P-Asserted-Identity P-Preferred-Identity Path Priority "
    "Privacy Proxy-Authenticate Proxy-Authorization Proxy-Require RAck Reason Record-Route "
    "Refer-Sub Refer-To Referred-By Reject-Contact Replaces Reply-To Request-Disposition "
    "Require Retry-After Route RSeq Security-Client Security-Server Security-Verify Server "
    "Service-Route Session-Expires SIP-ETag SIP-If-Match Subject Subscription-State "
    "Supported Target-Dialog Timestamp To Unsupported User-Agent Via Warning WWW-Authenticate"
).split()

_CANONICAL: dict[str, str] = {name.lower(): name for name in _KNOWN}
_CANONICAL.update(_COMPACT)

# Headers whose grammar is a comma-separated list (RFC 3261 §7.3.1); others (From, To,
# Call-ID, WWW-Authenticate with its own commas, Date...) are never split.
_LIST_HEADERS = frozenset(
    name.lower()
    for name in (
        "Accept Accept-Contact Accept-Encoding Accept-Language Alert-Info Allow Allow-Events "
        "Call-Info Contact Content-Encoding Content-Language Error-Info History-Info "
        "In-Reply-To P-Asserted-Identity P-Preferred-Identity Path Proxy-Require Reason "
        "Record-Route Reject-Contact Request-Disposition Require Route Security-Client "
        "Security-Server Security-Verify Service-Route Supported Unsupported Via Warning"
    ).split()
)


def canonical_name(name: str) -> str:
    """Canonical spelling of a header name; compact forms expanded; unknown names kept."""
    return _CANONICAL.get(name.lower(), name)


def is_list_header(name: str) -> bool:
    """True when header ``name`` (canonical or not, any case) is a comma-separated list."""
    return name.lower() in _LIST_HEADERS


@dataclass(frozen=True, slots=True)
class NameAddr:
    """From, To, Contact, Route, Record-Route, Refer-To values (RFC 3261 §20.10, §25.1).

    Both ``name-addr`` (``"Bob" <sip:bob@b.example>;tag=1``) and the bare ``addr-spec``
    form (``sip:bob@b.example;tag=1``) parse; in the bare form every ';' parameter belongs
    to the header, not the URI (RFC 3261 §20). Serialization always uses ``<>``.
    """

    uri: SipUri
    """RFC 3261 §20.10 addr-spec."""
    display_name: str | None = None
    """RFC 3261 §25.1 display-name, quotes removed and quoted-pairs undone."""
    params: Params = ()
    """RFC 3261 §20.20/§20.39 header parameters in order (tag, expires, q, ...)."""

    @classmethod
    def parse(cls, text: str) -> NameAddr:
        s = text.strip()
        if not s:
            raise SipParseError("empty address")
        display: str | None = None
        if s[0] == '"':
            end = quoted_string_end(s, 0)
            display = unquote_string(s[:end])
            rest = s[end:].lstrip()
            if not rest.startswith("<"):
                raise SipParseError("quoted display name not followed by '<'")
        else:
            lt = s.find("<")
            if lt < 0:
                return cls._parse_addr_spec(s)
            words = s[:lt].split()
            if not all(is_token(w) for w in words):
                raise SipParseError(f"bad display name {s[:lt].strip()!r}")
            display = " ".join(words) if words else None
            rest = s[lt:]
        gt = rest.find(">")
        if gt < 0:
            raise SipParseError("'<' without '>'")
        inner = rest[1:gt]
        if inner != inner.strip():
            raise SipParseError("whitespace inside '<>'")
        uri = SipUri.parse(inner)
        after = rest[gt + 1 :].strip()
        params: Params = ()
        if after:
            if after[0] != ";":
                raise SipParseError(f"junk after '>': {after[:40]!r}")
            params = parse_params(after[1:])
        return cls(uri, display, params)

    @classmethod
    def _parse_addr_spec(cls, s: str) -> NameAddr:
        semi = s.find(";")
        uri_text = (s if semi < 0 else s[:semi]).strip()
        # RFC 3261 §20: such URIs must be in <>; guessing where they end invites misrouting.
        if "?" in uri_text or "," in uri_text:
            raise SipParseError("URI with '?' or ',' outside '<>'")
        uri = SipUri.parse(uri_text)
        params = parse_params(s[semi + 1 :]) if semi >= 0 else ()
        return cls(uri, None, params)

    def __str__(self) -> str:
        name = "" if self.display_name is None else quote_string(self.display_name) + " "
        return f"{name}<{self.uri}>{format_params(self.params)}"

    @property
    def tag(self) -> str | None:
        """RFC 3261 §19.3 ``tag`` parameter."""
        return find_param(self.params, "tag")[1]

    def param(self, name: str) -> str | None:
        return find_param(self.params, name)[1]

    def has_param(self, name: str) -> bool:
        return find_param(self.params, name)[0]

    def with_param(self, name: str, value: str | None = None) -> NameAddr:
        return NameAddr(self.uri, self.display_name, set_param(self.params, name, value))

    def with_tag(self, tag: str) -> NameAddr:
        """Copy with ``tag`` set, as a UAS does on To (RFC 3261 §8.2.6.2)."""
        return self.with_param("tag", tag)


@dataclass(frozen=True, slots=True)
class Via:
    """One Via entry (RFC 3261 §20.42, §18.2.1; RFC 3581 rport; RFC 5118 IPv6)."""

    transport: str
    """RFC 3261 §20.42 transport, upper-cased (UDP, TCP, TLS, SCTP, WS, WSS...)."""
    host: str
    """RFC 3261 §20.42 sent-by host; IPv6 in brackets (RFC 5118 §4.5)."""
    port: int | None = None
    """RFC 3261 §20.42 sent-by port; None when absent."""
    params: Params = ()
    """RFC 3261 §20.42 via-params in order: branch, received, rport, maddr, ttl, extensions."""
    protocol: str = "SIP/2.0"
    """RFC 3261 §20.42 sent-protocol name/version, normalised to upper case."""

    @classmethod
    def parse(cls, text: str) -> Via:
        pieces = text.split("/", 2)
        if len(pieces) != 3:
            raise SipParseError("Via without protocol/version/transport")
        name, version = pieces[0].strip(), pieces[1].strip()
        rest = pieces[2].lstrip()
        i = 0
        while i < len(rest) and rest[i] in _TOKEN_CHARS:
            i += 1
        transport = rest[:i]
        if not is_token(name) or not is_token(version) or not transport:
            raise SipParseError("bad Via sent-protocol")
        if i == len(rest) or rest[i] not in " \t":
            raise SipParseError("Via without sent-by")
        rest = rest[i:].strip()
        semi = rest.find(";")
        sent_by = rest if semi < 0 else rest[:semi]
        host_text, colon, port_text = _split_sent_by(sent_by)
        parse_host(host_text)
        port = parse_port(port_text) if colon else None
        params = parse_params(rest[semi + 1 :]) if semi >= 0 else ()
        via = cls(transport.upper(), host_text, port, params, f"{name}/{version}".upper())
        via._check_params()
        return via

    def _check_params(self) -> None:
        for name, value in self.params:
            lname = name.lower()
            if lname == "branch" and (value is None or not is_token(value)):
                raise SipParseError("bad Via branch")
            if lname == "received" and (value is None or not is_ip_address(value)):
                raise SipParseError("bad Via received")
            if lname == "rport" and value is not None:
                parse_port(value)
            if lname == "ttl" and (value is None or not is_digits(value) or int(value) > 255):
                raise SipParseError("bad Via ttl")
            if lname == "maddr":
                parse_host(value or "")

    def __str__(self) -> str:
        port = "" if self.port is None else f":{self.port}"
        return f"{self.protocol}/{self.transport} {self.host}{port}{format_params(self.params)}"

    @property
    def branch(self) -> str | None:
        """RFC 3261 §8.1.1.7 branch; the transaction id when it starts with z9hG4bK."""
        return find_param(self.params, "branch")[1]

    @property
    def has_rfc3261_branch(self) -> bool:
        """True when the branch carries the magic cookie and something after it (RFC 4475
        §3.2.1 badbranch: a bare cookie falls back to RFC 2543 matching)."""
        b = self.branch
        return b is not None and b.startswith(MAGIC_COOKIE) and len(b) > len(MAGIC_COOKIE)

    @property
    def received(self) -> str | None:
        """RFC 3261 §18.2.1 received: the source address the server saw."""
        return find_param(self.params, "received")[1]

    @property
    def rport_requested(self) -> bool:
        """RFC 3581 §3: the client sent a valueless (or valued) rport parameter."""
        return find_param(self.params, "rport")[0]

    @property
    def rport(self) -> int | None:
        """RFC 3581 §4: the source port filled in by the server, if any."""
        value = find_param(self.params, "rport")[1]
        return None if value is None else int(value)

    @property
    def maddr(self) -> str | None:
        """RFC 3261 §20.42 maddr."""
        return find_param(self.params, "maddr")[1]

    @property
    def ttl(self) -> int | None:
        """RFC 3261 §20.42 ttl (multicast)."""
        value = find_param(self.params, "ttl")[1]
        return None if value is None else int(value)

    @property
    def sent_by(self) -> tuple[str, int]:
        """(host, port) with the transport's default port filled in (RFC 3261 §18.2.2)."""
        if self.port is not None:
            return self.host, self.port
        return self.host, 5061 if self.transport in ("TLS", "WSS") else 5060

    def param(self, name: str) -> str | None:
        return find_param(self.params, name)[1]

    def with_param(self, name: str, value: str | None = None) -> Via:
        return Via(
            self.transport,
            self.host,
            self.port,
            set_param(self.params, name, value),
            self.protocol,
        )

    def with_received(self, host: str, port: int) -> Via:
        """Stamp the packet's source address as a server transport does on receipt.

        RFC 3261 §18.2.1: add ``received`` when the sent-by host differs from the source
        address; RFC 3581 §4: when ``rport`` is present, always add ``received`` and fill
        ``rport`` with the source port. IPv6 ``received`` values go without brackets
        (RFC 3261 §25.1 ABNF; RFC 5118 §4.5 asks receivers to accept both).
        """
        bare = strip_brackets(host)
        params = self.params
        if self.rport_requested:
            params = set_param(params, "received", bare)
            params = set_param(params, "rport", str(port))
        elif strip_brackets(self.host) != bare:
            params = set_param(params, "received", bare)
        else:
            return self
        return Via(self.transport, self.host, self.port, params, self.protocol)


def _split_sent_by(text: str) -> tuple[str, str, str]:
    """(host, ':' or '', port) with SWS allowed around the colon (RFC 3261 §25.1 COLON)."""
    text = text.strip()
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise SipParseError("unterminated IPv6 reference in Via")
        host, rest = text[: close + 1], text[close + 1 :].strip()
    else:
        host, sep, port = text.partition(":")
        host, rest = host.strip(), (sep + port).strip()
        if _WS_RE.search(host):
            raise SipParseError(f"whitespace in Via host {host!r}")
    if not rest:
        return host, "", ""
    if rest[0] != ":":
        raise SipParseError(f"junk after Via host: {rest[:40]!r}")
    return host, ":", rest[1:].strip()


@dataclass(frozen=True, slots=True)
class CSeq:
    """CSeq header (RFC 3261 §20.16, §8.1.1.5)."""

    seq: int
    """RFC 3261 §8.1.1.5 sequence number, 0 .. 2**31-1."""
    method: str
    """RFC 3261 §20.16 method, case-sensitive, must equal the request's method."""

    def __post_init__(self) -> None:
        if not 0 <= self.seq <= _MAX_CSEQ:
            raise SipParseError(f"CSeq number {self.seq} outside 0..2**31-1")

    @classmethod
    def parse(cls, text: str) -> CSeq:
        parts = text.split()
        if len(parts) != 2:
            raise SipParseError("CSeq must be '<number> <method>'")
        number, method = parts
        # Bound the digit count first: int() on a huge string is slow and pointless.
        if not is_digits(number) or len(number) > 10:
            raise SipParseError(f"bad CSeq number {number[:20]!r}")
        if not is_token(method):
            raise SipParseError(f"bad CSeq method {method!r}")
        return cls(int(number), method)

    def __str__(self) -> str:
        return f"{self.seq} {self.method}"
