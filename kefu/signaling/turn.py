"""TURN REST credentials (draft-uberti-behave-turn-rest-00), as coturn's
``use-auth-secret`` / ``static-auth-secret`` accepts them, and the ice_servers list.

username = "<expiry unix time>:<user>", password = base64(HMAC-SHA1(secret, username)).
coturn recomputes the password from its copy of the secret and refuses expired usernames.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TurnCredentials:
    """Time-limited TURN credentials (draft-uberti-behave-turn-rest-00 section 2.2)."""

    username: str
    """``expiry:user``; the expiry is UNIX seconds."""
    password: str
    """base64(HMAC-SHA1(shared secret, username))."""
    ttl_s: int
    """Lifetime the credentials were minted for."""


def turn_credentials(secret: str, user: str, now: float, ttl_s: int = 86400) -> TurnCredentials:
    """Credentials for ``user`` valid until ``now + ttl_s`` (``now`` is UNIX time)."""
    username = f"{int(now) + int(ttl_s)}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return TurnCredentials(username, base64.b64encode(digest).decode("ascii"), int(ttl_s))


def ice_servers(
    *,
    stun_urls: tuple[str, ...],
    turn_urls: tuple[str, ...],
    turn_secret: str | None,
    user: str,
    now: float,
    ttl_s: int = 86400,
) -> tuple[dict[str, Any], ...]:
    """RTCIceServer dicts for a client: STUN without credentials, TURN with fresh ones.

    TURN URLs are left out when no secret is configured (they would only fail auth).
    """
    servers: list[dict[str, Any]] = []
    if stun_urls:
        servers.append({"urls": list(stun_urls)})
    if turn_urls and turn_secret:
        creds = turn_credentials(turn_secret, user, now, ttl_s)
        servers.append(
            {"urls": list(turn_urls), "username": creds.username, "credential": creds.password}
        )
    return tuple(servers)
