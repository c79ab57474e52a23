"""Delayed offer (RFC 3261 §13.2.1, RFC 3264 §5): an INVITE without SDP, kefu's offer in the
200 OK, the answer in the ACK. Hand-driven time, the fake trunk of ``helpers.sip_trunk``."""

from __future__ import annotations

import pytest
from helpers.sip_trunk import TRUNK, app_events, events, invite, request, responses, sent

from kefu.sip import ua_events as ev
from kefu.sip.message import Request, Response, parse_message
from kefu.sip.offer import accept_answer, continue_origin, make_offer
from kefu.sip.offer_answer import Negotiated
from kefu.sip.sdp import SessionDescription
from kefu.sip.ua import UserAgent

OFFER = make_offer(local_address="127.0.0.1", local_port=40000, session_id=7, session_version=1)


def answer_sdp(m_line: str = "m=audio 6000 RTP/AVP 0 101", extra: str = "") -> str:
    return (
        "v=0\r\no=vcc 2 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.9\r\nt=0 0\r\n"
        f"{m_line}\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
        f"a=fmtp:101 0-16\r\na=ptime:20\r\n{extra}"
    )


@pytest.fixture
def ua() -> UserAgent:
    agent = UserAgent()
    agent.set_local_address("127.0.0.1", 5070)
    return agent


def offered(ua: UserAgent, now: float = 0.0) -> tuple[ev.IncomingCall, Response]:
    """An INVITE without SDP, answered with kefu's offer; the 200 that went out."""
    ua.receive(invite(body=""), TRUNK, now)
    (call,) = app_events(ua)
    assert isinstance(call, ev.IncomingCall) and call.offer is None
    ua.answer_with_offer(call.leg, OFFER, now)
    (ok,) = responses(ua)
    assert ok.status == 200
    return call, ok


def ack(tag: str, body: str = "", *, cseq: int = 1, content_type: str | None = None) -> bytes:
    return request(
        "ACK", to_tag=tag, cseq=cseq, branch="z9hG4bK-ack", body=body, content_type=content_type
    )


def ok_for(req: Request) -> bytes:
    """The trunk's 200 to a request kefu sent."""
    return (
        f"SIP/2.0 200 OK\r\nVia: {req.headers.get('Via')}\r\nFrom: {req.headers.get('From')}\r\n"
        f"To: {req.headers.get('To')}\r\nCall-ID: {req.call_id}\r\nCSeq: {req.cseq}\r\n"
        "Content-Length: 0\r\n\r\n"
    ).encode()


def only_bye(ua: UserAgent) -> Request:
    ((bye, peer),) = sent(ua)
    assert isinstance(bye, Request) and bye.method == "BYE", bye
    assert peer == TRUNK
    return bye


def test_the_200_carries_kefus_offer_with_every_codec_and_telephone_event(ua: UserAgent) -> None:
    _, ok = offered(ua)
    assert ok.content_type == "application/sdp"
    assert ok.body == bytes(OFFER)
    sdp = SessionDescription.parse(ok.body)
    (audio,) = sdp.media
    names = {(m.encoding, m.clock_rate) for m in audio.rtpmaps().values()}
    assert {("PCMU", 8000), ("PCMA", 8000), ("G722", 8000), ("opus", 48000)} <= names
    assert ("telephone-event", 8000) in names and ("telephone-event", 48000) in names
    assert (audio.port, sdp.connection and sdp.connection.address) == (40000, "127.0.0.1")


def test_retransmitted_200s_carry_the_same_offer_until_the_ack(ua: UserAgent) -> None:
    call, ok = offered(ua)
    again = []
    for now in (0.5, 1.5, 3.5):
        ua.handle_timer(now)
        again += responses(ua)
    assert [r.status for r in again] == [200, 200, 200]
    assert all(bytes(r) == bytes(ok) for r in again)
    ua.receive(ack(ok.to.tag or "", answer_sdp()), TRUNK, 3.6)
    ua.handle_timer(7.5)
    assert responses(ua) == []


def test_ack_with_an_answer_confirms_the_call_with_its_media(ua: UserAgent) -> None:
    call, ok = offered(ua)
    ua.receive(ack(ok.to.tag or "", answer_sdp()), TRUNK, 0.1)
    (confirmed,) = app_events(ua)
    assert isinstance(confirmed, ev.CallConfirmed) and confirmed.leg == call.leg
    n = confirmed.negotiated
    assert isinstance(n, Negotiated)
    assert (n.codec, n.payload_type, n.dtmf_payload_type) == ("PCMU", 0, 101)
    assert (n.remote_address, n.remote_port, n.remote_rtcp_port) == ("127.0.0.9", 6000, 6001)
    assert n.local_is_offerer and n.local_sdp == OFFER and n.direction == "sendrecv"
    assert sent(ua) == []  # no BYE, no more 200s
    ua.receive(request("BYE", to_tag=ok.to.tag, cseq=2, branch="z9hG4bK-bye"), TRUNK, 5.0)
    assert [r.status for r in responses(ua)] == [200]
    assert app_events(ua) == [ev.CallEnded(call.leg, "remote hangup")]


def test_the_answer_may_pick_a_codec_kefu_offered_later(ua: UserAgent) -> None:
    _, ok = offered(ua)
    body = answer_sdp("m=audio 6000 RTP/AVP 9 101").replace("a=rtpmap:0 PCMU", "a=rtpmap:9 G722")
    ua.receive(ack(ok.to.tag or "", body), TRUNK, 0.1)
    (confirmed,) = app_events(ua)
    assert isinstance(confirmed, ev.CallConfirmed) and confirmed.negotiated is not None
    assert (confirmed.negotiated.codec, confirmed.negotiated.payload_type) == ("G722", 9)


BAD_ANSWERS = {
    "no body": ("", None, 400, "no SDP answer in the ACK"),
    "not sdp": ("Signal=5\r\n", "application/dtmf-relay", 400, "not application/sdp"),
    "unparsable": ("v=0\r\nthis is not sdp\r\n", None, 400, "Bad SDP answer"),
    "no common codec": (
        answer_sdp("m=audio 6000 RTP/AVP 18").replace("a=rtpmap:0 PCMU", "a=rtpmap:18 G729"),
        None,
        488,
        "no codec kefu offered",
    ),
    "audio port 0": (answer_sdp("m=audio 0 RTP/AVP 0"), None, 488, "no audio stream"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_ack_without_a_usable_answer_ends_the_call_with_bye_and_reason(
    ua: UserAgent, case: str
) -> None:
    body, ctype, cause, why = BAD_ANSWERS[case]
    call, ok = offered(ua)
    ua.receive(ack(ok.to.tag or "", body, content_type=ctype), TRUNK, 0.1)
    bye = only_bye(ua)
    assert bye.call_id == ok.call_id and bye.to.tag == ok.from_.tag
    reason = bye.headers.get("Reason") or ""
    assert reason.startswith(f"SIP;cause={cause};text=") and why in reason, reason
    (ended,) = app_events(ua)
    assert isinstance(ended, ev.CallEnded) and ended.leg == call.leg
    assert ended.reason.startswith("bad_answer (") and why in ended.reason
    # nothing is left once the trunk answers the BYE: no 200 retransmissions, no leg
    ua.receive(ok_for(bye), TRUNK, 0.2)
    ua.handle_timer(40.0)
    assert sent(ua) == [] and ua.leg_count == 0
    # and the next call is served as usual
    ua.receive(invite(call_id="call-2@vcc", branch="z9hG4bK-2"), TRUNK, 41.0)
    (nxt,) = app_events(ua)
    assert isinstance(nxt, ev.IncomingCall) and nxt.offer


def test_a_stale_ack_does_not_consume_the_offer(ua: UserAgent) -> None:
    call, ok = offered(ua)
    ua.receive(ack(ok.to.tag or "", cseq=0), TRUNK, 0.1)
    assert sent(ua) == [] and app_events(ua) == []
    ua.handle_timer(0.5)
    assert [r.status for r in responses(ua)] == [200]  # still waiting for the real ACK
    ua.receive(ack(ok.to.tag or "", answer_sdp()), TRUNK, 0.6)
    (confirmed,) = app_events(ua)
    assert isinstance(confirmed, ev.CallConfirmed) and confirmed.negotiated is not None


def test_a_retransmitted_ack_after_the_answer_changes_nothing(ua: UserAgent) -> None:
    _, ok = offered(ua)
    ua.receive(ack(ok.to.tag or "", answer_sdp()), TRUNK, 0.1)
    assert len(app_events(ua)) == 1
    ua.receive(ack(ok.to.tag or "", answer_sdp()), TRUNK, 0.6)
    assert app_events(ua) == [] and sent(ua) == []


def test_no_ack_at_all_still_ends_with_bye_after_64_t1(ua: UserAgent) -> None:
    call, _ = offered(ua)
    ua.handle_timer(32.0)
    assert any(isinstance(m, Request) and m.method == "BYE" for m, _ in sent(ua))
    assert ev.CallEnded(call.leg, "no ACK for our 2xx") in app_events(ua)


# --- re-INVITE without SDP (RFC 3264 §8) ------------------------------------------------------


def established(ua: UserAgent) -> tuple[ev.IncomingCall, str, Negotiated]:
    call, ok = offered(ua)
    tag = ok.to.tag or ""
    ua.receive(ack(tag, answer_sdp()), TRUNK, 0.1)
    (confirmed,) = app_events(ua)
    assert isinstance(confirmed, ev.CallConfirmed) and confirmed.negotiated is not None
    return call, tag, confirmed.negotiated


def offerless_reinvite(ua: UserAgent, tag: str, leg: str, offer: SessionDescription) -> Response:
    ua.receive(invite(to_tag=tag, cseq=2, branch="z9hG4bK-re", body=""), TRUNK, 1.0)
    (re,) = app_events(ua)
    assert re == ev.ReInvite(leg, None)
    ua.answer_reinvite_with_offer(leg, offer, 1.0)
    (ok,) = responses(ua)
    assert (ok.status, ok.cseq.seq, ok.body) == (200, 2, bytes(offer))
    return ok


def test_offerless_reinvite_is_answered_in_its_ack(ua: UserAgent) -> None:
    call, tag, first = established(ua)
    reoffer = continue_origin(
        make_offer(local_address="127.0.0.1", local_port=40000, session_id=0, session_version=0),
        first,
    )
    assert reoffer == OFFER  # same description, same o= version (RFC 3264 §8)
    offerless_reinvite(ua, tag, call.leg, reoffer)
    hold = answer_sdp("m=audio 6002 RTP/AVP 0 101", "a=sendonly\r\n")
    ua.receive(ack(tag, hold, cseq=2), TRUNK, 1.1)
    (confirmed,) = app_events(ua)
    assert isinstance(confirmed, ev.CallConfirmed) and confirmed.negotiated is not None
    assert (confirmed.negotiated.remote_port, confirmed.negotiated.direction) == (6002, "recvonly")


def test_offerless_reinvite_with_a_bad_answer_ends_the_call(ua: UserAgent) -> None:
    call, tag, first = established(ua)
    offerless_reinvite(ua, tag, call.leg, first.local_sdp)
    ua.receive(ack(tag, cseq=2), TRUNK, 1.1)
    bye = only_bye(ua)
    assert "no SDP answer" in (bye.headers.get("Reason") or "")
    assert [type(e) for e in app_events(ua)] == [ev.CallEnded]


def test_continue_origin_bumps_the_version_only_when_the_offer_changed() -> None:
    previous = accept_answer(OFFER, SessionDescription.parse(answer_sdp()))
    narrower = make_offer(
        local_address="127.0.0.1", local_port=40000, codecs=("PCMU",), session_id=1,
        session_version=99,
    )  # fmt: skip
    changed = continue_origin(narrower, previous)
    assert (changed.origin.session_id, changed.origin.session_version) == (7, 2)
    assert continue_origin(OFFER, previous).origin == OFFER.origin


def test_offer_survives_a_round_trip_through_the_wire(ua: UserAgent) -> None:
    """The 200 on the wire parses back to the very offer the ACK is read against."""
    _, ok = offered(ua)
    assert SessionDescription.parse(parse_message(bytes(ok)).body) == OFFER
    assert not [e for e in events(ua) if isinstance(e, ev.Dropped)]
