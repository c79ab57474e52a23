"""RFC 3515 REFER helpers: headers, sipfrag, Event / Subscription-State, the outcome table."""

from __future__ import annotations

import pytest

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip.refer import (
    EventHeader,
    ReferState,
    ReferSubscription,
    SipFrag,
    SubscriptionState,
    refer_headers,
)


def test_refer_headers_wrap_bare_uris() -> None:
    assert refer_headers("sip:agent@vcc.example;transport=tcp") == (
        ("Refer-To", "<sip:agent@vcc.example;transport=tcp>"),
    )
    assert refer_headers('"Queue" <sip:q@vcc>', "sip:bot@kefu") == (
        ("Refer-To", '"Queue" <sip:q@vcc>'),
        ("Referred-By", "<sip:bot@kefu>"),
    )
    with pytest.raises(ValueError):
        refer_headers("  ")


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"SIP/2.0 200 OK\r\n", 200, "OK"),
        (b"SIP/2.0 100 Trying", 100, "Trying"),
        (b"SIP/2.0 180 Ringing\r\nContact: <sip:x@y>\r\n\r\n", 180, "Ringing"),
        (b"SIP/2.0 603 Declined by user\n", 603, "Declined by user"),
        (b"SIP/2.0 503", 503, ""),
    ],
)
def test_sipfrag_parse(body: bytes, status: int, reason: str) -> None:
    frag = SipFrag.parse(body)
    assert (frag.status, frag.reason) == (status, reason)
    assert SipFrag.parse(bytes(frag)) == frag


def test_sipfrag_headers_and_serialize() -> None:
    frag = SipFrag.parse(b"SIP/2.0 180 Ringing\r\nContact: <sip:x@y>\r\n")
    assert frag.headers == (("Contact", "<sip:x@y>"),)
    assert bytes(SipFrag(200, "OK")) == b"SIP/2.0 200 OK\r\n"


@pytest.mark.parametrize(
    "body", [b"", b"INVITE sip:x SIP/2.0", b"SIP/2.0 2000 OK", b"SIP/2.0 099 x", b"\xff\xfe"]
)
def test_sipfrag_rejects(body: bytes) -> None:
    with pytest.raises(SipParseError):
        SipFrag.parse(body)


def test_event_header() -> None:
    ev = EventHeader.parse("Refer ; id=93809824;x")
    assert (ev.package, ev.id, ev.params) == ("refer", "93809824", (("x", None),))
    assert str(ev) == "refer;id=93809824;x"
    assert EventHeader.parse("refer").id is None
    with pytest.raises(SipParseError):
        EventHeader.parse(";id=1")


def test_subscription_state() -> None:
    s = SubscriptionState.parse("terminated;reason=noresource")
    assert s.terminated and s.reason == "noresource"
    a = SubscriptionState.parse("active;expires=60")
    assert (a.state, a.expires, a.terminated) == ("active", 60, False)
    assert str(SubscriptionState("terminated", reason="timeout", retry_after=5)) == (
        "terminated;reason=timeout;retry-after=5"
    )
    with pytest.raises(SipParseError):
        SubscriptionState.parse("active;expires=soon")


def test_refer_success_flow() -> None:
    sub = ReferSubscription(refer_cseq=7)
    assert sub.on_refer_response(100) is ReferState.PENDING
    assert sub.on_refer_response(202) is ReferState.ACCEPTED
    assert sub.on_notify("refer;id=7", "active;expires=60", b"SIP/2.0 100 Trying\r\n") == 200
    assert sub.state is ReferState.TRYING
    assert sub.on_notify("refer", "active", b"SIP/2.0 180 Ringing\r\n") == 200
    assert sub.state is ReferState.TRYING
    assert sub.on_notify("refer;id=7", "terminated;reason=noresource", b"SIP/2.0 200 OK") == 200
    assert sub.state is ReferState.TERMINATED and sub.done
    assert sub.final_status == 200
    # Anything after the end is for a subscription that no longer exists.
    assert sub.on_notify("refer;id=7", "terminated", b"SIP/2.0 200 OK") == 481


def test_refer_failure_flow_and_notify_before_202() -> None:
    sub = ReferSubscription(3)
    assert sub.on_notify("refer", "active", b"SIP/2.0 100 Trying") == 200
    assert sub.state is ReferState.TRYING
    assert sub.on_refer_response(202) is ReferState.TRYING  # late 202 is harmless
    assert sub.on_notify("refer", "active", b"SIP/2.0 486 Busy Here") == 200
    assert sub.state is ReferState.FAILED and sub.final_status == 486
    sub.on_notify("refer", "terminated", b"")
    assert sub.state is ReferState.TERMINATED


def test_refer_rejected_outright() -> None:
    sub = ReferSubscription(1)
    assert sub.on_refer_response(403) is ReferState.TERMINATED
    assert sub.final_status == 403


def test_subscription_ends_without_final_status_counts_as_failed() -> None:
    sub = ReferSubscription(1)
    sub.on_refer_response(202)
    sub.on_notify("refer", "terminated;reason=timeout", b"")
    assert sub.state is ReferState.TERMINATED and sub.final_status is None


def test_notify_error_statuses() -> None:
    sub = ReferSubscription(5)
    assert sub.on_notify("dialog", "active", b"") == 489
    assert sub.on_notify("refer;id=6", "active", b"") == 481
    assert sub.on_notify(None, "active", b"") == 400
    assert sub.on_notify("refer", "active", b"garbage") == 400
    assert sub.state is ReferState.PENDING


def test_table_refuses_illegal_transition() -> None:
    sub = ReferSubscription(1)
    with pytest.raises(InvalidTransition):
        sub._go("ended")


def test_receive_notify_from_parsed_request() -> None:
    from kefu.sip.message import Request, parse_message

    raw = (
        "NOTIFY sip:bot@203.0.113.5 SIP/2.0\r\n"
        "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-n1\r\n"
        "From: <sip:agent@vcc.test>;tag=a\r\nTo: <sip:bot@kefu.test>;tag=b\r\n"
        "Call-ID: r@vcc\r\nCSeq: 3 NOTIFY\r\n"
        "o: refer;id=6\r\n"
        "Subscription-State: terminated;reason=noresource\r\n"
        "Content-Type: message/sipfrag;version=2.0\r\n"
        "Content-Length: 16\r\n\r\n"
        "SIP/2.0 200 OK\r\n"
    )
    req = parse_message(raw.encode())
    assert isinstance(req, Request)
    sub = ReferSubscription(6)
    sub.on_refer_response(202)
    assert sub.receive_notify(req) == 200
    assert sub.state is ReferState.TERMINATED and sub.final_status == 200
