"""SIP header value objects (RFC 3261 §19.1, §20, §25; RFC 5118; RFC 3581).

Every value object is frozen, has ``parse(text)`` raising :class:`kefu.errors.SipParseError`
(with ``header`` unset: the caller knows which header it was parsing and re-raises with it),
and ``__str__`` giving the wire form.

Policy: be liberal in what we accept where RFC 4475/5118 say a parser must cope (LWS almost
anywhere, unusual token characters, escaped octets kept verbatim), strict where accepting
would make us act on something ambiguous (unbalanced quotes, whitespace inside ``<>``, a bare
addr-spec carrying ``?``/``,``, a port that is not a number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from kefu.errors import SipParseError

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
    "format_params",
    "unquote_string",
]

Params = tuple[tuple[str, str | None], ...]
"""Ordered (name, value) pairs; value None for a valueless parameter such as ``lr``."""

# RFC 3261 §25.1 token characters.
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.!%*_+`'~")
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-.!%*_+`'~]+")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_.])?")
_IPV6_REF_RE = re.compile(r"\[[0-9A-Fa-f:.]+\]")
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_WS_RE = re.compile(r"\s")
_MAX_CSEQ = 2**31 - 1
MAGIC_COOKIE = "z9hG4bK"
"""RFC 3261 §8.1.1.7: branch prefix marking an RFC 3261 transaction id."""


def is_token(text: str) -> bool:
    """True when ``text`` is a non-empty RFC 3261 token."""
    return _TOKEN_RE.fullmatch(text) is not None


def _is_digits(text: str) -> bool:
    # str.isdigit() accepts non-ASCII digits such as '²'; the wire grammar does not.
    return bool(text) and text.isascii() and text.isdigit()


def _quoted_end(text: str, start: int) -> int:
    """Index just past the quoted-string opening at ``text[start]`` (a '"')."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    raise SipParseError("unterminated quoted string")


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


def _split(text: str, sep: str, *, angles: bool) -> list[str]:
    """Split on ``sep`` outside quoted strings (and outside ``<>`` when ``angles``)."""
    if sep not in text:
        return [text]
    parts: list[str] = []
    depth = 0
    last = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            try:
                i = _quoted_end(text, i)
            except SipParseError:
                # An unbalanced quote swallows the rest; the element parser reports it.
                break
            continue
        if angles and c == "<":
            depth += 1
        elif angles and c == ">" and depth:
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[last:i])
            last = i + 1
        i += 1
    parts.append(text[last:])
    return parts


def split_list(value: str) -> list[str]:
    """Split a comma-separated header value (RFC 3261 §7.3.1) into stripped elements.

    Commas inside quoted strings and ``<...>`` do not split; empty elements are dropped,
    as RFC 7230 §7 asks of recipients of ``#rule`` lists.
    """
    if "," not in value:
        stripped = value.strip()
        return [stripped] if stripped else []
    return [p for p in (s.strip() for s in _split(value, ",", angles=True)) if p]


def parse_params(text: str) -> Params:
    """Parse ``name[=value]`` pairs separated by ';' (``text`` starts after the first ';').

    LWS around ';' and '=' is allowed (RFC 3261 §25.1 SEMI, EQUAL). Values may be tokens,
    quoted strings (kept with their quotes) or IPv6 references.
    """
    out: list[tuple[str, str | None]] = []
    for raw in _split(text, ";", angles=False):
        eq = raw.find("=")
        if eq < 0:
            name = raw.strip()
            value: str | None = None
        else:
            name = raw[:eq].strip()
            value = raw[eq + 1 :].strip()
            if not value:
                raise SipParseError(f"parameter {name!r} has '=' but no value")
            if value[0] == '"':
                if _quoted_end(value, 0) != len(value):
                    raise SipParseError(f"text after quoted value of parameter {name!r}")
            elif _WS_RE.search(value):
                raise SipParseError(f"whitespace in value of parameter {name!r}")
        if not is_token(name):
            raise SipParseError(f"bad parameter name {name!r}")
        out.append((name, value))
    return tuple(out)


def format_params(params: Params) -> str:
    """Wire form of ``params``, each prefixed by ';'."""
    return "".join(f";{n}" if v is None else f";{n}={v}" for n, v in params)


def _find_param(params: Params, name: str) -> tuple[bool, str | None]:
    lname = name.lower()
    for n, v in params:
        if n.lower() == lname:
            return True, v
    return False, None


def _set_param(params: Params, name: str, value: str | None) -> Params:
    """Replace ``name`` in place (keeping order), or append it."""
    lname = name.lower()
    out: list[tuple[str, str | None]] = []
    found = False
    for n, v in params:
        if n.lower() == lname:
            if not found:
                out.append((n, value))
                found = True
        else:
            out.append((n, v))
    if not found:
        out.append((name, value))
    return tuple(out)


def _parse_host(text: str) -> str:
    """Validate a host (hostname, IPv4address or IPv6reference) and return it unchanged."""
    if text.startswith("["):
        if ":" not in text or not _IPV6_REF_RE.fullmatch(text):
            raise SipParseError(f"bad IPv6 reference {text!r}")
    elif not _HOSTNAME_RE.fullmatch(text):
        raise SipParseError(f"bad host {text!r}")
    return text


def _parse_port(text: str) -> int:
    if not _is_digits(text) or len(text) > 5 or int(text) > 65535:
        raise SipParseError(f"bad port {text!r}")
    return int(text)


def _split_hostport(text: str) -> tuple[str, int | None]:
    """host [":" port], IPv6 references in brackets (RFC 5118 §4.4)."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise SipParseError(f"unterminated IPv6 reference in {text!r}")
        host = text[: close + 1]
        rest = text[close + 1 :]
    else:
        colon = text.find(":")
        host, rest = (text, "") if colon < 0 else (text[:colon], text[colon:])
    _parse_host(host)
    if not rest:
        return host, None
    if rest[0] != ":":
        raise SipParseError(f"junk after host in {text!r}")
    return host, _parse_port(rest[1:])


def strip_brackets(host: str) -> str:
    """``[2001:db8::1]`` -> ``2001:db8::1``; other hosts unchanged."""
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


@dataclass(frozen=True, slots=True)
class SipUri:
    """A SIP/SIPS URI (RFC 3261 §19.1), a tel URI (RFC 3966) or an opaque absolute URI.

    Escaped octets (``%41``) are kept exactly as received so that serialization reproduces
    the input; compare with :meth:`unescaped_user` when escapes matter (RFC 3261 §19.1.4).
    Schemes other than sip/sips/tel are kept opaque so a message carrying them still parses
    and the UAS can answer 416 (RFC 3261 §8.2.2.1).
    """

    scheme: str = "sip"
    """RFC 3261 §19.1.1: lower-cased scheme: "sip", "sips", "tel" or another (opaque)."""
    user: str | None = None
    """RFC 3261 §19.1.1 userinfo user part, escapes kept; for tel: the telephone-subscriber."""
    password: str | None = None
    """RFC 3261 §19.1.1 password after ':' in userinfo (NOT RECOMMENDED, still parsed)."""
    host: str = ""
    """RFC 3261 §19.1.1 host; IPv6 references keep their brackets (RFC 5118 §4.4)."""
    port: int | None = None
    """RFC 3261 §19.1.1 port; None when absent (default 5060, 5061 for sips)."""
    params: Params = ()
    """RFC 3261 §19.1.1 uri-parameters in order (transport, user, method, ttl, maddr, lr...)."""
    headers: tuple[tuple[str, str], ...] = ()
    """RFC 3261 §19.1.1 headers component after '?', escapes kept."""
    opaque: str | None = None
    """Everything after ``scheme:`` for schemes this parser does not understand."""

    @classmethod
    def parse(cls, text: str) -> SipUri:
        m = _SCHEME_RE.match(text)
        if m is None:
            raise SipParseError(f"URI without a scheme: {text[:80]!r}")
        scheme = text[: m.end() - 1].lower()
        rest = text[m.end() :]
        if not rest or _WS_RE.search(rest) or "<" in rest or ">" in rest:
            raise SipParseError(f"bad URI {text[:80]!r}")
        if scheme in ("sip", "sips"):
            return cls._parse_sip(scheme, rest)
        if scheme == "tel":
            number, _, ptext = rest.partition(";")
            if not number:
                raise SipParseError("tel URI without a number")
            return cls(scheme="tel", user=number, params=parse_params(ptext) if ptext else ())
        return cls(scheme=scheme, opaque=rest)

    @classmethod
    def _parse_sip(cls, scheme: str, rest: str) -> SipUri:
        user: str | None = None
        password: str | None = None
        # '@' cannot appear unescaped in params or headers, so the first one ends userinfo.
        at = rest.find("@")
        if at >= 0:
            userinfo = rest[:at]
            rest = rest[at + 1 :]
            colon = userinfo.find(":")
            if colon >= 0:
                user, password = userinfo[:colon], userinfo[colon + 1 :]
            else:
                user = userinfo
            if not user:
                raise SipParseError("empty user part before '@'")
        headers: tuple[tuple[str, str], ...] = ()
        q = rest.find("?")
        if q >= 0:
            htext = rest[q + 1 :]
            rest = rest[:q]
            pairs = []
            for item in htext.split("&"):
                name, eq, value = item.partition("=")
                if not name or not eq:
                    raise SipParseError(f"bad URI header {item!r}")
                pairs.append((name, value))
            headers = tuple(pairs)
        semi = rest.find(";")
        params: Params = ()
        if semi >= 0:
            params = parse_params(rest[semi + 1 :])
            rest = rest[:semi]
        host, port = _split_hostport(rest)
        return cls(scheme, user, password, host, port, params, headers)

    def __str__(self) -> str:
        if self.opaque is not None:
            return f"{self.scheme}:{self.opaque}"
        if self.scheme == "tel":
            return f"tel:{self.user or ''}{format_params(self.params)}"
        parts = [self.scheme, ":"]
        if self.user is not None:
            parts.append(self.user)
            if self.password is not None:
                parts += [":", self.password]
            parts.append("@")
        parts.append(self.host)
        if self.port is not None:
            parts += [":", str(self.port)]
        parts.append(format_params(self.params))
        if self.headers:
            parts += ["?", "&".join(f"{n}={v}" for n, v in self.headers)]
        return "".join(parts)

    @property
    def is_sip(self) -> bool:
        """True for sip: and sips: URIs (those with a host to route to)."""
        return self.scheme in ("sip", "sips")

    @property
    def bare_host(self) -> str:
        """The host without IPv6 brackets, ready for socket calls."""
        return strip_brackets(self.host)

    @property
    def transport(self) -> str | None:
        """RFC 3261 §19.1.1 ``transport`` parameter, lower-cased."""
        value = self.param("transport")
        return value.lower() if value else None

    @property
    def lr(self) -> bool:
        """RFC 3261 §19.1.1 loose-routing flag."""
        return self.has_param("lr")

    @property
    def default_port(self) -> int:
        """RFC 3261 §19.1.2: 5061 for sips, 5060 otherwise."""
        return 5061 if self.scheme == "sips" else 5060

    def unescaped_user(self) -> str | None:
        """The user part with %XX escapes decoded (RFC 3261 §19.1.4 comparison)."""
        return None if self.user is None else _unescape(self.user)

    def has_param(self, name: str) -> bool:
        return _find_param(self.params, name)[0]

    def param(self, name: str) -> str | None:
        """Value of parameter ``name`` (case-insensitive); None if absent or valueless."""
        return _find_param(self.params, name)[1]

    def with_param(self, name: str, value: str | None = None) -> SipUri:
        """Copy with ``name`` set (replaced in place or appended); value None = valueless."""
        return replace(self, params=_set_param(self.params, name, value))

    def with_params(self, **params: str | None) -> SipUri:
        """Copy with several parameters set; ``None`` values are valueless (``lr=None``)."""
        new = self.params
        for name, value in params.items():
            new = _set_param(new, name, value)
        return replace(self, params=new)

    def without_param(self, name: str) -> SipUri:
        lname = name.lower()
        return replace(self, params=tuple(p for p in self.params if p[0].lower() != lname))

    def without_headers(self) -> SipUri:
        """Copy without the ``?headers`` part (RFC 3261 §12.1.1 targets must not carry it)."""
        return replace(self, headers=())


def _unescape(text: str) -> str:
    if "%" not in text:
        return text
    out = bytearray()
    i = 0
    raw = text.encode("utf-8", "surrogateescape")
    while i < len(raw):
        if raw[i] == 0x25 and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def _is_hex(two: bytes) -> bool:
    return len(two) == 2 and all(c in b"0123456789abcdefABCDEF" for c in two)


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
            end = _quoted_end(s, 0)
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
        return _find_param(self.params, "tag")[1]

    def param(self, name: str) -> str | None:
        return _find_param(self.params, name)[1]

    def has_param(self, name: str) -> bool:
        return _find_param(self.params, name)[0]

    def with_param(self, name: str, value: str | None = None) -> NameAddr:
        return NameAddr(self.uri, self.display_name, _set_param(self.params, name, value))

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
        _parse_host(host_text)
        port = _parse_port(port_text) if colon else None
        params = parse_params(rest[semi + 1 :]) if semi >= 0 else ()
        via = cls(transport.upper(), host_text, port, params, f"{name}/{version}".upper())
        via._check_params()
        return via

    def _check_params(self) -> None:
        for name, value in self.params:
            lname = name.lower()
            if lname == "branch" and (value is None or not is_token(value)):
                raise SipParseError("bad Via branch")
            if lname == "received" and (value is None or not _is_address(value)):
                raise SipParseError("bad Via received")
            if lname == "rport" and value is not None:
                _parse_port(value)
            if lname == "ttl" and (value is None or not _is_digits(value) or int(value) > 255):
                raise SipParseError("bad Via ttl")
            if lname == "maddr":
                _parse_host(value or "")

    def __str__(self) -> str:
        port = "" if self.port is None else f":{self.port}"
        return f"{self.protocol}/{self.transport} {self.host}{port}{format_params(self.params)}"

    @property
    def branch(self) -> str | None:
        """RFC 3261 §8.1.1.7 branch; the transaction id when it starts with z9hG4bK."""
        return _find_param(self.params, "branch")[1]

    @property
    def has_rfc3261_branch(self) -> bool:
        """True when the branch carries the magic cookie and something after it (RFC 4475
        §3.2.1 badbranch: a bare cookie falls back to RFC 2543 matching)."""
        b = self.branch
        return b is not None and b.startswith(MAGIC_COOKIE) and len(b) > len(MAGIC_COOKIE)

    @property
    def received(self) -> str | None:
        """RFC 3261 §18.2.1 received: the source address the server saw."""
        return _find_param(self.params, "received")[1]

    @property
    def rport_requested(self) -> bool:
        """RFC 3581 §3: the client sent a valueless (or valued) rport parameter."""
        return _find_param(self.params, "rport")[0]

    @property
    def rport(self) -> int | None:
        """RFC 3581 §4: the source port filled in by the server, if any."""
        value = _find_param(self.params, "rport")[1]
        return None if value is None else int(value)

    @property
    def maddr(self) -> str | None:
        """RFC 3261 §20.42 maddr."""
        return _find_param(self.params, "maddr")[1]

    @property
    def ttl(self) -> int | None:
        """RFC 3261 §20.42 ttl (multicast)."""
        value = _find_param(self.params, "ttl")[1]
        return None if value is None else int(value)

    @property
    def sent_by(self) -> tuple[str, int]:
        """(host, port) with the transport's default port filled in (RFC 3261 §18.2.2)."""
        if self.port is not None:
            return self.host, self.port
        return self.host, 5061 if self.transport in ("TLS", "WSS") else 5060

    def param(self, name: str) -> str | None:
        return _find_param(self.params, name)[1]

    def with_param(self, name: str, value: str | None = None) -> Via:
        return Via(
            self.transport,
            self.host,
            self.port,
            _set_param(self.params, name, value),
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
            params = _set_param(params, "received", bare)
            params = _set_param(params, "rport", str(port))
        elif strip_brackets(self.host) != bare:
            params = _set_param(params, "received", bare)
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


def _is_address(value: str) -> bool:
    if _IPV4_RE.fullmatch(value):
        return True
    bracketed = value if value.startswith("[") else f"[{value}]"
    return ":" in value and bool(_IPV6_REF_RE.fullmatch(bracketed))


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
        if not _is_digits(number) or len(number) > 10:
            raise SipParseError(f"bad CSeq number {number[:20]!r}")
        if not is_token(method):
            raise SipParseError(f"bad CSeq method {method!r}")
        return cls(int(number), method)

    def __str__(self) -> str:
        return f"{self.seq} {self.method}"
