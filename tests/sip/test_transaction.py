"""RFC 3261 §17 transactions, driven by hand-advanced time (never sleeps)."""

from __future__ import annotations

import pytest

from kefu.errors import InvalidTransition
from kefu.sip.message import Request, Response, make_response, parse_message
from kefu.sip.transaction import (
    ClientInviteTransaction,
    ClientNonInviteTransaction,
    RequestReceived,
    ResponseReceived,
    ServerInviteTransaction,
    ServerNonInviteTransaction,
    State,
    Terminated,
    Timeout,
    TimerConfig,
    Transaction,
    TransactionEvent,
    TransactionLayer,
    TransportError,
    make_ack,
    make_cancel,
)

CFG = TimerConfig()


def request(
    method: str = "INVITE",
    *,
    branch: str | None = "z9hG4bK-b1",
    cseq: int = 1,
    cseq_method: str | None = None,
    to_tag: str | None = None,
    via_host: str = "192.0.2.1:5060",
    call_id: str = "call-1@vcc.test",
    route: bool = False,
) -> Request:
    branch_param = f";branch={branch}" if branch is not None else ""
    to = "<sip:bot@kefu.test>" + (f";tag={to_tag}" if to_tag else "")
    lines = [
        f"{method} sip:bot@kefu.test SIP/2.0",
        f"Via: SIP/2.0/UDP {via_host}{branch_param}",
        "Max-Forwards: 70",
        "From: <sip:caller@vcc.test>;tag=ftag",
        f"To: {to}",
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} {cseq_method or method}",
    ]
    if route:
        lines.append("Route: <sip:p1.vcc.test;lr>, <sip:p2.vcc.test;lr>")
    msg = parse_message(("\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode())
    assert isinstance(msg, Request)
    return msg


def response(req: Request, status: int, to_tag: str | None = "ttag") -> Response:
    return make_response(req, status, to_tag=to_tag if status > 100 else None)


def events(tx: Transaction | TransactionLayer) -> list[TransactionEvent]:
    out = []
    while (ev := tx.next_event()) is not None:
        out.append(ev)
    return out


def sent(tx: Transaction) -> list[str]:
    """Summaries of what the transaction queued: methods or status codes."""
    return [m.method if isinstance(m, Request) else str(m.status) for m in tx.messages_to_send()]


def run_until(tx: Transaction, end: float) -> list[tuple[float, list[str]]]:
    """Fire every timer up to ``end``; return (time, messages sent) per firing."""
    log = []
    while (at := tx.get_timer()) is not None and at <= end:
        tx.handle_timer(at)
        log.append((at, sent(tx)))
    return log


# --- client INVITE --------------------------------------------------------------------------


def test_timer_a_doubles_until_timer_b() -> None:
    tx = ClientInviteTransaction(request(), 0.0)
    tx.start(0.0)
    assert sent(tx) == ["INVITE"]
    log = run_until(tx, 100.0)
    retransmits = [at for at, msgs in log if msgs == ["INVITE"]]
    # Timer A: T1, 2T1, 4T1, ... without the T2 cap; seven transmissions in total (§17.1.1.2).
    assert retransmits == [0.5, 1.5, 3.5, 7.5, 15.5, 31.5]
    assert log[-1] == (32.0, [])  # Timer B = 64*T1
    evs = events(tx)
    assert [type(e) for e in evs] == [Timeout, Terminated]
    assert isinstance(evs[0], Timeout) and evs[0].timer == "B"
    assert tx.state is State.TERMINATED and tx.get_timer() is None


def test_client_invite_non_2xx_acks_and_waits_timer_d() -> None:
    inv = request(route=True)
    tx = ClientInviteTransaction(inv, 0.0)
    tx.start(0.0)
    sent(tx)
    tx.receive(response(inv, 180), 0.2)
    assert tx.state is State.PROCEEDING
    assert tx.get_timer() is None  # neither A nor B runs in Proceeding
    busy = response(inv, 486)
    tx.receive(busy, 1.0)
    assert tx.state is State.COMPLETED
    ack = tx.messages_to_send()
    assert len(ack) == 1 and isinstance(ack[0], Request)
    assert ack[0] == make_ack(inv, busy)
    assert [type(e) for e in events(tx)] == [ResponseReceived, ResponseReceived]
    # A retransmitted 486 is re-ACKed without bothering the TU.
    tx.receive(busy, 2.0)
    assert sent(tx) == ["ACK"] and events(tx) == []
    assert tx.get_timer() == 1.0 + 32.0  # Timer D
    tx.handle_timer(33.0)
    assert [type(e) for e in events(tx)] == [Terminated]


def test_ack_for_non_2xx_golden() -> None:
    inv = request(route=True)
    ack = make_ack(inv, response(inv, 486))
    assert bytes(ack) == (
        b"ACK sip:bot@kefu.test SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-b1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:caller@vcc.test>;tag=ftag\r\n"
        b"To: <sip:bot@kefu.test>;tag=ttag\r\n"
        b"Call-ID: call-1@vcc.test\r\n"
        b"CSeq: 1 ACK\r\n"
        b"Route: <sip:p1.vcc.test;lr>, <sip:p2.vcc.test;lr>\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def test_cancel_golden() -> None:
    cancel = make_cancel(request())
    assert bytes(cancel) == (
        b"CANCEL sip:bot@kefu.test SIP/2.0\r\n"
        b"Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK-b1\r\n"
        b"Max-Forwards: 70\r\n"
        b"From: <sip:caller@vcc.test>;tag=ftag\r\n"
        b"To: <sip:bot@kefu.test>\r\n"
        b"Call-ID: call-1@vcc.test\r\n"
        b"CSeq: 1 CANCEL\r\n"
        b"Content-Length: 0\r\n\r\n"
    )


def test_client_invite_2xx_accepted_state_passes_retransmissions() -> None:
    inv = request()
    tx = ClientInviteTransaction(inv, 0.0)
    tx.start(0.0)
    sent(tx)
    ok = response(inv, 200)
    tx.receive(ok, 0.3)
    assert tx.state is State.ACCEPTED
    assert sent(tx) == []  # the ACK for a 2xx is the dialog's job (§13.2.2.4)
    tx.receive(ok, 0.8)
    tx.receive(response(inv, 486), 0.9)  # nonsense after a 2xx: ignored
    evs = events(tx)
    assert [type(e) for e in evs] == [ResponseReceived, ResponseReceived]
    assert tx.get_timer() == 0.3 + 32.0  # RFC 6026 Timer M
    tx.handle_timer(32.3)
    assert tx.terminated


def test_client_invite_reliable_has_no_timer_a_and_zero_timer_d() -> None:
    inv = request()
    tx = ClientInviteTransaction(inv, 0.0, reliable=True)
    tx.start(0.0)
    assert tx.get_timer() == 32.0  # only Timer B
    tx.receive(response(inv, 603), 1.0)
    assert sent(tx) == ["INVITE", "ACK"]
    assert tx.terminated
    assert [type(e) for e in events(tx)] == [ResponseReceived, Terminated]


def test_client_start_twice_is_illegal() -> None:
    tx = ClientInviteTransaction(request(), 0.0)
    tx.start(0.0)
    with pytest.raises(InvalidTransition):
        tx.start(0.1)


# --- client non-INVITE ----------------------------------------------------------------------


def test_timer_e_doubles_to_t2_then_timer_f() -> None:
    tx = ClientNonInviteTransaction(request("OPTIONS"), 0.0)
    tx.start(0.0)
    sent(tx)
    log = run_until(tx, 100.0)
    retransmits = [at for at, msgs in log if msgs == ["OPTIONS"]]
    assert retransmits[:5] == [0.5, 1.5, 3.5, 7.5, 11.5]
    gaps = {round(b - a, 6) for a, b in zip(retransmits[3:], retransmits[4:], strict=False)}
    assert gaps == {4.0}
    assert log[-1] == (32.0, [])
    evs = events(tx)
    assert isinstance(evs[0], Timeout) and evs[0].timer == "F"
    assert tx.terminated


def test_timer_e_is_t2_in_proceeding() -> None:
    req = request("BYE")
    tx = ClientNonInviteTransaction(req, 0.0)
    tx.start(0.0)
    tx.handle_timer(0.5)  # E: next at 0.5 + 1.0
    tx.receive(response(req, 100), 0.6)
    assert tx.state is State.PROCEEDING
    tx.handle_timer(1.5)
    assert tx.get_timer() == 1.5 + 4.0  # T2 from now on


def test_non_invite_final_then_timer_k() -> None:
    req = request("BYE")
    tx = ClientNonInviteTransaction(req, 0.0)
    tx.start(0.0)
    tx.receive(response(req, 200), 0.1)
    assert tx.state is State.COMPLETED
    tx.receive(response(req, 200), 0.2)  # absorbed
    assert [type(e) for e in events(tx)] == [ResponseReceived]
    assert tx.get_timer() == 0.1 + 5.0  # Timer K = T4
    tx.handle_timer(5.1)
    assert tx.terminated


def test_non_invite_reliable_k_is_zero() -> None:
    req = request("INFO")
    tx = ClientNonInviteTransaction(req, 0.0, reliable=True)
    tx.start(0.0)
    assert tx.get_timer() == 32.0  # no Timer E on TCP
    tx.receive(response(req, 200), 0.1)
    assert tx.terminated


# --- server INVITE --------------------------------------------------------------------------


def test_server_invite_sends_100_trying_after_200ms() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 10.0)
    assert tx.get_timer() == pytest.approx(10.2)
    tx.handle_timer(10.19)
    assert sent(tx) == []
    tx.handle_timer(10.2)
    assert sent(tx) == ["100"]
    tx.receive(inv, 10.5)  # retransmission: repeat the last provisional
    assert sent(tx) == ["100"]


def test_server_invite_no_100_if_tu_answers_quickly() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0)
    tx.send_response(response(inv, 180), 0.05)
    assert sent(tx) == ["180"]
    assert tx.get_timer() is None
    tx.receive(inv, 0.5)
    assert sent(tx) == ["180"]


def test_timer_g_until_ack_then_timer_i() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0)
    tx.send_response(response(inv, 486), 0.0)
    assert sent(tx) == ["486"]
    log = run_until(tx, 4.0)
    assert [at for at, msgs in log if msgs == ["486"]] == [0.5, 1.5, 3.5]
    tx.receive(inv, 4.1)  # retransmitted INVITE: repeat the final response
    assert sent(tx) == ["486"]
    ack = request("ACK", cseq_method="ACK", to_tag="ttag")
    tx.receive(ack, 4.2)
    assert tx.state is State.CONFIRMED
    assert tx.get_timer() == pytest.approx(4.2 + 5.0)  # Timer I = T4
    tx.receive(ack, 4.3)  # absorbed
    tx.handle_timer(9.2)
    assert tx.terminated and sent(tx) == []
    assert [type(e) for e in events(tx)] == [Terminated]


def test_timer_h_without_ack() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0)
    tx.send_response(response(inv, 503), 0.0)
    sent(tx)
    log = run_until(tx, 100.0)
    g = [at for at, msgs in log if msgs == ["503"]]
    assert g[:4] == [0.5, 1.5, 3.5, 7.5] and g[4] - g[3] == 4.0  # capped at T2
    assert log[-1] == (32.0, [])
    evs = events(tx)
    assert isinstance(evs[0], Timeout) and evs[0].timer == "H"
    assert isinstance(evs[1], Terminated)


def test_server_invite_reliable_no_g_and_zero_i() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0, reliable=True)
    tx.send_response(response(inv, 486), 0.0)
    assert tx.get_timer() == 32.0  # H only
    tx.receive(request("ACK", cseq_method="ACK", to_tag="ttag"), 0.1)
    assert tx.terminated


def test_server_invite_2xx_accepted_then_timer_l() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0)
    ok = response(inv, 200)
    tx.send_response(ok, 0.1)
    assert tx.state is State.ACCEPTED and sent(tx) == ["200"]
    tx.receive(inv, 0.6)
    assert sent(tx) == []  # absorbed: the TU retransmits 2xx itself
    tx.send_response(ok, 0.6)
    assert sent(tx) == ["200"]
    assert tx.get_timer() == pytest.approx(32.1)
    tx.handle_timer(32.1)
    assert tx.terminated


def test_server_invite_illegal_tu_actions() -> None:
    inv = request()
    tx = ServerInviteTransaction(inv, 0.0)
    tx.send_response(response(inv, 486), 0.0)
    with pytest.raises(InvalidTransition):
        tx.send_response(response(inv, 200), 0.1)


# --- server non-INVITE ----------------------------------------------------------------------


def test_server_non_invite_states_and_timer_j() -> None:
    req = request("OPTIONS")
    tx = ServerNonInviteTransaction(req, 0.0)
    tx.receive(req, 0.5)
    assert sent(tx) == []  # Trying discards retransmissions
    tx.send_response(response(req, 100), 0.6)
    assert tx.state is State.PROCEEDING
    tx.receive(req, 0.7)
    assert sent(tx) == ["100", "100"]
    tx.send_response(response(req, 200), 1.0)
    tx.receive(req, 1.5)
    assert sent(tx) == ["200", "200"]
    assert tx.get_timer() == 33.0  # Timer J = 64*T1
    with pytest.raises(InvalidTransition):
        tx.send_response(response(req, 500), 2.0)
    tx.handle_timer(33.0)
    assert tx.terminated


def test_server_non_invite_reliable_j_is_zero() -> None:
    req = request("BYE")
    tx = ServerNonInviteTransaction(req, 0.0, reliable=True)
    tx.send_response(response(req, 200), 0.0)
    assert tx.terminated


def test_transport_error() -> None:
    tx = ClientNonInviteTransaction(request("BYE"), 0.0, reliable=True)
    tx.start(0.0)
    tx.transport_error(0.0)
    assert [type(e) for e in events(tx)] == [TransportError, Terminated]
    tx.transport_error(0.1)  # idempotent once terminated
    assert events(tx) == []


def test_custom_timer_config() -> None:
    cfg = TimerConfig(t1=0.1, t2=0.4, t4=1.0)
    tx = ClientNonInviteTransaction(request("BYE"), 0.0, config=cfg)
    tx.start(0.0)
    assert tx.get_timer() == pytest.approx(0.1)
    assert max(at for at, _ in run_until(tx, 100.0)) == pytest.approx(6.4)


# --- the layer ------------------------------------------------------------------------------


def drain(layer: TransactionLayer) -> tuple[list[str], list[TransactionEvent]]:
    msgs = [
        o.message.method if isinstance(o.message, Request) else str(o.message.status)
        for o in layer.messages_to_send()
    ]
    return msgs, events(layer)


def run_layer(layer: TransactionLayer, end: float) -> None:
    while (at := layer.get_timer()) is not None and at <= end:
        layer.handle_timer(at)


def test_layer_server_invite_absorbs_retransmissions_and_ack() -> None:
    layer = TransactionLayer()
    inv = request()
    layer.receive(inv, 0.0, peer="vcc")
    msgs, evs = drain(layer)
    assert msgs == []
    assert len(evs) == 1 and isinstance(evs[0], RequestReceived)
    stx = evs[0].transaction
    assert isinstance(stx, ServerInviteTransaction) and stx.peer == "vcc"
    assert layer.get_timer() == pytest.approx(0.2)
    layer.receive(inv, 0.1)
    # Absorbed; the peer is retransmitting, so 100 Trying goes out at once, and only once.
    assert drain(layer) == (["100"], [])
    assert layer.get_timer() is None
    stx.send_response(response(inv, 486), 0.3)
    assert drain(layer)[0] == ["486"]
    layer.receive(inv, 0.4)
    assert drain(layer)[0] == ["486"]
    layer.receive(request("ACK", cseq_method="ACK", to_tag="ttag"), 0.5)
    assert drain(layer) == ([], [])
    assert layer.retransmissions_absorbed == 2
    run_layer(layer, 100.0)
    assert [type(e) for e in drain(layer)[1]] == [Terminated]
    assert len(layer) == 0 and layer.get_timer() is None


def test_layer_ack_for_2xx_goes_to_tu() -> None:
    layer = TransactionLayer()
    inv = request()
    layer.receive(inv, 0.0)
    stx = drain(layer)[1][0].transaction  # type: ignore[union-attr]
    assert isinstance(stx, ServerInviteTransaction)
    stx.send_response(response(inv, 200), 0.1)
    drain(layer)
    ack = request("ACK", branch="z9hG4bK-ack2", cseq_method="ACK", to_tag="ttag")
    layer.receive(ack, 0.2)
    evs = drain(layer)[1]
    assert len(evs) == 1 and isinstance(evs[0], RequestReceived)
    assert evs[0].transaction is None and evs[0].request is ack


def test_layer_cancel_matching() -> None:
    layer = TransactionLayer()
    inv = request()
    layer.receive(inv, 0.0)
    stx = drain(layer)[1][0].transaction  # type: ignore[union-attr]
    cancel = make_cancel(inv)
    layer.receive(cancel, 0.1)
    evs = drain(layer)[1]
    assert isinstance(evs[0], RequestReceived)
    assert evs[0].cancels is stx
    assert isinstance(evs[0].transaction, ServerNonInviteTransaction)
    # A CANCEL for an unknown INVITE (other branch) matches nothing: the TU answers 481.
    other = make_cancel(request(branch="z9hG4bK-other"))
    layer.receive(other, 0.2)
    ev = drain(layer)[1][0]
    assert isinstance(ev, RequestReceived) and ev.cancels is None
    # Same branch from another sent-by is another transaction (§17.2.3).
    layer.receive(make_cancel(request(via_host="198.51.100.7")), 0.3)
    ev = drain(layer)[1][0]
    assert isinstance(ev, RequestReceived) and ev.cancels is None


def test_layer_client_matching_and_stray_responses() -> None:
    layer = TransactionLayer()
    inv = request()
    ctx = layer.send_request(inv, 0.0, peer="vcc")
    assert isinstance(ctx, ClientInviteTransaction)
    out = layer.messages_to_send()
    assert [o.message for o in out] == [inv] and out[0].peer == "vcc"
    bye = request("BYE", branch="z9hG4bK-bye", cseq=2)
    layer.send_request(bye, 0.0)
    drain(layer)
    # Same branch, different CSeq method: not the INVITE's (§17.1.3).
    layer.receive(response(request("INVITE", cseq_method="OPTIONS"), 200), 0.1)
    layer.receive(response(request(branch="z9hG4bK-none"), 200), 0.1)
    assert layer.stray_responses == 2
    layer.receive(response(inv, 180), 0.2)
    layer.receive(response(bye, 200), 0.2)
    evs = drain(layer)[1]
    assert [(type(e), getattr(e, "transaction", None)) for e in evs] == [
        (ResponseReceived, ctx),
        (ResponseReceived, layer_tx_for(evs[1])),
    ]
    with pytest.raises(InvalidTransition):
        layer.send_request(inv, 0.3)  # duplicate branch
    with pytest.raises(InvalidTransition):
        layer.send_request(request("ACK", cseq_method="ACK"), 0.3)


def layer_tx_for(ev: TransactionEvent) -> object:
    return getattr(ev, "transaction", None)


def test_layer_timer_is_earliest_and_table_empties() -> None:
    layer = TransactionLayer()
    a = layer.send_request(request("OPTIONS", branch="z9hG4bK-a"), 0.0)
    b = layer.send_request(request("OPTIONS", branch="z9hG4bK-b"), 0.2)
    assert layer.get_timer() == 0.5
    layer.handle_timer(0.5)
    assert layer.get_timer() == pytest.approx(0.7)  # b's first Timer E
    layer.receive(response(a.request, 200), 0.6)
    layer.receive(response(b.request, 200), 0.6)
    assert len(layer) == 2
    run_layer(layer, 10.0)
    assert len(layer) == 0 and layer.get_timer() is None
    assert not layer._heap and not layer._scheduled


def test_layer_many_transactions_no_leak() -> None:
    layer = TransactionLayer()
    for i in range(200):
        req = request("OPTIONS", branch=f"z9hG4bK-{i}", call_id=f"c{i}")
        layer.receive(req, i * 0.01)
        layer.receive(req, i * 0.01 + 0.001)
    for ev in drain(layer)[1]:
        assert isinstance(ev, RequestReceived) and ev.transaction is not None
        ev.transaction.send_response(response(ev.request, 200), 3.0)
    assert layer.retransmissions_absorbed == 200
    assert len(drain(layer)[0]) == 200
    run_layer(layer, 100.0)
    assert len(layer) == 0


def test_layer_rfc2543_fallback_matching() -> None:
    layer = TransactionLayer()
    for branch in (None, "z9hG4bK"):  # no branch; RFC 4475 badbranch (bare cookie)
        inv = request(branch=branch, call_id=f"old-{branch}")
        layer.receive(inv, 0.0)
        stx = drain(layer)[1][0].transaction  # type: ignore[union-attr]
        assert isinstance(stx, ServerInviteTransaction)
        layer.receive(inv, 0.1)
        assert drain(layer)[1] == []  # matched by Request-URI, tags, Call-ID, CSeq, Via
        stx.send_response(response(inv, 486, to_tag="t2543"), 0.2)
        drain(layer)
        cancel = make_cancel(inv)
        layer.receive(cancel, 0.25)
        ev = drain(layer)[1][0]
        assert isinstance(ev, RequestReceived) and ev.cancels is stx
        assert ev.transaction is not None
        ev.transaction.send_response(response(cancel, 200), 0.25)
        wrong = request(
            "ACK", branch=branch, cseq_method="ACK", to_tag="other", call_id=inv.call_id
        )
        layer.receive(wrong, 0.3)
        ev = drain(layer)[1][0]
        assert isinstance(ev, RequestReceived) and ev.transaction is None
        ack = request("ACK", branch=branch, cseq_method="ACK", to_tag="t2543", call_id=inv.call_id)
        layer.receive(ack, 0.3)
        assert drain(layer)[1] == [] and stx.state is State.CONFIRMED
    run_layer(layer, 100.0)
    assert len(layer) == 0


def test_layer_transport_error_by_peer() -> None:
    layer = TransactionLayer()
    layer.send_request(request("OPTIONS", branch="z9hG4bK-x"), 0.0, reliable=True, peer="p1")
    layer.send_request(request("OPTIONS", branch="z9hG4bK-y"), 0.0, reliable=True, peer="p2")
    drain(layer)
    layer.transport_error("p1", 0.1)
    assert [type(e) for e in drain(layer)[1]] == [TransportError, Terminated]
    assert len(layer) == 1


# RFC 4475 §3.3.12 "badbranch": a bare magic cookie, so RFC 2543 matching applies.
BADBRANCH = (
    b"OPTIONS sip:user@example.com SIP/2.0\r\n"
    b"To: sip:user@example.com\r\n"
    b"From: sip:caller@example.org;tag=33242\r\n"
    b"Max-Forwards: 3\r\n"
    b"Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK\r\n"
    b"Accept: application/sdp\r\n"
    b"Call-ID: badbranch.sadonfo23i420jv0as0derf3j3n\r\n"
    b"CSeq: 8 OPTIONS\r\n"
    b"l: 0\r\n\r\n"
)


def test_layer_rfc4475_badbranch() -> None:
    msg = parse_message(BADBRANCH)
    assert isinstance(msg, Request)
    layer = TransactionLayer()
    layer.receive(msg, 0.0)
    evs = drain(layer)[1]
    assert len(evs) == 1 and isinstance(evs[0], RequestReceived)
    stx = evs[0].transaction
    assert stx is not None
    stx.send_response(make_response(msg, 200, to_tag="x"), 0.1)
    layer.receive(parse_message(BADBRANCH), 0.5)  # retransmission: same 200 again
    assert drain(layer) == (["200", "200"], [])
    # A different CSeq is a different transaction under RFC 2543 rules.
    layer.receive(parse_message(BADBRANCH.replace(b"CSeq: 8", b"CSeq: 9")), 0.6)
    assert len(drain(layer)[1]) == 1
    assert layer.retransmissions_absorbed == 1
