"""Digest replay through the UA: a captured Authorization must not open another call."""

from __future__ import annotations

from helpers.sip_trunk import TRUNK, app_events, invite, responses

from kefu.sip import ua_events as ev
from kefu.sip.auth import DigestChallenge, DigestCredentials, answer_challenge
from kefu.sip.ua import UaSettings, UserAgent

URI = "sip:4001@127.0.0.1:5070"


def guarded() -> UserAgent:
    ua = UserAgent(UaSettings(auth_users=(("vcc", "s3cret"),), auth_secret=b"k" * 32))
    ua.set_local_address("127.0.0.1", 5070)
    return ua


def challenge(ua: UserAgent, now: float = 0.0) -> str:
    ua.receive(invite(call_id="probe", branch="z9hG4bK-probe"), TRUNK, now)
    (resp,) = responses(ua)
    assert resp.status == 401
    return resp.headers.get("WWW-Authenticate") or ""


def call_with(ua: UserAgent, auth: str, n: int, now: float, user: str = "4001") -> list[object]:
    """An INVITE for a new call carrying ``auth``; the app events it caused."""
    ua.receive(
        invite(
            call_id=f"call-{n}", branch=f"z9hG4bK-{n}", user=user, extra=(("Authorization", auth),)
        ),
        TRUNK,
        now,
    )
    return app_events(ua)


def test_replayed_authorization_on_a_new_call_is_challenged_again() -> None:
    ua = guarded()
    auth = answer_challenge(challenge(ua), "INVITE", URI, "vcc", "s3cret", "c0ffee", 1)
    assert [type(e) for e in call_with(ua, auth, 1, 0.1)] == [ev.IncomingCall]
    responses(ua)
    assert call_with(ua, auth, 2, 0.2) == []  # the attacker's copy, same nc
    (resp,) = responses(ua)
    assert resp.status == 401
    fresh = DigestChallenge.parse(resp.headers.get("WWW-Authenticate") or "")
    assert fresh.stale
    assert fresh.nonce != DigestCredentials.parse(auth).nonce
    assert ua.leg_count == 1


def test_authorization_for_another_request_uri_is_refused() -> None:
    ua = guarded()
    auth = answer_challenge(challenge(ua), "INVITE", URI, "vcc", "s3cret", "c0ffee", 1)
    assert call_with(ua, auth, 1, 0.1, user="9999") == []  # Request-URI sip:9999@...
    assert [r.status for r in responses(ua)] == [401]
    assert ua.leg_count == 0


def test_increasing_nonce_count_on_the_same_nonce_is_accepted() -> None:
    ua = guarded()
    www = challenge(ua)
    for nc in (1, 2, 5):
        auth = answer_challenge(www, "INVITE", URI, "vcc", "s3cret", f"cn{nc}", nc)
        assert [type(e) for e in call_with(ua, auth, nc, 0.1 * nc)] == [ev.IncomingCall]
        responses(ua)
    stale = answer_challenge(www, "INVITE", URI, "vcc", "s3cret", "cn4", 4)
    assert call_with(ua, stale, 4, 1.0) == []
    assert [r.status for r in responses(ua)] == [401]


def test_expired_nonce_is_rechallenged_with_stale_true() -> None:
    ua = guarded()
    auth = answer_challenge(challenge(ua), "INVITE", URI, "vcc", "s3cret", "c0ffee", 1)
    assert call_with(ua, auth, 1, 3600.0) == []
    (resp,) = responses(ua)
    assert resp.status == 401
    assert DigestChallenge.parse(resp.headers.get("WWW-Authenticate") or "").stale
