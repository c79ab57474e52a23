"""The sans-IO user agent: whole call flows with hand-driven time."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.sip_trunk import TRUNK, app_events, events, invite, request, responses, sent

from kefu.sip import ua_events as ev
from kefu.sip.auth import answer_challenge
from kefu.sip.message import Request, parse_message
from kefu.sip.ua import Peer, UaSettings, UserAgent


@pytest.fixture
def ua() -> UserAgent:
    agent = UserAgent()
    agent.set_local_address("127.0.0.1", 5070)
    return agent


def incoming(ua: UserAgent, now: float = 0.0, **kw: object) -> ev.IncomingCall:
    ua.receive(invite(**kw), TRUNK, now)
    evs = app_events(ua)
    assert len(evs) == 1 and isinstance(evs[0], ev.IncomingCall), evs
    return evs[0]


def answered(ua: UserAgent, now: float = 0.0) -> tuple[ev.IncomingCall, str]:
    call = incoming(ua, now)
    ua.answer(call.leg, b"v=0\r\n", now)
    (ok,) = responses(ua)
    assert ok.status == 200
    return call, ok.to.tag or ""


def test_invite_answer_ack_bye(ua: UserAgent) -> None:
    call, tag = answered(ua)
    ua.receive(request("ACK", to_tag=tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    assert [type(e) for e in app_events(ua)] == [ev.CallConfirmed]
    ua.receive(request("BYE", to_tag=tag, cseq=2, branch="z9hG4bK-bye"), TRUNK, 5.0)
    (ok,) = responses(ua)
    assert (ok.status, ok.cseq.method) == (200, "BYE")
    assert app_events(ua) == [ev.CallEnded(call.leg, "remote hangup")]
    ua.handle_timer(100.0)
    assert ua.leg_count == 0
    assert len(ua.transactions) == 0


def test_answer_carries_sdp_contact_and_received_rport(ua: UserAgent) -> None:
    call = incoming(ua, via_host="vcc.example.com:5080")
    ua.answer(call.leg, b"v=0\r\n", 0.0)
    (ok,) = responses(ua)
    assert ok.body == b"v=0\r\n"
    assert ok.content_type == "application/sdp"
    assert ok.headers.get("Contact") == "<sip:kefu@127.0.0.1:5070>"
    via = ok.top_via
    assert via.received == "127.0.0.1" and via.rport == 5080


def test_responses_go_to_the_packet_source_never_to_via(ua: UserAgent) -> None:
    ua.receive(request("OPTIONS", via_host="198.51.100.7:5060"), TRUNK, 0.0)
    ((resp, peer),) = sent(ua)
    assert peer == TRUNK


def test_2xx_is_retransmitted_until_ack_then_bye_after_64_t1(ua: UserAgent) -> None:
    call, _ = answered(ua)
    ua.handle_timer(0.5)
    assert [r.status for r in responses(ua)] == [200]
    ua.handle_timer(1.5)
    assert [r.status for r in responses(ua)] == [200]
    ua.handle_timer(32.0)
    out = sent(ua)
    assert any(isinstance(m, Request) and m.method == "BYE" for m, _ in out)
    assert ev.CallEnded(call.leg, "no ACK for our 2xx") in app_events(ua)


def test_cancel_before_answer(ua: UserAgent) -> None:
    call = incoming(ua)
    ua.receive(request("CANCEL", body=""), TRUNK, 0.3)
    statuses = sorted((r.status, r.cseq.method) for r in responses(ua))
    assert (200, "CANCEL") in statuses and (487, "INVITE") in statuses
    assert app_events(ua) == [ev.CallCancelled(call.leg)]
    ua.answer(call.leg, b"v=0\r\n", 0.4)  # the app lost the race: nothing happens
    assert responses(ua) == []


def test_cancel_for_unknown_invite_is_481(ua: UserAgent) -> None:
    ua.receive(request("CANCEL", branch="z9hG4bK-nothing"), TRUNK, 0.0)
    assert [r.status for r in responses(ua)] == [481]


def test_100_trying_when_the_app_is_slow(ua: UserAgent) -> None:
    incoming(ua)
    ua.handle_timer(0.25)
    assert [r.status for r in responses(ua)] == [100]


def test_options_out_of_dialog(ua: UserAgent) -> None:
    ua.receive(request("OPTIONS"), TRUNK, 0.0)
    (ok,) = responses(ua)
    assert ok.status == 200
    assert "INVITE" in (ok.headers.get("Allow") or "")


def test_bye_for_unknown_dialog_is_481(ua: UserAgent) -> None:
    ua.receive(request("BYE", to_tag="nope"), TRUNK, 0.0)
    assert [r.status for r in responses(ua)] == [481]


def test_unknown_method_is_501(ua: UserAgent) -> None:
    ua.receive(request("FROBNICATE"), TRUNK, 0.0)
    assert [r.status for r in responses(ua)] == [501]


def test_oversized_message_is_513(ua: UserAgent) -> None:
    big = request("OPTIONS", extra=(("X-Pad", "a" * 70000),))
    ua.receive(big, TRUNK, 0.0)
    assert [r.status for r in responses(ua)] == [513]


def test_garbage_is_dropped_silently(ua: UserAgent) -> None:
    ua.receive(b"\x00\x01garbage\xff" * 10, TRUNK, 0.0)
    assert sent(ua) == []
    assert any(isinstance(e, ev.Dropped) for e in events(ua))


def test_outside_allowlist_is_403_identical_for_every_user(ua: UserAgent) -> None:
    stranger = Peer("udp", "10.9.8.7", 5060)
    answers = []
    for user in ("1000", "admin", "4001"):
        ua.receive(invite(user=user, call_id=f"c-{user}", branch=f"z9hG4bK{user}"), stranger, 0)
        (resp,) = responses(ua)
        answers.append((resp.status, resp.reason, sorted(n for n, _ in resp.headers)))
    assert answers[0][0] == 403
    assert answers[0] == answers[1] == answers[2]
    assert ua.leg_count == 0


def test_missing_header_is_400_naming_it(ua: UserAgent) -> None:
    data = invite().replace(b"Call-ID: call-1@vcc\r\n", b"")
    ua.receive(data, TRUNK, 0.0)
    # Without Call-ID no response can be addressed; the UA drops it quietly.
    out = responses(ua)
    assert out == [] or out[0].status == 400


def test_info_dtmf_relay_and_plain(ua: UserAgent) -> None:
    call, tag = answered(ua)
    body = "Signal=5\r\nDuration=160\r\n"
    ua.receive(
        request(
            "INFO",
            to_tag=tag,
            cseq=2,
            branch="z9hG4bK-i1",
            body=body,
            content_type="application/dtmf-relay",
        ),
        TRUNK,
        0.2,
    )
    ua.receive(
        request(
            "INFO",
            to_tag=tag,
            cseq=3,
            branch="z9hG4bK-i2",
            body="#",
            content_type="application/dtmf",
        ),
        TRUNK,
        0.3,
    )
    assert [r.status for r in responses(ua) if r.cseq.method == "INFO"] == [200, 200]
    digits = [e.digit for e in app_events(ua) if isinstance(e, ev.InfoDtmf)]
    assert digits == ["5", "#"]
    assert call.leg


def test_refer_then_notify_reports_transfer(ua: UserAgent) -> None:
    call, tag = answered(ua)
    ua.receive(request("ACK", to_tag=tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    app_events(ua)
    ua.refer(call.leg, "sip:queue@127.0.0.1:5090", 1.0)
    ((refer, peer),) = sent(ua)
    assert isinstance(refer, Request) and refer.method == "REFER"
    assert refer.headers.get("Refer-To") == "<sip:queue@127.0.0.1:5090>"
    assert peer == TRUNK
    accepted = (
        f"SIP/2.0 202 Accepted\r\nVia: {refer.headers.get('Via')}\r\n"
        f"From: {refer.headers.get('From')}\r\nTo: {refer.headers.get('To')}\r\n"
        f"Call-ID: {refer.call_id}\r\nCSeq: {refer.cseq}\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    ua.receive(accepted, TRUNK, 1.1)
    assert app_events(ua) == [ev.ReferStatus(call.leg, 202, False)]
    notify = request(
        "NOTIFY",
        to_tag=tag,
        cseq=2,
        branch="z9hG4bK-n1",
        body="SIP/2.0 200 OK\r\n",
        content_type="message/sipfrag;version=2.0",
        extra=(
            ("Event", f"refer;id={refer.cseq.seq}"),
            ("Subscription-State", "terminated;reason=noresource"),
        ),
    )
    # The NOTIFY's To/From are from the trunk's view: swap tags into place.
    ua.receive(notify, TRUNK, 1.2)
    assert [r.status for r in responses(ua)] == [200]
    assert app_events(ua) == [ev.ReferStatus(call.leg, 200, True)]


def test_digest_auth_challenge_and_retry() -> None:
    ua = UserAgent(UaSettings(auth_users=(("vcc", "s3cret"),), auth_secret=b"k" * 32))
    ua.set_local_address("127.0.0.1", 5070)
    ua.receive(invite(), TRUNK, 0.0)
    (challenge,) = responses(ua)
    assert challenge.status == 401
    www = challenge.headers.get("WWW-Authenticate") or ""
    assert "SHA-256" in www
    auth = answer_challenge(www, "INVITE", "sip:4001@127.0.0.1:5070", "vcc", "s3cret", "c0ffee")
    ua.receive(invite(cseq=2, branch="z9hG4bK-2", extra=(("Authorization", auth),)), TRUNK, 0.1)
    assert [type(e) for e in app_events(ua)] == [ev.IncomingCall]


def test_wrong_password_is_challenged_again() -> None:
    ua = UserAgent(UaSettings(auth_users=(("vcc", "s3cret"),), auth_secret=b"k" * 32))
    ua.receive(invite(), TRUNK, 0.0)
    www = responses(ua)[0].headers.get("WWW-Authenticate") or ""
    auth = answer_challenge(www, "INVITE", "sip:4001@127.0.0.1:5070", "vcc", "wrong", "c0ffee")
    ua.receive(invite(cseq=2, branch="z9hG4bK-2", extra=(("Authorization", auth),)), TRUNK, 0.1)
    assert [r.status for r in responses(ua)] == [401]
    assert app_events(ua) == []


def test_session_timer_negotiated_and_expiry_sends_bye(ua: UserAgent) -> None:
    ua.receive(
        invite(extra=(("Session-Expires", "90;refresher=uac"), ("Supported", "timer"))), TRUNK, 0
    )
    (call,) = app_events(ua)
    assert isinstance(call, ev.IncomingCall)
    ua.answer(call.leg, b"v=0\r\n", 0.0)
    (ok,) = responses(ua)
    assert (ok.headers.get("Session-Expires") or "").startswith("90")
    ua.receive(request("ACK", to_tag=ok.to.tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    app_events(ua)
    ua.handle_timer(ua.get_timer() or 0.0)
    ua.handle_timer(100.0)
    out = sent(ua)
    assert any(isinstance(m, Request) and m.method == "BYE" for m, _ in out)
    assert ev.CallEnded(call.leg, "session expired") in app_events(ua)


def test_session_interval_too_small_is_422(ua: UserAgent) -> None:
    ua.receive(invite(extra=(("Session-Expires", "30"), ("Supported", "timer"))), TRUNK, 0)
    (resp,) = responses(ua)
    assert resp.status == 422
    assert resp.headers.get("Min-SE") == "90"


def test_reinvite_hold_is_offered_to_the_app(ua: UserAgent) -> None:
    call, tag = answered(ua)
    ua.receive(request("ACK", to_tag=tag, branch="z9hG4bK-ack"), TRUNK, 0.1)
    app_events(ua)
    ua.receive(invite(to_tag=tag, cseq=2, branch="z9hG4bK-re"), TRUNK, 1.0)
    (re,) = app_events(ua)
    assert isinstance(re, ev.ReInvite) and re.offer
    ua.answer_reinvite(call.leg, b"v=0\r\n", 1.0)
    assert [r.status for r in responses(ua)] == [200]


def test_lower_cseq_in_dialog_is_500(ua: UserAgent) -> None:
    _, tag = answered(ua)
    ua.receive(request("INFO", to_tag=tag, cseq=0, branch="z9hG4bK-low"), TRUNK, 0.1)
    assert [r.status for r in responses(ua)] == [500]


def test_retransmitted_invite_is_absorbed(ua: UserAgent) -> None:
    incoming(ua)
    ua.receive(invite(), TRUNK, 0.1)
    assert app_events(ua) == []
    assert [r.status for r in responses(ua)] == [100]


TESTDATA = Path(__file__).resolve().parents[1] / "testdata"


def _torture_files() -> list[Path]:
    import os

    root = Path(os.environ.get("KEFU_TESTDATA", TESTDATA))
    return sorted(p for p in root.glob("rfc*/*") if p.is_file() and p.suffix != ".md")


@pytest.mark.parametrize("path", _torture_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_torture_message_never_breaks_the_ua(ua: UserAgent, path: Path) -> None:
    ua.receive(path.read_bytes(), TRUNK, 0.0)
    for data, peer in ua.datagrams_to_send():
        assert peer == TRUNK  # never to a host named in the message
        parse_message(data)  # whatever we send is well formed
    events(ua)
    ua.receive(request("OPTIONS", call_id="after", branch="z9hG4bK-after"), TRUNK, 1.0)
    assert [r.status for r in responses(ua)] == [200]
