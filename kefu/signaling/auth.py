"""Access tokens (JWT, RFC 7519) and what each role may do.

Two ways to trust a token, chosen by its ``alg`` header and by what is configured:

* HS256 with ``signaling.jwt_secret`` — one node, tokens minted by ``kefu token``;
* RS256 with keys from ``signaling.jwks_url`` (RFC 7517) — production, tokens minted by the
  customer's identity provider. Keys are fetched with :class:`jwt.PyJWKClient` (cached) in a
  worker thread, because PyJWKClient uses blocking urllib.

The algorithm list passed to ``jwt.decode`` is always exactly one algorithm matched to the
key, so a token cannot pick ``none`` or sign with an RSA public key as an HMAC secret.

Claims: ``sub`` (user), ``role`` (customer | agent | supervisor | admin), ``exp`` (required),
``room`` (optional: the one room the token is for). Their types are checked here, not assumed:
``sub`` a string of 1-256 characters, ``room`` one of 1-128 printable characters, ``exp``,
``iat`` and ``nbf`` finite JSON numbers (RFC 7519 section 2 NumericDate). A token over
:data:`MAX_TOKEN_CHARS`, or one that fails any check, is ``bad_token`` (close 4401), never an
unhandled exception.

Room rules (:func:`authorize_join`):

* customer — its token's ``room`` (existing or new); without a ``room`` claim only a room that
  does not exist yet (it creates it). Joining someone else's existing room is ``forbidden``.
* agent, supervisor — existing rooms only (``unknown_room`` otherwise); a ``room`` claim, when
  present, pins them to that room.
* admin — any room, may create.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import TypeGuard

import jwt

from kefu.signaling.errors import AuthError

ROLES = ("customer", "agent", "supervisor", "admin")
MAX_TOKEN_CHARS = 8192
"""Longer tokens are refused unread (a ``resume`` message carries at most this many)."""
_MAX_USER_CHARS = 256
_MAX_ROOM_CHARS = 128
# What PyJWT or the JSON decoder may raise on hostile input besides PyJWTError.
_DECODE_FAULTS = (ValueError, TypeError, OverflowError, RecursionError)


@dataclass(frozen=True, slots=True)
class Claims:
    """The verified claims kefu uses."""

    user: str
    """``sub`` (RFC 7519 section 4.1.2)."""
    role: str
    """kefu's ``role`` claim: customer | agent | supervisor | admin."""
    expires: float
    """``exp`` as UNIX time (RFC 7519 section 4.1.4)."""
    room: str | None = None
    """kefu's optional ``room`` claim: the only room this token may join."""


class Authenticator:
    """Verifies tokens against a shared secret and/or a JWKS URL."""

    def __init__(
        self,
        *,
        secret: str | None = None,
        jwks_url: str | None = None,
        leeway_s: float = 5.0,
        jwks_cache_s: float = 300.0,
    ) -> None:
        self._secret = secret or None
        self._leeway = leeway_s
        self._jwks = (
            jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=int(jwks_cache_s), timeout=5)
            if jwks_url
            else None
        )

    async def verify(self, token: str) -> Claims:
        """Verify a token; raises AuthError(code="bad_token")."""
        _check_size(token)
        algorithm = self._algorithm(token)
        if algorithm == "HS256":
            return self._decode(token, self._secret, algorithm)
        assert self._jwks is not None
        try:
            signing = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
        except jwt.PyJWKClientError as exc:
            raise AuthError(f"signing key not available: {exc}") from None
        except (jwt.PyJWTError, *_DECODE_FAULTS):
            raise AuthError("token is malformed") from None
        return self._decode(token, signing.key, algorithm)

    def verify_hs256(self, token: str) -> Claims:
        """Synchronous verification for shared-secret tokens only."""
        _check_size(token)
        if self._algorithm(token) != "HS256":
            raise AuthError("only HS256 tokens can be verified synchronously")
        return self._decode(token, self._secret, "HS256")

    def _algorithm(self, token: str) -> str:
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, *_DECODE_FAULTS):
            raise AuthError("token is malformed") from None
        algorithm = header.get("alg")
        if algorithm == "HS256" and self._secret:
            return "HS256"
        if algorithm == "RS256" and self._jwks is not None:
            return "RS256"
        raise AuthError(f"token algorithm {str(algorithm)[:16]!r} is not accepted")

    def _decode(self, token: str, key: object, algorithm: str) -> Claims:
        try:
            claims = jwt.decode(
                token,
                key,  # type: ignore[arg-type]
                algorithms=[algorithm],
                leeway=self._leeway,
                options={"require": ["sub", "exp"]},
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token has expired") from None
        except jwt.InvalidSignatureError:
            raise AuthError("token signature is invalid") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"token is invalid: {str(exc)[:120]}") from None
        except _DECODE_FAULTS:
            raise AuthError("token is malformed") from None
        return _claims(claims)


def _check_size(token: object) -> None:
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise AuthError("token is malformed")


def _is_text(value: object, limit: int) -> TypeGuard[str]:
    """A string of 1-``limit`` characters that is valid Unicode (no lone surrogates, which
    JSON's ``\\ud800`` escapes can smuggle in and UTF-8 cannot carry back out)."""
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _numeric_date(raw: dict[str, object], name: str) -> float | None:
    """A NumericDate claim (RFC 7519 section 2): a finite JSON number, never a string."""
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AuthError(f"token {name} must be a number")
    try:
        seconds = float(value)
    except OverflowError:
        raise AuthError(f"token {name} is out of range") from None
    if not math.isfinite(seconds):
        raise AuthError(f"token {name} is out of range")
    return seconds


def _claims(raw: dict[str, object]) -> Claims:
    user, role, room = raw.get("sub"), raw.get("role"), raw.get("room")
    if not _is_text(user, _MAX_USER_CHARS):
        raise AuthError(f"token sub must be a string of 1-{_MAX_USER_CHARS} characters")
    if not isinstance(role, str) or role not in ROLES:
        raise AuthError("token role is missing or unknown")
    if room is not None and not (_is_text(room, _MAX_ROOM_CHARS) and room.isprintable()):
        raise AuthError(f"token room must be 1-{_MAX_ROOM_CHARS} printable characters")
    expires = _numeric_date(raw, "exp")
    if expires is None:
        raise AuthError("token exp is missing")
    _numeric_date(raw, "iat")
    _numeric_date(raw, "nbf")
    return Claims(user, role, expires, room)


def authorize_join(claims: Claims, room: str, room_exists: bool) -> None:
    """Raise AuthError (forbidden / unknown_room) unless ``claims`` may join ``room``.

    The messages are identical for every refused room so they tell nothing about it.
    """
    if claims.room is not None and claims.room != room:
        raise AuthError("token does not allow this room", code="forbidden")
    if claims.role == "admin":
        return
    if claims.role == "customer":
        if claims.room is None and room_exists:
            raise AuthError("token does not allow this room", code="forbidden")
        return
    if not room_exists:
        raise AuthError("no such room", code="unknown_room")
