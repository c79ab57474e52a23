"""RFC 4028 session timers: headers, negotiation, and the hand-driven timer."""

from __future__ import annotations

import pytest

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip.session_timer import (
    MinSE,
    RefreshDue,
    Refresher,
    SessionExpired,
    SessionExpires,
    SessionTimer,
    negotiate_uas,
    uac_outcome,
)


@pytest.mark.parametrize(
    ("raw", "delta", "refresher", "text"),
    [
        ("1800", 1800, None, "1800"),
        ("1800;refresher=uac", 1800, Refresher.UAC, "1800;refresher=uac"),
        (" 90 ; Refresher=UAS ", 90, Refresher.UAS, "90;refresher=uas"),
        ("600;x=1;flag", 600, None, "600;x=1;flag"),
    ],
)
def test_session_expires_parse(
    raw: str, delta: int, refresher: Refresher | None, text: str
) -> None:
    se = SessionExpires.parse(raw)
    assert (se.delta, se.refresher) == (delta, refresher)
    assert str(se) == text
    assert SessionExpires.parse(str(se)) == se


@pytest.mark.parametrize("raw", ["", "abc", "-5", "90;refresher=both", "90;refresher", "90;;x"])
def test_session_expires_rejects(raw: str) -> None:
    with pytest.raises(SipParseError) as info:
        SessionExpires.parse(raw)
    assert info.value.header == "Session-Expires"


def test_min_se_parse() -> None:
    assert MinSE.parse(" 120 ").delta == 120
    assert str(MinSE(90)) == "90"
    with pytest.raises(SipParseError):
        MinSE.parse("ninety")


def test_uas_accepts_and_copies_refresher() -> None:
    n = negotiate_uas("1800;refresher=uas", None, ["timer", "100rel"])
    assert n.status == 200
    assert dict(n.headers) == {"Session-Expires": "1800;refresher=uas", "Require": "timer"}
    assert n.we_refresh


def test_uas_422_below_minimum() -> None:
    n = negotiate_uas("60", None, ["timer"])
    assert n.status == 422
    assert n.headers == (("Min-SE", "90"),)
    n = negotiate_uas("300", None, ["timer"], our_min_se=600)
    assert (n.status, n.headers) == (422, (("Min-SE", "600"),))


def test_uas_chooses_refresher_when_absent() -> None:
    # UAC supports timer: our preference (uac by default) applies.
    n = negotiate_uas("1800", None, ["timer"])
    assert n.session_expires == SessionExpires(1800, Refresher.UAC)
    assert not n.we_refresh
    # UAC does not support timer (a proxy inserted Session-Expires): we must refresh, and
    # Require: timer must not be sent to a UAC that does not know it.
    n = negotiate_uas("1800", None, [])
    assert n.session_expires == SessionExpires(1800, Refresher.UAS)
    assert n.headers == (("Session-Expires", "1800;refresher=uas"),)


def test_uas_lowers_interval_but_not_below_min_se() -> None:
    n = negotiate_uas("3600", "1000", ["timer"], preferred_interval=600)
    assert n.session_expires is not None and n.session_expires.delta == 1000
    n = negotiate_uas("3600", None, ["timer"], preferred_interval=600)
    assert n.session_expires is not None and n.session_expires.delta == 600


def test_uas_without_request_timer() -> None:
    assert negotiate_uas(None, None, ["timer"]).session_expires is None
    n = negotiate_uas(None, "200", ["timer"], preferred_interval=120)
    assert n.session_expires == SessionExpires(200, Refresher.UAC)
    with pytest.raises(ValueError):
        negotiate_uas(None, None, [], our_min_se=30)


def test_uac_outcome() -> None:
    assert uac_outcome(422, None, "400", requested=90) == 400
    assert uac_outcome(200, "1800", None, requested=1800) == SessionExpires(1800, Refresher.UAC)
    assert uac_outcome(200, None, None, requested=1800) is None
    assert uac_outcome(486, "1800", None, requested=1800) is None
    with pytest.raises(SipParseError):
        uac_outcome(422, None, None, requested=90)


def test_refresher_timer_refreshes_at_half_interval() -> None:
    t = SessionTimer(1800, we_refresh=True, now=0.0)
    assert t.get_timer() == 900.0
    t.handle_timer(899.9)
    assert t.next_event() is None
    t.handle_timer(900.0)
    assert t.next_event() == RefreshDue(900.0)
    assert t.next_event() is None
    # The refresh's 2xx arrives; the interval restarts from there.
    t.refreshed(900.5)
    assert t.get_timer() == 900.5 + 900


def test_refresher_expires_if_refresh_never_succeeds() -> None:
    t = SessionTimer(90, we_refresh=True, now=0.0)
    t.handle_timer(45.0)
    assert isinstance(t.next_event(), RefreshDue)
    assert t.get_timer() == 90 - 30  # min(32, 90/3) = 30
    t.handle_timer(60.0)
    assert t.next_event() == SessionExpired(60.0)
    assert t.expired and t.get_timer() is None
    with pytest.raises(InvalidTransition):
        t.refreshed(61.0)


def test_non_refresher_expires_before_interval() -> None:
    t = SessionTimer(1800, we_refresh=False, now=10.0)
    assert t.get_timer() == 10.0 + 1800 - 32
    t.refreshed(900.0)  # the peer's re-INVITE arrived
    assert t.get_timer() == 900.0 + 1800 - 32
    t.handle_timer(900.0 + 1800 - 32)
    assert isinstance(t.next_event(), SessionExpired)


def test_refresh_can_swap_roles_and_interval() -> None:
    t = SessionTimer(1800, we_refresh=False, now=0.0)
    t.refreshed(100.0, interval=600, we_refresh=True)
    assert t.get_timer() == 400.0
    t.handle_timer(10_000.0)  # a late wake-up reports both in order
    assert [type(t.next_event()), type(t.next_event())] == [RefreshDue, SessionExpired]


def test_negotiate_parsed_request() -> None:
    from kefu.sip.message import Request, parse_message
    from kefu.sip.session_timer import negotiate_request

    raw = (
        "INVITE sip:bot@kefu.test SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-st\r\n"
        "From: <sip:a@vcc.test>;tag=1\r\nTo: <sip:bot@kefu.test>\r\n"
        "Call-ID: st@vcc\r\nCSeq: 1 INVITE\r\n"
        "Supported: 100rel, timer\r\nx: 60\r\nMin-SE: 60\r\n\r\n"
    )
    req = parse_message(raw.encode())
    assert isinstance(req, Request)
    n = negotiate_request(req)
    assert (n.status, n.headers) == (422, (("Min-SE", "90"),))
    n = negotiate_request(req.replace(headers=req.headers.set("Session-Expires", "120")))
    assert n.status == 200 and ("Require", "timer") in n.headers
