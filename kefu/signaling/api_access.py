"""Who may use the call-control API, and where a call may be transferred (no I/O, no aiohttp).

Every ``/api/*`` request carries a JWT (the tokens of :mod:`kefu.signaling.auth`):
``Authorization: Bearer <jwt>``; the events WebSocket also takes ``?token=`` because browsers
cannot set headers on a WebSocket. Missing or bad token: ``unauthorized`` (HTTP 401 / close
4401); a role that may not use the API (customer): ``forbidden`` (403 / 4403).

Roles (:data:`API_ROLES`): agent, supervisor and admin may list calls, read events, listen
in, take a call over from the AI, transfer and hang up. While a human holds a call only that
agent, a supervisor or an admin may hand it back, transfer, hang up or pass it on; another
agent gets 409 ``wrong_state`` naming the holder (kefu.mediaserver.assign.require_holder).

Transfer targets (:class:`TransferAllowList`, ``calls.transfer_allow``): a REFER sends the
caller wherever the target says, and the trunk pays for it (toll fraud), so a target must
match the allow-list; ``sip.transfer_target`` is always allowed. A pattern is either one URI
(``sip:queue@vcc.example``, ``tel:+861012345``: the target must be that URI, compared as
RFC 3261 section 19.1.4 does: scheme and host case-insensitive, the rest exact), or
``sip:*@HOST[:PORT]`` (``sips:`` alike): any user at exactly that host and port; such a
target may carry URI parameters except ``maddr`` (which re-routes the request elsewhere) and
no ``?headers``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kefu.signaling.auth import Claims
from kefu.signaling.errors import AuthError
from kefu.sip.uri import SipUri

API_ROLES = frozenset({"agent", "supervisor", "admin"})
"""Roles that may use ``/api/*``; a customer token is ``forbidden``."""


def bearer_token(authorization: str | None) -> str | None:
    """The token in an ``Authorization: Bearer <token>`` header value (RFC 6750 section 2.1)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def check_role(claims: Claims) -> None:
    """Raise AuthError(code="forbidden") unless ``claims`` may use the control API."""
    if claims.role not in API_ROLES:
        raise AuthError(f"role {claims.role!r} may not use the call-control API", code="forbidden")


def _key(uri: SipUri) -> tuple[object, ...]:
    """What two URIs must share to be the same target (RFC 3261 section 19.1.4, simplified)."""
    params = tuple(sorted((name.lower(), value) for name, value in uri.params))
    return (
        uri.scheme.lower(),
        uri.user,
        uri.password,
        uri.host.lower(),
        uri.port,
        params,
        uri.headers,
        uri.opaque,
    )


@dataclass(frozen=True, slots=True)
class _HostPattern:
    """``sip:*@host[:port]``: any user at that host."""

    scheme: str
    host: str
    port: int | None

    def matches(self, uri: SipUri) -> bool:
        return (
            uri.scheme.lower() == self.scheme
            and uri.host.lower() == self.host
            and uri.port == self.port
            and uri.user is not None
            and uri.password is None
            and not uri.headers
            and not uri.has_param("maddr")
        )


def _parse_pattern(pattern: str) -> tuple[object, ...] | _HostPattern:
    text = pattern.strip()
    if not text or any(ch in text for ch in "\r\n\0<> "):
        raise ValueError(f"not a SIP URI pattern: {pattern!r}")
    scheme, colon, rest = text.partition(":")
    if colon and rest.startswith("*@"):
        if scheme.lower() not in ("sip", "sips"):
            raise ValueError(f"{pattern!r}: a '*' pattern must be sip:*@host or sips:*@host")
        uri = SipUri.parse(f"{scheme}:x@{rest[2:]}")
        if uri.params or uri.headers or "*" in uri.host:
            raise ValueError(f"{pattern!r}: a '*' pattern is sip:*@HOST[:PORT], nothing more")
        return _HostPattern(uri.scheme.lower(), uri.host.lower(), uri.port)
    if "*" in text:
        raise ValueError(f"{pattern!r}: '*' may only stand for the whole user (sip:*@host)")
    try:
        uri = SipUri.parse(text)
    except ValueError as exc:
        raise ValueError(f"{pattern!r} is not a URI: {exc}") from None
    if uri.scheme.lower() not in ("sip", "sips", "tel"):
        raise ValueError(f"{pattern!r}: scheme must be sip, sips or tel")
    return _key(uri)


class TransferAllowList:
    """The transfer targets the API may REFER a caller to (``calls.transfer_allow``)."""

    def __init__(self, patterns: Iterable[str] = (), *, default: str | None = None) -> None:
        """``patterns``: see the module docstring (ValueError names a bad one);
        ``default``: ``sip.transfer_target``, always allowed."""
        self.patterns = tuple(patterns)
        self.default = default or None
        self._exact: set[tuple[object, ...]] = set()
        self._hosts: list[_HostPattern] = []
        for pattern in self.patterns:
            parsed = _parse_pattern(pattern)
            if isinstance(parsed, _HostPattern):
                self._hosts.append(parsed)
            else:
                self._exact.add(parsed)
        if self.default is not None:
            try:
                self._exact.add(_key(SipUri.parse(self.default)))
            except ValueError:
                pass  # the server refuses to REFER to it anyway

    def allows(self, target: str | None) -> bool:
        """``target`` (None: the default target) may be sent in a REFER."""
        if target is None or target == self.default:
            return True
        if any(ch in target for ch in "\r\n\0<>") or target != target.strip():
            return False
        try:
            uri = SipUri.parse(target)
        except ValueError:
            return False
        return _key(uri) in self._exact or any(p.matches(uri) for p in self._hosts)
