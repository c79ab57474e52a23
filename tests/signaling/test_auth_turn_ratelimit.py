"""Tokens, role rules, TURN REST credentials and token buckets (no sockets)."""

from __future__ import annotations

import time

import jwt
import pytest
from signaling.fakes import SECRET

from kefu.errors import AuthError as BaseAuthError
from kefu.errors import ConfigError, RemoteError
from kefu.signaling.auth import Authenticator, Claims, authorize_join
from kefu.signaling.errors import AuthError
from kefu.signaling.ratelimit import RateLimiter, RateSpec
from kefu.signaling.tokens import mint_token, token_command
from kefu.signaling.turn import ice_servers, turn_credentials

AUTH = Authenticator(secret=SECRET)


async def test_valid_token() -> None:
    claims = await AUTH.verify(mint_token(SECRET, "alice", "agent", 60, room="r1"))
    assert (claims.user, claims.role, claims.room) == ("alice", "agent", "r1")
    assert claims.expires > time.time()
    assert AUTH.verify_hs256(token_command(SECRET, "bob", "admin")).role == "admin"


@pytest.mark.parametrize(
    "token",
    [
        mint_token(SECRET, "alice", "customer", ttl_s=-60),  # expired beyond the leeway
        mint_token("another-secret-" + "0" * 32, "alice", "customer"),  # bad signature
        jwt.encode({"sub": "a", "role": "admin", "exp": 2**40}, None, algorithm="none"),
        jwt.encode({"sub": "a", "exp": 2**40}, SECRET, algorithm="HS256"),  # no role
        jwt.encode({"sub": "a", "role": "root", "exp": 2**40}, SECRET, algorithm="HS256"),
        jwt.encode({"sub": "a", "role": "agent"}, SECRET, algorithm="HS256"),  # no exp
        jwt.encode({"role": "agent", "exp": 2**40}, SECRET, algorithm="HS256"),  # no sub
        jwt.encode({"sub": "a", "role": "agent", "exp": 2**40, "room": 7}, SECRET, "HS256"),
        jwt.encode({"sub": "a", "role": "agent", "exp": 2**40}, SECRET * 2, algorithm="HS512"),
        "not-a-token",
        "",
    ],
    ids=[
        "expired",
        "bad_signature",
        "alg_none",
        "no_role",
        "unknown_role",
        "no_exp",
        "no_sub",
        "room_not_string",
        "hs512",
        "garbage",
        "empty",
    ],
)
async def test_rejected_tokens(token: str) -> None:
    with pytest.raises(AuthError) as info:
        await AUTH.verify(token)
    assert info.value.code == "bad_token" and info.value.close_code == 4401
    assert isinstance(info.value, BaseAuthError) and isinstance(info.value, RemoteError)


async def test_rs256_refused_without_jwks() -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode({"sub": "a", "role": "agent", "exp": 2**40}, key, algorithm="RS256")
    with pytest.raises(AuthError, match="not accepted"):
        await AUTH.verify(token)


def test_mint_token_validates() -> None:
    with pytest.raises(ConfigError):
        mint_token(SECRET, "u", "root")
    with pytest.raises(ConfigError):
        mint_token("", "u", "agent")


def _claims(role: str, room: str | None = None) -> Claims:
    return Claims("u", role, 2e9, room)


@pytest.mark.parametrize(
    ("role", "claim", "room", "exists", "code"),
    [
        ("customer", None, "new", False, None),
        ("customer", None, "old", True, "forbidden"),
        ("customer", "mine", "mine", True, None),
        ("customer", "mine", "mine", False, None),
        ("customer", "mine", "other", False, "forbidden"),
        ("agent", None, "old", True, None),
        ("agent", None, "new", False, "unknown_room"),
        ("agent", "pinned", "old", True, "forbidden"),
        ("supervisor", None, "old", True, None),
        ("supervisor", None, "new", False, "unknown_room"),
        ("admin", None, "new", False, None),
        ("admin", None, "old", True, None),
    ],
)
def test_room_rules(
    role: str, claim: str | None, room: str, exists: bool, code: str | None
) -> None:
    if code is None:
        authorize_join(_claims(role, claim), room, exists)
        return
    with pytest.raises(AuthError) as info:
        authorize_join(_claims(role, claim), room, exists)
    assert info.value.code == code
    assert info.value.close_code == {"forbidden": 4403, "unknown_room": 4404}[code]
    assert room not in str(info.value)


def test_turn_credentials_match_coturn_rest_scheme() -> None:
    creds = turn_credentials("turn-secret", "u1", now=1_700_000_000.7, ttl_s=86400)
    assert creds.username == "1700086400:u1"
    # printf %s 1700086400:u1 | openssl dgst -sha1 -hmac turn-secret -binary | base64
    assert creds.password == "sA1mgj+kESUx3cbhl6KJFwZISIQ="


def test_ice_servers() -> None:
    servers = ice_servers(
        stun_urls=("stun:s:3478",),
        turn_urls=("turn:t:3478", "turns:t:5349"),
        turn_secret="turn-secret",
        user="u1",
        now=1_700_000_000,
        ttl_s=3600,
    )
    assert servers[0] == {"urls": ["stun:s:3478"]}
    assert servers[1]["urls"] == ["turn:t:3478", "turns:t:5349"]
    assert servers[1]["username"] == "1700003600:u1"
    # TURN without a secret is left out; nothing configured means no servers at all
    assert ice_servers(stun_urls=(), turn_urls=("turn:t",), turn_secret=None, user="u", now=0) == ()


def test_bucket_allows_burst_then_rate() -> None:
    limiter = RateLimiter(RateSpec(rate=2, burst=3))
    assert [limiter.allow("ip", 0.0) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("ip", 0.4) is False  # 0.8 token
    assert limiter.allow("ip", 0.5) is True  # 1.0 token
    assert limiter.allow("other", 0.5) is True  # keys are independent
    assert limiter.denied == 2


def test_idle_buckets_are_forgotten() -> None:
    limiter = RateLimiter(RateSpec(rate=1, burst=2))
    for i in range(100):
        limiter.allow(f"k{i}", float(i) * 0.01)
    assert len(limiter) == 100
    limiter.allow("late", 10.0)  # everyone else has refilled: evicted on the way
    assert len(limiter) == 1
    limiter.sweep(20.0)
    assert len(limiter) == 0
    assert limiter.evicted_idle == 101


def test_memory_is_bounded_under_a_flood_of_keys() -> None:
    limiter = RateLimiter(RateSpec(rate=0.001, burst=1), max_keys=50)
    for i in range(1000):
        limiter.allow(f"k{i}", 0.0)
    assert len(limiter) == 50
    assert limiter.evicted_busy == 950


def test_bad_spec() -> None:
    with pytest.raises(ValueError):
        RateLimiter(RateSpec(rate=0, burst=1))
