"""HTTP digest authentication for SIP (RFC 3261 §22, RFC 2617, RFC 7616, RFC 8760).

Server side: :class:`DigestServer` issues challenges for ``WWW-Authenticate`` /
``Proxy-Authenticate`` and verifies ``Authorization`` / ``Proxy-Authorization`` values.
Nonces are ``base64url(timestamp || random || HMAC(secret, timestamp || random || realm))``
so a forged nonce is told apart from an old one, and every nonce issued is also remembered
(bounded: ``max_nonces``, oldest evicted first, expired ones purged) with the highest nonce
count accepted for it. That state stops replays (RFC 7616 §3.4, §5.2; RFC 3261 §22.4): with
qop the ``nc`` must strictly increase per nonce, without qop a nonce is good once, and the
``uri`` directive must name the Request-URI (RFC 3261 §19.1.4 equality). A right answer on a
nonce that is expired, used up, evicted or unknown to this node yields ``stale=true``
(RFC 7616 §3.3), so the client retries at once with the fresh nonce of the new challenge.

Client side: :func:`answer_challenge` turns a challenge header value into an ``Authorization``
header value.

Algorithms: MD5, SHA-256, SHA-512-256 (RFC 8760) and their ``-sess`` variants; qop ``auth``,
``auth-int`` and the legacy no-qop form of RFC 2069 that some SIP peers still send.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from kefu.errors import SipParseError
from kefu.sip.uri import SipUri, is_token

__all__ = [
    "AuthResult",
    "DigestAlgorithm",
    "DigestChallenge",
    "DigestCredentials",
    "DigestServer",
    "answer_challenge",
    "compute_response",
    "parse_auth_params",
]


class DigestAlgorithm(StrEnum):
    """Digest algorithm tokens (RFC 7616 §6.1 registry, RFC 8760 §2)."""

    MD5 = "MD5"
    MD5_SESS = "MD5-sess"
    SHA256 = "SHA-256"
    SHA256_SESS = "SHA-256-sess"
    SHA512_256 = "SHA-512-256"
    SHA512_256_SESS = "SHA-512-256-sess"

    @classmethod
    def parse(cls, token: str) -> DigestAlgorithm:
        for alg in cls:
            if alg.value.lower() == token.strip().lower():
                return alg
        raise SipParseError(f"unsupported digest algorithm {token!r}", header="Authorization")

    @property
    def is_session(self) -> bool:
        return self.value.endswith("-sess")

    def hash(self, data: str | bytes) -> str:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        base = self.value.removesuffix("-sess")
        name = {"MD5": "md5", "SHA-256": "sha256", "SHA-512-256": "sha512_256"}[base]
        return hashlib.new(name, raw).hexdigest()


# --- header parameter syntax (RFC 7235 §2.1, RFC 3261 §25.1 quoted-string) ------------------


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def parse_auth_params(value: str, *, header: str = "Authorization") -> tuple[str, dict[str, str]]:
    """Split ``Scheme k=v, k="q\\"s, x"`` into (scheme, {lowercased key: unquoted value}).

    Quoted values may contain commas and backslash escapes; a repeated key is a parse error
    because RFC 7616 §3.4 lets each directive appear once and an attacker could otherwise pick
    which copy a lenient server reads.
    """
    s = value.strip()
    i = 0
    while i < len(s) and s[i] not in " \t":
        i += 1
    scheme = s[:i]
    if not scheme or "=" in scheme:
        raise SipParseError(f"{header}: missing auth scheme", header=header)
    params: dict[str, str] = {}
    n = len(s)
    while True:
        i = _skip_ws(s, i)
        while i < n and s[i] == ",":
            i = _skip_ws(s, i + 1)
        if i >= n:
            break
        start = i
        while i < n and s[i] not in "= \t,":
            i += 1
        key = s[start:i].lower()
        i = _skip_ws(s, i)
        if not is_token(key) or i >= n or s[i] != "=":
            raise SipParseError(f"{header}: expected key=value near {s[start:]!r}", header=header)
        i = _skip_ws(s, i + 1)
        if i < n and s[i] == '"':
            i += 1
            out: list[str] = []
            while True:
                if i >= n:
                    raise SipParseError(f"{header}: unterminated quoted string", header=header)
                ch = s[i]
                if ch == "\\":
                    if i + 1 >= n:
                        raise SipParseError(f"{header}: dangling escape", header=header)
                    out.append(s[i + 1])
                    i += 2
                elif ch == '"':
                    i += 1
                    break
                else:
                    out.append(ch)
                    i += 1
            val = "".join(out)
        else:
            start = i
            while i < n and s[i] not in ", \t":
                i += 1
            val = s[start:i]
        if key in params:
            raise SipParseError(f"{header}: duplicate parameter {key!r}", header=header)
        params[key] = val
        i = _skip_ws(s, i)
        if i < n and s[i] != ",":
            raise SipParseError(f"{header}: expected ',' near {s[i:]!r}", header=header)
    return scheme, params


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- value objects --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DigestChallenge:
    """A ``WWW-Authenticate`` / ``Proxy-Authenticate`` digest challenge (RFC 7616 §3.3)."""

    realm: str
    """Protection space shown to the user (RFC 7616 §3.3 ``realm``)."""
    nonce: str
    """Server-chosen opaque value the response is bound to (RFC 7616 §3.3 ``nonce``)."""
    algorithm: DigestAlgorithm = DigestAlgorithm.MD5
    """Hash algorithm; MD5 when absent (RFC 7616 §3.3 ``algorithm``)."""
    qop: tuple[str, ...] = ()
    """Offered quality-of-protection tokens; empty means RFC 2069 mode (RFC 7616 §3.3 ``qop``)."""
    opaque: str | None = None
    """Value the client must echo unchanged (RFC 7616 §3.3 ``opaque``)."""
    stale: bool = False
    """The previous nonce was genuine but expired; retry without asking the user (§3.3)."""
    domain: str | None = None
    """Space-separated URIs of the protection space (RFC 7616 §3.3 ``domain``)."""
    userhash: bool = False
    """Server supports hashed usernames (RFC 7616 §3.4.4)."""

    @classmethod
    def parse(cls, value: str) -> DigestChallenge:
        scheme, p = parse_auth_params(value, header="WWW-Authenticate")
        if scheme.lower() != "digest":
            raise SipParseError(f"unsupported auth scheme {scheme!r}", header="WWW-Authenticate")
        if "realm" not in p or "nonce" not in p:
            raise SipParseError("digest challenge lacks realm or nonce", header="WWW-Authenticate")
        qop = tuple(t.strip().lower() for t in p.get("qop", "").split(",") if t.strip())
        return cls(
            realm=p["realm"],
            nonce=p["nonce"],
            algorithm=DigestAlgorithm.parse(p.get("algorithm", "MD5")),
            qop=qop,
            opaque=p.get("opaque"),
            stale=p.get("stale", "").lower() == "true",
            domain=p.get("domain"),
            userhash=p.get("userhash", "").lower() == "true",
        )

    def __str__(self) -> str:
        parts = [f"realm={_quote(self.realm)}"]
        if self.domain is not None:
            parts.append(f"domain={_quote(self.domain)}")
        if self.qop:
            parts.append(f"qop={_quote(','.join(self.qop))}")
        parts.append(f"algorithm={self.algorithm.value}")
        parts.append(f"nonce={_quote(self.nonce)}")
        if self.opaque is not None:
            parts.append(f"opaque={_quote(self.opaque)}")
        if self.stale:
            parts.append("stale=true")
        if self.userhash:
            parts.append("userhash=true")
        return "Digest " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class DigestCredentials:
    """An ``Authorization`` / ``Proxy-Authorization`` digest answer (RFC 7616 §3.4)."""

    username: str
    """User name, or its hash when ``userhash`` (RFC 7616 §3.4 ``username``)."""
    realm: str
    """Realm copied from the challenge (RFC 7616 §3.4)."""
    nonce: str
    """Nonce copied from the challenge (RFC 7616 §3.4)."""
    uri: str
    """Request-URI the response covers (RFC 7616 §3.4 ``uri``, RFC 3261 §22.4)."""
    response: str
    """Hex digest proving knowledge of the password (RFC 7616 §3.4.1)."""
    algorithm: DigestAlgorithm = DigestAlgorithm.MD5
    """Algorithm used; MD5 when absent (RFC 7616 §3.4)."""
    qop: str | None = None
    """Chosen quality of protection; None in RFC 2069 mode (RFC 7616 §3.4)."""
    cnonce: str | None = None
    """Client nonce, required with qop (RFC 7616 §3.4)."""
    nc: int | None = None
    """Nonce count, sent as 8 hex digits, required with qop (RFC 7616 §3.4)."""
    opaque: str | None = None
    """Echo of the challenge's opaque (RFC 7616 §3.4)."""
    userhash: bool = False
    """``username`` is H(user:realm) (RFC 7616 §3.4.4)."""
    extra: tuple[tuple[str, str], ...] = field(default=())
    """Unknown directives, kept for diagnostics (RFC 7616 §3.4 auth-param)."""

    @classmethod
    def parse(cls, value: str) -> DigestCredentials:
        h = "Authorization"
        scheme, p = parse_auth_params(value, header=h)
        if scheme.lower() != "digest":
            raise SipParseError(f"unsupported auth scheme {scheme!r}", header=h)
        missing = [k for k in ("username", "realm", "nonce", "uri", "response") if k not in p]
        if missing:
            raise SipParseError(f"digest credentials lack {', '.join(missing)}", header=h)
        qop = p.get("qop")
        nc: int | None = None
        if "nc" in p:
            raw = p["nc"]
            if len(raw) != 8 or any(c not in "0123456789abcdefABCDEF" for c in raw):
                raise SipParseError(f"bad nonce count {raw!r}", header=h)
            nc = int(raw, 16)
        if qop is not None and (nc is None or "cnonce" not in p):
            raise SipParseError("qop given without nc and cnonce", header=h)
        known = {"username", "realm", "nonce", "uri", "response", "algorithm", "qop"}
        known |= {"cnonce", "nc", "opaque", "userhash"}
        return cls(
            username=p["username"],
            realm=p["realm"],
            nonce=p["nonce"],
            uri=p["uri"],
            response=p["response"].lower(),
            algorithm=DigestAlgorithm.parse(p.get("algorithm", "MD5")),
            qop=qop.lower() if qop is not None else None,
            cnonce=p.get("cnonce"),
            nc=nc,
            opaque=p.get("opaque"),
            userhash=p.get("userhash", "").lower() == "true",
            extra=tuple((k, v) for k, v in p.items() if k not in known),
        )

    def __str__(self) -> str:
        parts = [
            f"username={_quote(self.username)}",
            f"realm={_quote(self.realm)}",
            f"nonce={_quote(self.nonce)}",
            f"uri={_quote(self.uri)}",
            f"response={_quote(self.response)}",
            f"algorithm={self.algorithm.value}",
        ]
        # nc and cnonce are written whenever known, qop or not: -sess hashes cnonce even
        # without qop, so dropping it would change what the credentials prove.
        if self.qop is not None:
            parts.append(f"qop={self.qop}")
        if self.qop is not None or self.nc is not None:
            parts.append(f"nc={self.nc or 0:08x}")
        if self.qop is not None or self.cnonce is not None:
            parts.append(f"cnonce={_quote(self.cnonce or '')}")
        if self.opaque is not None:
            parts.append(f"opaque={_quote(self.opaque)}")
        if self.userhash:
            parts.append("userhash=true")
        return "Digest " + ", ".join(parts)


def compute_response(
    algorithm: DigestAlgorithm,
    *,
    username: str,
    realm: str,
    password: str,
    method: str,
    uri: str,
    nonce: str,
    qop: str | None = None,
    cnonce: str | None = None,
    nc: int | None = None,
    body: bytes = b"",
) -> str:
    """The ``response`` directive (RFC 7616 §3.4.1-§3.4.3; RFC 2617 §3.2.2.1 for no qop)."""
    h = algorithm.hash
    ha1 = h(f"{username}:{realm}:{password}")
    if algorithm.is_session:
        ha1 = h(f"{ha1}:{nonce}:{cnonce or ''}")
    if qop == "auth-int":
        ha2 = h(f"{method}:{uri}:{h(body)}")
    else:
        ha2 = h(f"{method}:{uri}")
    if qop is None:
        return h(f"{ha1}:{nonce}:{ha2}")
    return h(f"{ha1}:{nonce}:{nc or 0:08x}:{cnonce or ''}:{qop}:{ha2}")


def answer_challenge(
    challenge_header: str,
    method: str,
    uri: str,
    username: str,
    password: str,
    cnonce: str,
    nc: int = 1,
    *,
    body: bytes = b"",
) -> str:
    """Build an ``Authorization`` value answering ``challenge_header`` (RFC 7616 §3.4).

    Prefers qop=auth over auth-int (SIP bodies may be rewritten by B2BUAs); falls back to
    RFC 2069 mode when the challenge offers no qop. ``cnonce`` is the caller's so tests and
    retries stay deterministic.
    """
    ch = DigestChallenge.parse(challenge_header)
    qop: str | None
    if not ch.qop:
        qop = None
    elif "auth" in ch.qop:
        qop = "auth"
    elif "auth-int" in ch.qop:
        qop = "auth-int"
    else:
        raise SipParseError(f"no supported qop in {ch.qop!r}", header="WWW-Authenticate")
    resp = compute_response(
        ch.algorithm,
        username=username,
        realm=ch.realm,
        password=password,
        method=method,
        uri=uri,
        nonce=ch.nonce,
        qop=qop,
        cnonce=cnonce if qop else None,
        nc=nc if qop else None,
        body=body,
    )
    user = ch.algorithm.hash(f"{username}:{ch.realm}") if ch.userhash else username
    creds = DigestCredentials(
        username=user,
        realm=ch.realm,
        nonce=ch.nonce,
        uri=uri,
        response=resp,
        algorithm=ch.algorithm,
        qop=qop,
        cnonce=cnonce if qop else None,
        nc=nc if qop else None,
        opaque=ch.opaque,
        userhash=ch.userhash,
    )
    return str(creds)


# --- server ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthResult:
    """Outcome of :meth:`DigestServer.verify`."""

    ok: bool
    """Credentials are valid and the nonce is fresh."""
    username: str | None = None
    """Authenticated (or claimed, when not ok) user name."""
    stale: bool = False
    """Response was right but the nonce expired: re-challenge with stale=true (RFC 7616 §3.3)."""
    reason: str = ""
    """Why verification failed, for logs; never sent to the peer."""


_TS = struct.Struct(">Q")
_RAND_LEN = 12
_MAC_LEN = 16


class DigestServer:
    """Digest verifier for one realm, remembering the nonces it issued.

    ``credentials`` maps user name to cleartext password; ``secret`` keys the nonce HMAC.
    A nonce verifies only on the node that issued it (another node answers ``stale=true``
    and the client retries there with that node's nonce). At most ``max_nonces`` nonces are
    remembered; each lives ``nonce_lifetime`` seconds.
    """

    def __init__(
        self,
        realm: str,
        credentials: Mapping[str, str],
        secret: bytes,
        *,
        nonce_lifetime: float = 300.0,
        opaque: str | None = None,
        max_nonces: int = 4096,
    ) -> None:
        if len(secret) < 16:
            raise ValueError("digest nonce secret must be at least 16 bytes")
        if max_nonces < 1:
            raise ValueError("max_nonces must be at least 1")
        self.realm = realm
        self._credentials = credentials
        self._secret = secret
        self.nonce_lifetime = nonce_lifetime
        self.opaque = opaque
        self.max_nonces = max_nonces
        self._nonces: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Issued nonce -> (issue time, highest nc accepted, 0 before the first use)."""

    def _mac(self, payload: bytes) -> bytes:
        msg = payload + self.realm.encode("utf-8")
        return hmac.new(self._secret, msg, hashlib.sha256).digest()[:_MAC_LEN]

    def make_nonce(self, now: float) -> str:
        """A fresh nonce, remembered until it expires or ``max_nonces`` newer ones push it out."""
        payload = _TS.pack(max(0, int(now * 1000))) + os.urandom(_RAND_LEN)
        raw = payload + self._mac(payload)
        nonce = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        nonces = self._nonces
        while nonces:
            oldest, (issued, _) = next(iter(nonces.items()))
            if len(nonces) < self.max_nonces and now - issued <= self.nonce_lifetime:
                break
            del nonces[oldest]
        nonces[nonce] = (now, 0)
        return nonce

    @property
    def nonces_held(self) -> int:
        """How many issued nonces are remembered (never above ``max_nonces``)."""
        return len(self._nonces)

    def _nonce_time(self, nonce: str) -> float | None:
        """Issue time of a genuine nonce, or None when forged or malformed."""
        try:
            raw = base64.urlsafe_b64decode(nonce + "=" * (-len(nonce) % 4))
        except ValueError:
            return None
        if len(raw) != _TS.size + _RAND_LEN + _MAC_LEN:
            return None
        payload, mac = raw[:-_MAC_LEN], raw[-_MAC_LEN:]
        if not hmac.compare_digest(mac, self._mac(payload)):
            return None
        (ms,) = _TS.unpack(payload[: _TS.size])
        return float(ms) / 1000.0

    def challenge(
        self,
        now: float,
        algorithm: DigestAlgorithm | str = DigestAlgorithm.SHA256,
        *,
        stale: bool = False,
        qop: tuple[str, ...] = ("auth",),
    ) -> str:
        """A header value for ``WWW-Authenticate`` (401) or ``Proxy-Authenticate`` (407)."""
        alg = (
            algorithm
            if isinstance(algorithm, DigestAlgorithm)
            else DigestAlgorithm.parse(algorithm)
        )
        return str(
            DigestChallenge(
                realm=self.realm,
                nonce=self.make_nonce(now),
                algorithm=alg,
                qop=qop,
                opaque=self.opaque,
                stale=stale,
            )
        )

    def verify(
        self,
        request_method: str,
        authorization_header: str,
        now: float,
        *,
        body: bytes = b"",
        request_uri: str | SipUri | None = None,
    ) -> AuthResult:
        """Check an ``Authorization`` value; never raises for peer garbage.

        ``request_uri``, when given, must equal the ``uri`` directive (RFC 3261 §22.4: they
        must name the same resource), as text or as RFC 3261 §19.1.4 equal SIP URIs. A
        request in a SIP UAS always has one: pass it, or a credential can be replayed on any
        other Request-URI. Only a successful check consumes the nonce count.
        """
        try:
            cr = DigestCredentials.parse(authorization_header)
        except SipParseError as exc:
            return AuthResult(False, reason=f"malformed: {exc}")
        if cr.realm != self.realm:
            return AuthResult(False, cr.username, reason="wrong realm")
        if self.opaque is not None and cr.opaque != self.opaque:
            return AuthResult(False, cr.username, reason="opaque mismatch")
        if cr.qop not in (None, "auth", "auth-int"):
            return AuthResult(False, cr.username, reason=f"unsupported qop {cr.qop!r}")
        if request_uri is not None and not _same_uri(cr.uri, request_uri):
            return AuthResult(False, cr.username, reason="uri does not match Request-URI")
        if self._nonce_time(cr.nonce) is None:
            return AuthResult(False, cr.username, reason="nonce not issued by us")
        username = self._resolve_user(cr)
        if username is None:
            return AuthResult(False, cr.username, reason="unknown user")
        expected = compute_response(
            cr.algorithm,
            username=username,
            realm=self.realm,
            password=self._credentials[username],
            method=request_method,
            uri=cr.uri,
            nonce=cr.nonce,
            qop=cr.qop,
            cnonce=cr.cnonce,
            nc=cr.nc,
            body=body,
        )
        if not hmac.compare_digest(
            expected.encode("ascii"), cr.response.encode("ascii", "replace")
        ):
            return AuthResult(False, username, reason="wrong response")
        # Right password: any nonce problem from here on is "stale", so the client retries
        # silently with the new challenge's nonce (RFC 7616 §3.3).
        state = self._nonces.get(cr.nonce)
        if state is None:
            return AuthResult(False, username, stale=True, reason="nonce unknown or used up")
        issued, last_nc = state
        if now - issued > self.nonce_lifetime:
            del self._nonces[cr.nonce]
            return AuthResult(False, username, stale=True, reason="nonce expired")
        if cr.qop is None:
            del self._nonces[cr.nonce]  # RFC 2069 mode has no nc: one use per nonce
        elif cr.nc is None or cr.nc <= last_nc:
            return AuthResult(False, username, stale=True, reason="nonce count replayed")
        else:
            self._nonces[cr.nonce] = (issued, cr.nc)
        return AuthResult(True, username)

    def _resolve_user(self, cr: DigestCredentials) -> str | None:
        if not cr.userhash:
            return cr.username if cr.username in self._credentials else None
        for user in self._credentials:
            hashed = cr.algorithm.hash(f"{user}:{self.realm}")
            if hmac.compare_digest(hashed.encode("ascii"), cr.username.encode("ascii", "replace")):
                return user
        return None


def _same_uri(digest_uri: str, request_uri: str | SipUri) -> bool:
    """The ``uri`` directive names the Request-URI: same text or §19.1.4-equal SIP URIs.

    Some trunks (SIPp 3.6 among them) put the Request-URI without its user part in ``uri``
    (``sip:host:port`` for ``sip:service@host:port``): that is accepted too, as the same
    host, port and parameters. It cannot widen a replay: the nonce and its count still
    allow each credential once.
    """
    if digest_uri == str(request_uri):
        return True
    try:
        ours = request_uri if isinstance(request_uri, SipUri) else SipUri.parse(request_uri)
        theirs = SipUri.parse(digest_uri)
    except SipParseError:
        return False
    if theirs.equivalent(ours):
        return True
    return (
        theirs.is_sip
        and theirs.user is None
        and theirs.equivalent(replace(ours, user=None, password=None))
    )
