"""SIP, SIPS and tel URIs (RFC 3261 §19.1, RFC 3966, RFC 5118) and the RFC 3261 §25.1
building blocks they share with header values: tokens, quoted strings, ';' parameters,
hosts and ports.

:mod:`kefu.sip.headers` builds its value objects on these and re-exports :class:`SipUri`,
:data:`Params`, :func:`is_token`, :func:`parse_params`, :func:`format_params` and
:func:`strip_brackets`, so imports from there keep working.

Policy (as in :mod:`kefu.sip.headers`): liberal where RFC 4475/5118 say a parser must cope
(escaped octets kept verbatim, unusual token characters), strict where accepting would make
us act on something ambiguous (whitespace or ``<>`` inside a URI, a port that is not a
number).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from kefu.errors import SipParseError

__all__ = [
    "Params",
    "SipUri",
    "find_param",
    "format_params",
    "is_digits",
    "is_ip_address",
    "is_token",
    "parse_host",
    "parse_params",
    "parse_port",
    "quoted_string_end",
    "set_param",
    "split_outside_quotes",
    "strip_brackets",
]

Params = tuple[tuple[str, str | None], ...]
"""Ordered (name, value) pairs; value None for a valueless parameter such as ``lr``."""

# RFC 3261 §25.1 token characters.
_TOKEN_RE = re.compile(r"[A-Za-z0-9\-.!%*_+`'~]+")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_.])?")
_IPV6_REF_RE = re.compile(r"\[[0-9A-Fa-f:.]+\]")
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_WS_RE = re.compile(r"\s")


def is_token(text: str) -> bool:
    """True when ``text`` is a non-empty RFC 3261 token."""
    return _TOKEN_RE.fullmatch(text) is not None


def is_digits(text: str) -> bool:
    """True when ``text`` is a non-empty run of ASCII digits."""
    # str.isdigit() accepts non-ASCII digits such as '²'; the wire grammar does not.
    return bool(text) and text.isascii() and text.isdigit()


def quoted_string_end(text: str, start: int) -> int:
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


def split_outside_quotes(text: str, sep: str, *, angles: bool) -> list[str]:
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
                i = quoted_string_end(text, i)
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


def parse_params(text: str) -> Params:
    """Parse ``name[=value]`` pairs separated by ';' (``text`` starts after the first ';').

    LWS around ';' and '=' is allowed (RFC 3261 §25.1 SEMI, EQUAL). Values may be tokens,
    quoted strings (kept with their quotes) or IPv6 references.
    """
    out: list[tuple[str, str | None]] = []
    for raw in split_outside_quotes(text, ";", angles=False):
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
                if quoted_string_end(value, 0) != len(value):
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


def find_param(params: Params, name: str) -> tuple[bool, str | None]:
    """(present, value) of parameter ``name``, compared case-insensitively."""
    lname = name.lower()
    for n, v in params:
        if n.lower() == lname:
            return True, v
    return False, None


def set_param(params: Params, name: str, value: str | None) -> Params:
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


def parse_host(text: str) -> str:
    """Validate a host (hostname, IPv4address or IPv6reference) and return it unchanged."""
    if text.startswith("["):
        if ":" not in text or not _IPV6_REF_RE.fullmatch(text):
            raise SipParseError(f"bad IPv6 reference {text!r}")
    elif not _HOSTNAME_RE.fullmatch(text):
        raise SipParseError(f"bad host {text!r}")
    return text


def parse_port(text: str) -> int:
    """A port number 0..65535 (RFC 3261 §25.1 port = 1*DIGIT, bounded by TCP/UDP)."""
    if not is_digits(text) or len(text) > 5 or int(text) > 65535:
        raise SipParseError(f"bad port {text!r}")
    return int(text)


def is_ip_address(value: str) -> bool:
    """True for an IPv4 address or an IPv6 address, bracketed or not (Via ``received``)."""
    if _IPV4_RE.fullmatch(value):
        return True
    bracketed = value if value.startswith("[") else f"[{value}]"
    return ":" in value and bool(_IPV6_REF_RE.fullmatch(bracketed))


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def in_networks(host: str, networks: Iterable[IpNetwork]) -> bool:
    """Whether the IP address ``host`` (IPv4-mapped IPv6 counts as IPv4; a zone id is ignored)
    lies in one of ``networks``; a host name is in none."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in net for net in networks)


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
    parse_host(host)
    if not rest:
        return host, None
    if rest[0] != ":":
        raise SipParseError(f"junk after host in {text!r}")
    return host, parse_port(rest[1:])


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
        return find_param(self.params, name)[0]

    def param(self, name: str) -> str | None:
        """Value of parameter ``name`` (case-insensitive); None if absent or valueless."""
        return find_param(self.params, name)[1]

    def with_param(self, name: str, value: str | None = None) -> SipUri:
        """Copy with ``name`` set (replaced in place or appended); value None = valueless."""
        return replace(self, params=set_param(self.params, name, value))

    def with_params(self, **params: str | None) -> SipUri:
        """Copy with several parameters set; ``None`` values are valueless (``lr=None``)."""
        new = self.params
        for name, value in params.items():
            new = set_param(new, name, value)
        return replace(self, params=new)

    def without_param(self, name: str) -> SipUri:
        lname = name.lower()
        return replace(self, params=tuple(p for p in self.params if p[0].lower() != lname))

    def without_headers(self) -> SipUri:
        """Copy without the ``?headers`` part (RFC 3261 §12.1.1 targets must not carry it)."""
        return replace(self, headers=())

    def equivalent(self, other: SipUri) -> bool:
        """RFC 3261 §19.1.4 URI equality (sip/sips); other schemes compare as text.

        userinfo is case-sensitive, the rest case-insensitive, escapes are decoded, an absent
        port never equals an explicit 5060, a parameter in both must match, user/ttl/method/
        maddr in only one never match, and header components must all match.
        """
        if not (self.is_sip and other.is_sip):
            return str(self) == str(other)
        if self.scheme != other.scheme or self.port != other.port:
            return False
        if self.unescaped_user() != other.unescaped_user():
            return False
        if _unescape_opt(self.password) != _unescape_opt(other.password):
            return False
        if self.host.lower() != other.host.lower():
            return False
        mine, theirs = _folded(self.params), _folded(other.params)
        for name in mine.keys() | theirs.keys():
            if name in mine and name in theirs:
                if mine[name] != theirs[name]:
                    return False
            elif name in ("user", "ttl", "method", "maddr"):
                return False
        return _folded(self.headers) == _folded(other.headers)


def _unescape_opt(text: str | None) -> str | None:
    return None if text is None else _unescape(text)


def _folded(pairs: tuple[tuple[str, str | None], ...]) -> dict[str, str | None]:
    """Names and values lower-cased and unescaped, for §19.1.4 comparison."""
    return {n.lower(): None if v is None else _unescape(v).lower() for n, v in pairs}


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
