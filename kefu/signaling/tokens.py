"""Minting HS256 access tokens for ``kefu token --role R --user U`` and for tests."""

from __future__ import annotations

import time

import jwt

from kefu.errors import ConfigError
from kefu.signaling.auth import ROLES


def mint_token(
    secret: str,
    user: str,
    role: str,
    ttl_s: float = 3600,
    room: str | None = None,
    *,
    now: float | None = None,
) -> str:
    """An HS256 JWT with ``sub``, ``role``, ``iat``, ``exp`` and optionally ``room``.

    A negative ``ttl_s`` gives an already expired token (tests use that).
    """
    if role not in ROLES:
        raise ConfigError(f"role must be one of {', '.join(ROLES)}, got {role!r}", key="role")
    if not secret:
        raise ConfigError("signaling.jwt_secret is empty", key="signaling.jwt_secret")
    issued = int(time.time() if now is None else now)
    claims: dict[str, object] = {
        "sub": user,
        "role": role,
        "iat": issued,
        "exp": issued + int(ttl_s),
    }
    if room is not None:
        claims["room"] = room
    return jwt.encode(claims, secret, algorithm="HS256")


def token_command(
    secret: str, user: str, role: str, ttl_s: float = 3600, room: str | None = None
) -> str:
    """What ``kefu token`` prints: one token line (the CLI passes its parsed arguments)."""
    return mint_token(secret, user, role, ttl_s, room)
