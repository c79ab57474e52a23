"""RFC 3261 §12 dialogs: creation on both sides, golden in-dialog requests, CSeq rules."""

from __future__ import annotations

import pytest

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip.dialog import (
    AckTimeout,
    Dialog,
    DialogId,
    DialogState,
    OkRetransmitter,
    new_branch,
    new_tag,
)
from kefu.sip.message import Request, Response, make_response, parse_message
from kefu.sip.refer import build_refer
from kefu.sip.transaction import TimerConfig

INCOMING_INVITE = (
    "INVITE sip:bot@kefu.test SIP/2.0\r\n"
    "Via: SIP/2.0/UDP p1.vcc.test;branch=z9hG4bK-p1\r\n"
    "Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-ua\r\n"
    "Record-Route: <sip:p1.vcc.test;lr>\r\n"
    "Record-Route: <sip:p2.vcc.test;lr>\r\n"
    "Max-Forwards: 69\r\n"
    'From: "Caller" <sip:caller@vcc.test>;tag=caller1\r\n'
    "To: <sip:bot@kefu.test>\r\n"
    "Call-ID: c1@vcc.test\r\n"
    "CSeq: 10 INVITE\r\n"
    "Contact: <sip:caller@192.0.2.1:5060;transport=udp>\r\n"
    "Content-Length: 0\r\n\r\n"
)

UAS_BYE_GOLDEN = (
    b"BYE sip:caller@192.0.2.1:5060;transport=udp SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 203.0.113.5:5060;branch=z9hG4bK-bye1\r\n"
    b"Max-Forwards: 70\r\n"
    b"Route: <sip:p1.vcc.test;lr>\r\n"
    b"Route: <sip:p2.vcc.test;lr>\r\n"
    b"From: <sip:bot@kefu.test>;tag=bot1\r\n"
    b'To: "Caller" <sip:caller@vcc.test>;tag=caller1\r\n'
    b"Call-ID: c1@vcc.test\r\n"
    b"CSeq: 1 BYE\r\n"
    b"Content-Length: 0\r\n\r\n"
)

UAC_ACK_GOLDEN = (
    b"ACK sip:agent@198.51.100.9:5070 SIP/2.0\r\n"
    b"Via: SIP/2.0/TCP 203.0.113.5:5060;branch=z9hG4bK-ack1\r\n"
    b"Max-Forwards: 70\r\n"
    b"Route: <sip:edge2.vcc.test;lr>\r\n"
    b"Route: <sip:edge1.vcc.test;lr>\r\n"
    b"From: <sip:bot@kefu.test>;tag=kefu9\r\n"
    b"To: <sip:agent@vcc.test>;tag=agent7\r\n"
    b"Call-ID: out-1@kefu.test\r\n"
    b"CSeq: 5 ACK\r\n"
    b"Content-Length: 0\r\n\r\n"
)


def parse_req(text: str) -> Request:
    msg = parse_message(text.encode())
    assert isinstance(msg, Request)
    return msg


def uas_dialog() -> tuple[Dialog, Request]:
    invite = parse_req(INCOMING_INVITE)
    dlg = Dialog.from_invite(
        invite, "bot1", "<sip:bot@203.0.113.5:5060>", via_sent_by="203.0.113.5:5060"
    )
    return dlg, invite


def outgoing_invite() -> Request:
    return parse_req(
        "INVITE sip:agent@vcc.test SIP/2.0\r\n"
        "Via: SIP/2.0/TCP 203.0.113.5:5060;branch=z9hG4bK-inv1\r\n"
        "Max-Forwards: 70\r\n"
        "From: <sip:bot@kefu.test>;tag=kefu9\r\n"
        "To: <sip:agent@vcc.test>\r\n"
        "Call-ID: out-1@kefu.test\r\n"
        "CSeq: 5 INVITE\r\n"
        "Contact: <sip:bot@203.0.113.5:5060;transport=tcp>\r\n"
        "Content-Length: 0\r\n\r\n"
    )


def answer(invite: Request, status: int, *, record_route: bool = True) -> Response:
    headers = [("Contact", "<sip:agent@198.51.100.9:5070>")]
    if record_route:
        headers += [("Record-Route", "<sip:edge1.vcc.test;lr>, <sip:edge2.vcc.test;lr>")]
    return make_response(invite, status, to_tag="agent7", headers=headers)


# --- UAS ------------------------------------------------------------------------------------


def test_uas_dialog_from_invite() -> None:
    dlg, invite = uas_dialog()
    assert dlg.id == DialogId("c1@vcc.test", "bot1", "caller1")
    assert dlg.state is DialogState.EARLY and not dlg.is_uac
    assert [str(r) for r in dlg.route_set] == ["<sip:p1.vcc.test;lr>", "<sip:p2.vcc.test;lr>"]
    assert str(dlg.remote_target) == "sip:caller@192.0.2.1:5060;transport=udp"
    assert dlg.remote_seq == 10 and dlg.local_seq is None
    assert DialogId.for_incoming(invite.replace(headers=invite.headers)) != dlg.id  # no To tag


def test_uas_200_ok_carries_tag_record_route_contact() -> None:
    dlg, invite = uas_dialog()
    ok = dlg.make_response(invite, 200, body=b"v=0\r\n", content_type="application/sdp")
    assert ok.to.tag == "bot1"
    assert ok.headers.get_all("Record-Route") == ["<sip:p1.vcc.test;lr>", "<sip:p2.vcc.test;lr>"]
    assert ok.headers.get("Contact") == "<sip:bot@203.0.113.5:5060>"
    assert ok.headers.get("Content-Type") == "application/sdp"
    assert dlg.make_response(invite, 100).to.tag is None
    dlg.confirm()
    assert dlg.state is DialogState.CONFIRMED


def test_uas_bye_golden() -> None:
    dlg, _ = uas_dialog()
    with pytest.raises(InvalidTransition):
        dlg.create_request("BYE")  # a UAS must not BYE an early dialog (§15)
    dlg.confirm()
    bye = dlg.create_request("BYE", branch="z9hG4bK-bye1")
    assert bytes(bye) == UAS_BYE_GOLDEN
    assert dlg.state is DialogState.TERMINATED
    # A challenged BYE may be re-sent with credentials and the next CSeq.
    again = dlg.create_request("BYE", headers=[("Authorization", "Digest x")])
    assert again.cseq.seq == 2
    with pytest.raises(InvalidTransition):
        dlg.create_request("INFO")


def test_uas_cseq_ordering_and_target_refresh() -> None:
    dlg, invite = uas_dialog()
    dlg.confirm()

    def in_dialog(method: str, seq: int, contact: str | None = None) -> Request:
        h = invite.headers.set("To", "<sip:bot@kefu.test>;tag=bot1").set("CSeq", f"{seq} {method}")
        h = h.remove("Contact") if contact is None else h.set("Contact", contact)
        return Request(method, "sip:bot@203.0.113.5", h)

    assert dlg.receive_request(in_dialog("ACK", 10)) is None
    assert dlg.receive_request(in_dialog("INFO", 11)) is None
    assert dlg.receive_request(in_dialog("INFO", 9)) == 500  # §12.2.2
    assert dlg.remote_seq == 11
    assert dlg.receive_request(in_dialog("INVITE", 12, "<sip:caller@192.0.2.99>")) is None
    assert str(dlg.remote_target) == "sip:caller@192.0.2.99"
    other = in_dialog("INFO", 13).replace(
        headers=in_dialog("INFO", 13).headers.set("To", "<sip:bot@kefu.test>;tag=zzz")
    )
    assert dlg.receive_request(other) == 481
    assert dlg.receive_request(in_dialog("BYE", 14)) is None
    assert dlg.terminated
    assert dlg.receive_request(in_dialog("INFO", 15)) == 481


def test_uas_requires_contact_and_from_tag() -> None:
    invite = parse_req(INCOMING_INVITE)
    with pytest.raises(SipParseError):
        Dialog.from_invite(invite.replace(headers=invite.headers.remove("Contact")), "t", "<x>")
    no_tag = invite.headers.set("From", "<sip:caller@vcc.test>")
    with pytest.raises(SipParseError):
        Dialog.from_invite(invite.replace(headers=no_tag), "t", "<sip:x@y>")


# --- UAC ------------------------------------------------------------------------------------


def test_uac_dialog_route_set_reversed_and_ack_golden() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 200))
    assert dlg.is_uac and dlg.state is DialogState.CONFIRMED
    assert dlg.id == DialogId("out-1@kefu.test", "kefu9", "agent7")
    assert [str(r) for r in dlg.route_set] == [
        "<sip:edge2.vcc.test;lr>",
        "<sip:edge1.vcc.test;lr>",
    ]
    ack = dlg.create_request("ACK", branch="z9hG4bK-ack1")
    assert bytes(ack) == UAC_ACK_GOLDEN
    assert dlg.local_seq == 5  # ACK does not consume a CSeq number
    info = dlg.create_request("INFO", body=b"Signal=1\r\n", content_type="application/dtmf-relay")
    assert info.cseq.seq == 6 and info.headers.get("Content-Type") == "application/dtmf-relay"
    assert info.headers.get("Contact") is None


def test_uac_reinvite_then_ack_uses_new_cseq() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 200))
    reinvite = dlg.create_request("INVITE", body=b"v=0\r\n", content_type="application/sdp")
    assert reinvite.cseq.seq == 6
    assert reinvite.headers.get("Contact") == "<sip:bot@203.0.113.5:5060;transport=tcp>"
    ok = make_response(reinvite, 200, headers=[("Contact", "<sip:agent@198.51.100.10>")])
    dlg.receive_response("INVITE", ok)
    assert str(dlg.remote_target) == "sip:agent@198.51.100.10"  # target refresh
    ack = dlg.create_request("ACK")
    assert ack.cseq.seq == 6 and ack.cseq.method == "ACK"
    assert str(ack.uri) == "sip:agent@198.51.100.10"
    assert ack.top_via.has_rfc3261_branch


def test_uac_early_dialog_confirmed_by_2xx_recomputes_routes() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 183, record_route=False))
    assert dlg.state is DialogState.EARLY and dlg.route_set == ()
    dlg.receive_response("INVITE", answer(invite, 180))
    assert dlg.state is DialogState.EARLY
    dlg.receive_response("INVITE", answer(invite, 200))
    assert dlg.state is DialogState.CONFIRMED
    assert [str(r.uri) for r in dlg.route_set] == ["sip:edge2.vcc.test;lr", "sip:edge1.vcc.test;lr"]


def test_uac_early_dialog_dies_on_failure_and_481_ends_confirmed() -> None:
    invite = outgoing_invite()
    early = Dialog.from_response(invite, answer(invite, 180))
    early.receive_response("INVITE", answer(invite, 486))
    assert early.terminated
    dlg = Dialog.from_response(invite, answer(invite, 200))
    dlg.receive_response("INVITE", answer(invite, 488))  # failed re-INVITE keeps the dialog
    assert dlg.state is DialogState.CONFIRMED
    dlg.receive_response("INFO", answer(invite, 481))
    assert dlg.terminated


def test_uac_rejects_untagged_or_final_failure() -> None:
    invite = outgoing_invite()
    with pytest.raises(SipParseError):
        Dialog.from_response(invite, make_response(invite, 200))
    with pytest.raises(InvalidTransition):
        Dialog.from_response(invite, answer(invite, 404))


def test_strict_router_first_hop() -> None:
    invite = outgoing_invite()
    rr = [("Record-Route", "<sip:edge1.vcc.test;lr>, <sip:strict.vcc.test>")]
    ok = make_response(
        invite, 200, to_tag="agent7", headers=[("Contact", "<sip:agent@198.51.100.9>"), *rr]
    )
    dlg = Dialog.from_response(invite, ok)
    bye = dlg.create_request("BYE")
    # The strict router (no lr) becomes the Request-URI; the remote target is the last Route.
    assert str(bye.uri) == "sip:strict.vcc.test"
    assert bye.headers.get_all("Route") == [
        "<sip:edge1.vcc.test;lr>",
        "<sip:agent@198.51.100.9>",
    ]


def test_refer_in_dialog() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 200, record_route=False))
    refer = build_refer(dlg, "sip:queue@vcc.test", referred_by="sip:bot@kefu.test")
    assert refer.method == "REFER" and refer.cseq.seq == 6
    assert refer.headers.get("Refer-To") == "<sip:queue@vcc.test>"
    assert refer.headers.get("Referred-By") == "<sip:bot@kefu.test>"
    assert refer.headers.get("Contact") is not None


def test_cancel_is_not_an_in_dialog_request() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 180))
    with pytest.raises(InvalidTransition):
        dlg.create_request("CANCEL")


def test_tags_and_branches_are_unique() -> None:
    assert len({new_tag() for _ in range(100)}) == 100
    assert all(b.startswith("z9hG4bK") and len(b) > 7 for b in (new_branch(), new_branch()))


# --- 2xx retransmission ---------------------------------------------------------------------


def test_ok_retransmitter_doubles_to_t2_and_stops_on_ack() -> None:
    dlg, invite = uas_dialog()
    ok = dlg.make_response(invite, 200)
    rt = OkRetransmitter(ok, 0.0)
    times = []
    while (at := rt.get_timer()) is not None and at < 10.0:
        rt.handle_timer(at)
        if rt.messages_to_send() == [ok]:
            times.append(at)
    assert times == [0.5, 1.5, 3.5, 7.5]
    rt.ack_received()
    assert rt.done and rt.get_timer() is None and rt.next_event() is None


def test_ok_retransmitter_gives_up_after_64_t1() -> None:
    dlg, invite = uas_dialog()
    ok = dlg.make_response(invite, 200)
    rt = OkRetransmitter(ok, 100.0, TimerConfig())
    rt.handle_timer(1000.0)  # one late wake-up: no burst beyond the deadline matters
    assert rt.next_event() == AckTimeout(ok)
    assert rt.done
    assert rt.retransmissions == 10  # 0.5, 1.5, 3.5, 7.5, 11.5 ... 31.5


def test_request_body_roundtrip() -> None:
    invite = outgoing_invite()
    dlg = Dialog.from_response(invite, answer(invite, 200, record_route=False))
    req = dlg.create_request("UPDATE", body=b"v=0\r\n", content_type="application/sdp")
    again = parse_message(bytes(req))
    assert isinstance(again, Request) and again.body == b"v=0\r\n"
    assert again.headers.get("Content-Length") == "5"
