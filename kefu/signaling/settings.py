"""SignalingSettings: everything the WebSocket signaling needs (the lead maps config to it)."""

from __future__ import annotations

from dataclasses import dataclass

from kefu.signaling.ratelimit import RateSpec


@dataclass(frozen=True, slots=True)
class SignalingSettings:
    """Signaling, auth and TURN settings; defaults run on one machine offline."""

    jwt_secret: str | None = None
    """HS256 shared secret for tokens minted by ``kefu token``; None disables HS256."""
    jwks_url: str | None = None
    """JWKS URL (RFC 7517) for RS256 tokens from an identity provider; None disables RS256."""
    jwks_cache_s: float = 300.0
    """How long fetched JWKS keys are cached."""
    turn_secret: str | None = None
    """coturn ``static-auth-secret`` for TURN REST credentials; None: no TURN entry."""
    turn_urls: tuple[str, ...] = ()
    """e.g. ("turn:turn.example.com:3478?transport=udp", "turns:turn.example.com:5349")."""
    stun_urls: tuple[str, ...] = ()
    """e.g. ("stun:turn.example.com:3478",). Empty by default: nothing public is contacted."""
    turn_ttl_s: int = 86400
    """Lifetime of minted TURN credentials."""
    resume_grace_s: float = 20.0
    """How long a participant whose socket dropped is kept for a ``resume``."""
    heartbeat_s: float = 10.0
    """Ping interval advertised to clients in ``joined``."""
    heartbeat_timeout_s: float = 30.0
    """A socket silent this long is closed (4408); its session may still resume."""
    connect_rate: RateSpec = RateSpec(rate=2.0, burst=20.0)
    """WebSocket connections per client IP."""
    message_rate: RateSpec = RateSpec(rate=50.0, burst=200.0)
    """Messages per user (all of the user's sockets together)."""
    max_pending: int = 256
    """Outbound messages buffered per session (while detached or slow); oldest dropped."""
    max_sessions: int = 5000
    """Sessions (joined or resumable) one node holds; joins beyond answer node_full."""
    rate_limit_keys: int = 10_000
    """Token buckets kept per limiter (memory bound)."""
