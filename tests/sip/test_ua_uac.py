"""kefu as the caller (UAC), sans-IO: whole outbound call flows with hand-driven time.

The fake callee below answers kefu's INVITEs as a trunk would; digest credentials are checked
by kefu's own server-side verifier (:class:`kefu.sip.auth.DigestServer`), so a wrong
``response``, ``uri``, ``nc`` or ``cnonce`` fails these tests.
"""

from __future__ import annotations

import pytest
from helpers.sip_trunk import app_events, sent

from kefu.sip import ua_events as ev
from kefu.sip.auth import DigestServer
from kefu.sip.message import Request, Response, make_response
from kefu.sip.ua import Peer, UserAgent
from kefu.sip.uac import DialSpec

TRUNK = Peer("udp", "127.0.0.1", 5080)
PROXY = Peer("udp", "127.0.0.1", 5090)
OFFER = b"v=0\r\no=kefu 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
ANSWER = b"v=0\r\no=vcc 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
CALLEE_TAG = "callee-1"
CONTACT = "<sip:4001@127.0.0.1:5080>"


@pytest.fixture
def ua() -> UserAgent:
    agent = UserAgent()
    agent.set_local_address("127.0.0.1", 5070)
    return agent


def spec(**kw: object) -> DialSpec:
    values: dict[str, object] = {
        "target": "sip:4001@127.0.0.1:5080",
        "from_uri": "<sip:kefu@127.0.0.1>",
        "sdp": OFFER,
        "username": "kefu",
        "password": "secret",
        "ring_timeout": 30.0,
    }
    values.update(kw)
    return DialSpec(**values)  # type: ignore[arg-type]


def requests(ua: UserAgent) -> list[tuple[Request, Peer]]:
    return [(m, p) for m, p in sent(ua) if isinstance(m, Request)]


def only_request(ua: UserAgent, method: str) -> tuple[Request, Peer]:
    out = [(m, p) for m, p in requests(ua) if m.method == method]
    assert len(out) == 1, [m.method for m, _ in requests(ua)]
    return out[0]


def respond(
    ua: UserAgent,
    req: Request,
    status: int,
    now: float,
    *,
    headers: tuple[tuple[str, str], ...] = (),
    body: bytes = b"",
    tag: str | None = CALLEE_TAG,
    peer: Peer = TRUNK,
) -> Response:
    extra = list(headers)
    if 100 < status < 300:
        extra.append(("Contact", CONTACT))
    if body:
        extra.append(("Content-Type", "application/sdp"))
    resp = make_response(
        req, status, to_tag=tag if status > 100 else None, headers=extra, body=body
    )
    ua.receive(bytes(resp), peer, now)
    return resp


def dial(ua: UserAgent, now: float = 0.0, **kw: object) -> tuple[str, Request]:
    leg = ua.dial(spec(**kw), now)
    invite, peer = only_request(ua, "INVITE")
    assert peer == kw.get("outbound_proxy", TRUNK)
    return leg, invite


def test_invite_answer_ack_then_bye_from_the_callee(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    assert str(invite.uri) == "sip:4001@127.0.0.1:5080"
    assert invite.from_.tag and invite.to.tag is None
    assert invite.body == OFFER and invite.content_type == "application/sdp"
    assert invite.headers.get("Contact") == "<sip:kefu@127.0.0.1:5070>"
    respond(ua, invite, 100, 0.01)
    respond(ua, invite, 180, 0.05)
    assert app_events(ua) == [ev.OutboundProgress(leg, 180, "Ringing", None)]
    respond(ua, invite, 200, 1.0, body=ANSWER, headers=(("Record-Route", "<sip:10.0.0.9;lr>"),))
    (answered,) = app_events(ua)
    assert answered == ev.OutboundAnswered(leg, ANSWER, 1.0)
    ack, peer = only_request(ua, "ACK")
    # §13.2.2.4: the INVITE's CSeq number, the 2xx's To tag, Request-URI = its Contact,
    # the route set from Record-Route; the next hop is the (IP) route
    assert ack.cseq.seq == invite.cseq.seq and ack.cseq.method == "ACK"
    assert ack.to.tag == CALLEE_TAG and ack.from_.tag == invite.from_.tag
    assert str(ack.uri) == "sip:4001@127.0.0.1:5080"
    assert ack.headers.get_all("Route") == ["<sip:10.0.0.9;lr>"]
    assert peer == Peer("udp", "10.0.0.9", 5060)
    assert ack.top_via.branch != invite.top_via.branch
    # the callee hangs up: an in-dialog BYE for the UAC's dialog
    bye = Request(
        "BYE",
        "sip:kefu@127.0.0.1:5070",
        [
            ("Via", "SIP/2.0/UDP 127.0.0.1:5080;branch=z9hG4bK-bye1"),
            ("From", f"<sip:4001@127.0.0.1:5080>;tag={CALLEE_TAG}"),
            ("To", f"{invite.headers.get('From')}"),
            ("Call-ID", invite.call_id),
            ("CSeq", "1 BYE"),
            ("Max-Forwards", "70"),
        ],
    )
    ua.receive(bytes(bye), TRUNK, 5.0)
    ok = [m for m, _ in sent(ua) if isinstance(m, Response)]
    assert [r.status for r in ok] == [200]
    assert app_events(ua) == [ev.CallEnded(leg, "remote hangup")]
    ua.handle_timer(100.0)
    assert ua.leg_count == 0 and len(ua.transactions) == 0


def test_retransmitted_2xx_gets_the_same_ack(ua: UserAgent) -> None:
    _, invite = dial(ua)
    ok = respond(ua, invite, 200, 0.5, body=ANSWER)
    first, _ = only_request(ua, "ACK")
    app_events(ua)
    ua.receive(bytes(ok), TRUNK, 1.0)
    again, _ = only_request(ua, "ACK")
    assert bytes(again) == bytes(first)
    assert app_events(ua) == []


def test_kefu_hangs_up_with_bye_in_the_dialog(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    respond(ua, invite, 200, 0.5, body=ANSWER)
    requests(ua)
    ua.hangup(leg, 3.0)
    bye, peer = only_request(ua, "BYE")
    assert bye.cseq.seq == invite.cseq.seq + 1 and bye.to.tag == CALLEE_TAG
    assert peer == TRUNK
    respond(ua, bye, 200, 3.1)
    ua.handle_timer(40.0)
    assert ua.leg_count == 0


@pytest.mark.parametrize(
    ("status", "challenge_header", "answer_header"),
    [
        (401, "WWW-Authenticate", "Authorization"),
        (407, "Proxy-Authenticate", "Proxy-Authorization"),
    ],
)
@pytest.mark.parametrize("algorithm", ["MD5", "SHA-256"])
def test_challenge_is_answered_once_with_valid_credentials(
    ua: UserAgent, status: int, challenge_header: str, answer_header: str, algorithm: str
) -> None:
    server = DigestServer("trunk", {"kefu": "secret"}, b"k" * 32)
    leg, invite = dial(ua)
    respond(ua, invite, 100, 0.01)
    challenge = server.challenge(0.02, algorithm)
    respond(ua, invite, status, 0.02, headers=((challenge_header, challenge),))
    out = requests(ua)
    # the transaction ACKs the 401/407 itself (§17.1.1.3), then a new INVITE goes out
    assert [m.method for m, _ in out] == ["ACK", "INVITE"]
    retry = out[1][0]
    assert retry.cseq.seq == invite.cseq.seq + 1
    assert retry.top_via.branch != invite.top_via.branch
    assert retry.call_id == invite.call_id and retry.from_.tag == invite.from_.tag
    assert retry.to.tag is None and retry.body == OFFER
    credentials = retry.headers.get(answer_header)
    assert credentials is not None and f"algorithm={algorithm}" in credentials
    assert "qop=auth" in credentials and "nc=00000001" in credentials
    result = server.verify("INVITE", credentials, 0.03, request_uri=retry.uri)
    assert result.ok, result.reason
    assert app_events(ua) == [ev.OutboundRetried(leg, "auth", status, str(invite.uri))]
    respond(ua, retry, 200, 0.1, body=ANSWER)
    assert isinstance(app_events(ua)[0], ev.OutboundAnswered)
    ack2, _ = only_request(ua, "ACK")
    # the 2xx's ACK carries the INVITE's credentials and CSeq number (§13.2.2.4, §22)
    assert ack2.cseq.seq == retry.cseq.seq
    assert ack2.headers.get(answer_header) == credentials


def test_a_second_challenge_fails_the_call(ua: UserAgent) -> None:
    server = DigestServer("trunk", {"kefu": "wrong"}, b"k" * 32)
    leg, invite = dial(ua)
    header = (("WWW-Authenticate", server.challenge(0.0, "MD5")),)
    respond(ua, invite, 401, 0.01, headers=header)
    retry = [m for m, _ in requests(ua) if m.method == "INVITE"][0]
    app_events(ua)
    respond(ua, retry, 401, 0.02, headers=(("WWW-Authenticate", server.challenge(0.02, "MD5")),))
    assert [m.method for m, _ in requests(ua)] == ["ACK"]  # no third INVITE
    assert app_events(ua) == [
        ev.OutboundFailed(leg, 401, "authentication failed: challenged again")
    ]
    ua.handle_timer(100.0)
    assert ua.leg_count == 0 and len(ua.transactions) == 0


def test_a_stale_rechallenge_is_answered_once_more(ua: UserAgent) -> None:
    server = DigestServer("trunk", {"kefu": "secret"}, b"k" * 32)
    leg, invite = dial(ua)
    respond(ua, invite, 401, 0.01, headers=(("WWW-Authenticate", server.challenge(0.0)),))
    retry = [m for m, _ in requests(ua) if m.method == "INVITE"][0]
    stale = server.challenge(0.02, stale=True)
    respond(ua, retry, 401, 0.02, headers=(("WWW-Authenticate", stale),))
    third = [m for m, _ in requests(ua) if m.method == "INVITE"][0]
    assert third.cseq.seq == invite.cseq.seq + 2
    assert server.verify("INVITE", third.headers.get("Authorization") or "", 0.03).ok
    respond(
        ua, third, 401, 0.04, headers=(("WWW-Authenticate", server.challenge(0.04, stale=True)),)
    )
    assert app_events(ua)[-1] == ev.OutboundFailed(
        leg, 401, "authentication failed: challenged again"
    )


def test_unknown_algorithm_fails_without_sending_anything(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    challenge = 'Digest realm="trunk", nonce="abc", algorithm=SHA-999, qop="auth"'
    respond(ua, invite, 401, 0.01, headers=(("WWW-Authenticate", challenge),))
    assert [m.method for m, _ in requests(ua)] == ["ACK"]
    (failed,) = app_events(ua)
    assert isinstance(failed, ev.OutboundFailed) and failed.status == 401
    assert "unsupported digest algorithm 'SHA-999'" in failed.reason


def test_the_strongest_known_challenge_wins(ua: UserAgent) -> None:
    _, invite = dial(ua)
    headers = (
        ("WWW-Authenticate", 'Digest realm="t", nonce="n1", algorithm=SHA-999'),
        ("WWW-Authenticate", 'Digest realm="t", nonce="n2", algorithm=MD5, qop="auth"'),
        ("WWW-Authenticate", 'Digest realm="t", nonce="n3", algorithm=SHA-256, qop="auth"'),
    )
    respond(ua, invite, 401, 0.01, headers=headers)
    retry = [m for m, _ in requests(ua) if m.method == "INVITE"][0]
    credentials = retry.headers.get("Authorization") or ""
    assert 'nonce="n3"' in credentials and "algorithm=SHA-256" in credentials


def test_challenge_without_credentials_fails(ua: UserAgent) -> None:
    leg, invite = dial(ua, username="")
    respond(ua, invite, 407, 0.01, headers=(("Proxy-Authenticate", 'Digest realm="t", nonce="n"'),))
    assert app_events(ua)[-1] == ev.OutboundFailed(
        leg, 407, "challenged, and no trunk credentials are configured"
    )


def test_ring_timeout_cancels_after_a_provisional_then_487(ua: UserAgent) -> None:
    leg, invite = dial(ua, ring_timeout=10.0)
    respond(ua, invite, 180, 1.0)
    app_events(ua)
    assert ua.get_timer() is not None and ua.get_timer() <= 10.0  # type: ignore[operator]
    ua.handle_timer(10.0)
    cancel, peer = only_request(ua, "CANCEL")
    # §9.1: the CANCEL copies the INVITE's Request-URI, Call-ID, From, To, CSeq number, branch
    assert str(cancel.uri) == str(invite.uri) and peer == TRUNK
    assert cancel.cseq.seq == invite.cseq.seq and cancel.cseq.method == "CANCEL"
    assert cancel.top_via.branch == invite.top_via.branch
    assert cancel.to.tag is None and cancel.call_id == invite.call_id
    respond(ua, cancel, 200, 10.01)
    respond(ua, invite, 487, 10.02)
    assert [m.method for m, _ in requests(ua)] == ["ACK"]
    assert app_events(ua) == [ev.OutboundFailed(leg, 487, "no answer within 10 s (CANCEL sent)")]
    ua.handle_timer(100.0)
    assert ua.leg_count == 0 and len(ua.transactions) == 0


def test_cancel_waits_for_a_provisional_response(ua: UserAgent) -> None:
    leg, invite = dial(ua, ring_timeout=0.2)
    ua.handle_timer(0.2)
    assert [m.method for m, _ in requests(ua)] == []  # no 1xx yet: no CANCEL (§9.1)
    respond(ua, invite, 100, 0.3)
    cancel, _ = only_request(ua, "CANCEL")
    respond(ua, cancel, 200, 0.31)
    respond(ua, invite, 487, 0.32)
    assert app_events(ua)[-1] == ev.OutboundFailed(leg, 487, "no answer within 0.2 s (CANCEL sent)")


def test_no_final_response_after_cancel_ends_the_leg(ua: UserAgent) -> None:
    leg, invite = dial(ua, ring_timeout=5.0)
    respond(ua, invite, 180, 0.1)
    ua.handle_timer(5.0)
    only_request(ua, "CANCEL")
    app_events(ua)
    ua.handle_timer(5.0 + 32.0)
    assert ev.OutboundFailed(leg, 408, "no final response within 64*T1 of the CANCEL") in (
        app_events(ua)
    )


def test_2xx_crossing_the_cancel_is_acked_and_hung_up(ua: UserAgent) -> None:
    leg, invite = dial(ua, ring_timeout=5.0)
    respond(ua, invite, 180, 0.1)
    ua.handle_timer(5.0)
    only_request(ua, "CANCEL")
    respond(ua, invite, 200, 5.01, body=ANSWER)
    assert [m.method for m, _ in requests(ua)] == ["ACK", "BYE"]
    assert app_events(ua)[-1] == ev.OutboundFailed(leg, 487, "no answer within 5 s (CANCEL sent)")


def test_hangup_before_answer_sends_cancel(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    respond(ua, invite, 183, 0.5, body=ANSWER)
    assert app_events(ua) == [ev.OutboundProgress(leg, 183, "Session Progress", ANSWER)]
    ua.hangup(leg, 1.0)
    only_request(ua, "CANCEL")
    respond(ua, invite, 487, 1.1)
    assert app_events(ua)[-1].status == 487  # type: ignore[attr-defined]


def test_no_response_at_all_is_408(ua: UserAgent) -> None:
    leg, _ = dial(ua, ring_timeout=100.0)
    for t in (0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 32.0):
        ua.handle_timer(t)
    retransmits = [m for m, _ in requests(ua) if m.method == "INVITE"]
    assert len(retransmits) == 6  # Timer A doubling until Timer B (§17.1.1.2)
    assert app_events(ua) == [ev.OutboundFailed(leg, 408, "Request Timeout")]


def test_3xx_is_followed_to_the_contact_with_the_highest_q(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    contacts = (
        ("Contact", "<sip:4001@127.0.0.3:5062>;q=0.5"),
        ("Contact", "<sip:4001@127.0.0.2:5061>;q=0.9"),
    )
    respond(ua, invite, 302, 0.1, headers=contacts)
    out = requests(ua)
    assert [m.method for m, _ in out] == ["ACK", "INVITE"]
    (retry, peer) = out[1]
    assert str(retry.uri) == "sip:4001@127.0.0.2:5061" and peer == Peer("udp", "127.0.0.2", 5061)
    assert retry.cseq.seq == invite.cseq.seq + 1 and retry.call_id == invite.call_id
    assert app_events(ua) == [ev.OutboundRetried(leg, "redirect", 302, "sip:4001@127.0.0.2:5061")]
    respond(ua, retry, 200, 0.2, body=ANSWER, peer=peer)
    assert isinstance(app_events(ua)[0], ev.OutboundAnswered)


def test_redirects_stop_at_the_maximum(ua: UserAgent) -> None:
    leg, invite = dial(ua, max_redirects=2)
    current = invite
    for hop in range(3):
        contact = (("Contact", f"<sip:4001@127.0.1.{hop + 1}:5060>"),)
        respond(ua, current, 302, 0.1 * (hop + 1), headers=contact)
        invites = [m for m, _ in requests(ua) if m.method == "INVITE"]
        if invites:
            current = invites[0]
    assert app_events(ua)[-1] == ev.OutboundFailed(leg, 302, "more than 2 redirects")


def test_a_redirect_to_a_host_name_without_proxy_fails(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    respond(ua, invite, 301, 0.1, headers=(("Contact", "<sip:4001@pbx.example.com>"),))
    assert app_events(ua)[-1] == ev.OutboundFailed(
        leg, 301, "redirected to no target kefu can reach"
    )


def test_outbound_proxy_gets_every_request(ua: UserAgent) -> None:
    leg, invite = dial(ua, target="sip:+861012345@trunk.example.com", outbound_proxy=PROXY)
    assert str(invite.uri) == "sip:+861012345@trunk.example.com"
    respond(ua, invite, 200, 0.2, body=ANSWER, peer=PROXY)
    _, peer = only_request(ua, "ACK")
    assert peer == PROXY
    ua.hangup(leg, 1.0)
    _, peer = only_request(ua, "BYE")
    assert peer == PROXY


def test_failure_status_is_reported(ua: UserAgent) -> None:
    leg, invite = dial(ua)
    respond(ua, invite, 486, 0.3)
    assert app_events(ua) == [ev.OutboundFailed(leg, 486, "Busy Here")]


def test_unroutable_target_is_refused_before_sending(ua: UserAgent) -> None:
    with pytest.raises(ValueError, match="cannot route"):
        ua.dial(spec(target="sip:4001@pbx.example.com"), 0.0)
    with pytest.raises(ValueError, match="not a SIP URI"):
        ua.dial(spec(target="not a uri"), 0.0)
    assert ua.leg_count == 0 and requests(ua) == []
