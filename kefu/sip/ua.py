"""kefu's SIP user agent core (RFC 3261 §8, §12-§15), sans-IO.

It sits between the transport (``aio.py``) and the media server. Bytes come in with
:meth:`UserAgent.receive`; datagrams to send come out of :meth:`datagrams_to_send`; what the
application must act on comes out of :meth:`next_event`; the application answers through
``answer``/``reject``/``hangup``/``refer``/... All times are the ``now`` passed in.

Policy lives here, in this order, for each datagram:

1. source not in the trunk allowlist: 403, the same for every user (no extension probing);
2. unparseable: 400/505/513 when a response can be addressed, else dropped (§18.3);
3. ``check_request`` (400 naming the header, 416, 420, 415, 483), unknown method 501;
4. digest authentication when credentials are configured (401, stale nonce re-challenge);
5. the transaction layer absorbs retransmissions; the method handlers run once.

Responses go to the packet's source (§18.2.2 with ``received``/``rport``, RFC 3581): kefu
never resolves a host name from Via or Contact. In-dialog requests we send (BYE, REFER) go to
the address the dialog's INVITE came from, which is what a call-center trunk expects.

Leg state table (invariants): ``incoming`` → ``answered`` (2xx sent) → ``confirmed`` (ACK)
→ ``ended``; ``incoming`` → ``ended`` on reject or CANCEL. A leg leaves the table only when it
is ended and its BYE transaction, if any, is done.

Delayed offer (RFC 3261 §13.2.1): an INVITE or re-INVITE without SDP is answered with
``answer_with_offer``/``answer_reinvite_with_offer``; the 2xx (and each retransmission of it,
byte for byte) carries kefu's offer, and the ACK with the INVITE's CSeq number must carry the
answer. A usable answer confirms the leg with the negotiated media in ``CallConfirmed``;
anything else (no body, bad SDP, no common codec, audio port 0) ends it: BYE with a ``Reason``
header (RFC 3326), then ``CallEnded`` (:mod:`kefu.sip.delayed_offer`).
"""

from __future__ import annotations

import ipaddress
import secrets
from collections import deque
from collections.abc import Iterable

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.auth import DigestServer
from kefu.sip.delayed_offer import AnswerRejected, PendingOffer, read_ack_answer
from kefu.sip.dialog import Dialog, DialogId, OkRetransmitter, new_tag
from kefu.sip.message import (
    InvalidHeaderValue,
    Request,
    Response,
    make_response,
    parse_message,
)
from kefu.sip.refer import ReferSubscription, build_refer
from kefu.sip.sdp import SessionDescription
from kefu.sip.session_timer import RefreshDue, SessionExpired, SessionTimer, negotiate_uas
from kefu.sip.transaction import (
    ClientTransaction,
    RequestReceived,
    ResponseReceived,
    ServerInviteTransaction,
    ServerTransaction,
    Timeout,
    TransactionLayer,
    TransportError,
)
from kefu.sip.ua_events import Peer, UaEvent
from kefu.sip.ua_leg import (
    ACCEPT,
    ALLOW,
    KNOWN_METHODS,
    SUPPORTED,
    Leg,
    UaSettings,
    advance,
    dtmf_from_info,
    replace_top_via,
)
from kefu.sip.uri import in_networks
from kefu.sip.validate import check_request, check_response, response_for_parse_error

__all__ = ["Peer", "UaEvent", "UaSettings", "UserAgent"]


class UserAgent:
    def __init__(self, settings: UaSettings | None = None) -> None:
        self.settings = settings or UaSettings()
        self.transactions = TransactionLayer(self.settings.timers)
        self.draining = False
        self._networks = [ipaddress.ip_network(n, strict=False) for n in self.settings.allow_from]
        self._auth = (
            DigestServer(
                self.settings.auth_realm,
                dict(self.settings.auth_users),
                self.settings.auth_secret or secrets.token_bytes(32),
            )
            if self.settings.auth_users
            else None
        )
        self._legs: dict[str, Leg] = {}
        self._by_dialog: dict[DialogId, Leg] = {}
        self._by_tx: dict[ServerTransaction, Leg] = {}
        self._out: list[tuple[bytes, Peer]] = []
        self._events: deque[UaEvent] = deque()
        self._host = "127.0.0.1"
        self._port = 5060
        self._now = 0.0
        """The latest ``now`` fed in, for events the transaction layer reports without one."""

    # --- plumbing ------------------------------------------------------------------------

    def set_local_address(self, host: str, port: int) -> None:
        self._host, self._port = host, port

    @property
    def sent_by(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    def contact(self, peer: Peer) -> str:
        transport = ";transport=tcp" if peer.transport == "tcp" else ""
        return f"<sip:kefu@{self.sent_by}{transport}>"

    def datagrams_to_send(self) -> list[tuple[bytes, Peer]]:
        for out in self.transactions.messages_to_send():
            assert isinstance(out.peer, Peer)
            self._emit(out.message, out.peer)
        sent, self._out = self._out, []
        return sent

    def next_event(self) -> UaEvent | None:
        self._drain_transaction_events()
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        times = [self.transactions.get_timer()]
        for leg in self._legs.values():
            if leg.ok is not None:
                times.append(leg.ok.get_timer())
            if leg.session is not None:
                times.append(leg.session.get_timer())
        due = [t for t in times if t is not None]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        self._now = now
        self.transactions.handle_timer(now)
        for leg in list(self._legs.values()):
            if leg.ok is not None:
                leg.ok.handle_timer(now)
                for resp in leg.ok.messages_to_send():
                    self._emit(resp, leg.peer)
                if leg.ok.next_event() is not None:
                    leg.ok = None
                    self._end(leg, "no ACK for our 2xx", now, send_bye=True)
                elif leg.ok.done:
                    leg.ok = None
            if leg.session is not None:
                leg.session.handle_timer(now)
                while (t := leg.session.next_event()) is not None:
                    if isinstance(t, RefreshDue) and leg.dialog is not None:
                        interval = leg.session.interval
                        refresh = leg.dialog.create_request(
                            "UPDATE",
                            headers=(
                                ("Session-Expires", f"{interval};refresher=uas"),
                                ("Supported", "timer"),
                            ),
                        )
                        self._send_in_dialog(leg, refresh, now)
                    elif isinstance(t, SessionExpired):
                        leg.session = None
                        self._end(leg, "session expired", now, send_bye=True)
                        break
        self._drain_transaction_events()

    def transport_error(self, peer: Peer, now: float) -> None:
        self.transactions.transport_error(peer, now)
        for leg in list(self._legs.values()):
            if leg.peer == peer and leg.state != "ended":
                self._end(leg, "transport error", now, send_bye=False)

    def reject_unframeable(self, error: SipParseError, peer: Peer, now: float) -> None:
        self._events.append(ev.Dropped("unframeable"))

    def _emit(self, msg: Request | Response, peer: Peer) -> None:
        if isinstance(msg, Response):
            self._events.append(ev.ResponseSent(msg.status))
        self._out.append((bytes(msg), peer))

    def _allowed(self, host: str) -> bool:
        return in_networks(host, self._networks)

    # --- input ---------------------------------------------------------------------------

    def receive(self, data: bytes, peer: Peer, now: float) -> None:
        """Take one datagram or framed message; never raises for anything a peer sends.

        The responses it causes echo only header values the parser and ``check_request``
        accepted (no bare CR, Require option tags are tokens), so they always serialize and
        parse back (tests/fuzz/test_fuzz.py holds it to this).
        """
        self._now = now
        if not data.strip(b"\r\n"):
            return  # RFC 5626 keep-alive
        try:
            msg = parse_message(data, max_size=self.settings.max_message_bytes)
        except SipParseError as exc:
            self._parse_failed(data, exc, peer)
            return
        if isinstance(msg, Response):
            if not self._allowed(peer.host) or check_response(msg) is not None:
                self._events.append(ev.Dropped("bad_response"))
                return
            self._feed(msg, peer, now)
            return
        self._events.append(ev.RequestSeen(msg.method))
        if not self._allowed(peer.host):
            if msg.method != "ACK":
                self._stateless(msg, peer, 403, "Forbidden")
            return
        rejection = check_request(msg)
        if rejection is not None:
            if msg.method != "ACK":
                self._stateless(msg, peer, rejection.status, rejection.reason, rejection.headers)
            return
        try:
            top = msg.top_via
            stamped = top.with_received(peer.host, peer.port)
            if stamped is not top:
                msg = msg.replace(headers=replace_top_via(msg, str(stamped)))
        except SipParseError:
            self._stateless(msg, peer, 400, "Bad Via header")
            return
        if msg.method not in KNOWN_METHODS:
            self._stateless(msg, peer, 501, None, (("Allow", ALLOW),))
            return
        self._feed(msg, peer, now)

    def _feed(self, msg: Request | Response, peer: Peer, now: float) -> None:
        try:
            self.transactions.receive(msg, now, reliable=peer.transport == "tcp", peer=peer)
        except SipParseError as exc:
            if isinstance(msg, Request) and msg.method != "ACK":
                self._stateless(msg, peer, 400, f"Bad {exc.header or 'Request'} header")
            return
        self._drain_transaction_events()

    def _parse_failed(self, data: bytes, exc: SipParseError, peer: Peer) -> None:
        if not self._allowed(peer.host):
            self._events.append(ev.Dropped("forbidden_unparseable"))
            return
        response = response_for_parse_error(data, exc, to_tag=new_tag())
        if response is None:
            self._events.append(ev.Dropped("unparseable"))
            return
        self._emit(response, peer)

    def _stateless(
        self,
        req: Request,
        peer: Peer,
        status: int,
        reason: str | None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        try:
            resp = make_response(req, status, reason, to_tag=new_tag(), headers=headers)
        except (SipParseError, InvalidHeaderValue):
            self._events.append(ev.Dropped("unanswerable"))
            return
        self._emit(self._stamp(resp), peer)

    def _stamp(self, resp: Response) -> Response:
        return resp.replace(headers=resp.headers.add("Server", self.settings.user_agent))

    def _drain_transaction_events(self) -> None:
        while (event := self.transactions.next_event()) is not None:
            match event:
                case RequestReceived():
                    self._on_request(event)
                case ResponseReceived():
                    self._on_response(event.transaction, event.response)
                case Timeout() | TransportError():
                    tx = event.transaction
                    if isinstance(tx, ClientTransaction):
                        self._on_response(tx, make_response(tx.request, 408))
                case _:
                    tx = event.transaction
                    if isinstance(tx, ServerTransaction):
                        self._by_tx.pop(tx, None)
                    self._collect_legs()

    # --- requests ------------------------------------------------------------------------

    def _respond(
        self,
        tx: ServerTransaction,
        status: int,
        reason: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        *,
        now: float,
        leg: Leg | None = None,
        body: bytes = b"",
    ) -> None:
        extra = list(headers)
        if body:
            extra.append(("Content-Type", "application/sdp"))
        if leg is not None and leg.dialog is not None:
            resp = leg.dialog.make_response(tx.request, status, reason, headers=extra, body=body)
        else:
            resp = make_response(tx.request, status, reason, to_tag=new_tag(), headers=extra)
        tx.send_response(self._stamp(resp), now)

    def _on_request(self, event: RequestReceived) -> None:
        req, tx = event.request, event.transaction
        now = self._now
        if tx is None:
            self._on_ack(req, now)
            return
        peer = tx.peer
        assert isinstance(peer, Peer)
        if req.method == "CANCEL":
            self._on_cancel(tx, event.cancels, now)
            return
        if req.method == "INVITE" and req.to.tag is None:
            self._on_invite(req, tx, peer, now)
            return
        if req.method == "OPTIONS" and req.to.tag is None and self.draining:
            # A draining node tells a proxy's health probe (Kamailio's dispatcher) to stop
            # sending it new calls; the calls it has go on.
            self._respond(tx, 503, headers=(("Retry-After", "30"),), now=now)
            return
        if req.method == "OPTIONS" and req.to.tag is None:
            self._respond(
                tx,
                200,
                headers=(("Allow", ALLOW), ("Accept", ACCEPT), ("Supported", SUPPORTED)),
                now=now,
            )
            return
        if req.to.tag is None:
            status = 405 if req.method in ("REGISTER", "SUBSCRIBE", "PUBLISH", "MESSAGE") else 481
            self._respond(tx, status, headers=(("Allow", ALLOW),), now=now)
            return
        leg = self._by_dialog.get(DialogId.for_incoming(req))
        if leg is None or leg.dialog is None:
            self._respond(tx, 481, now=now)
            return
        problem = leg.dialog.receive_request(req)
        if problem is not None:
            self._respond(tx, problem, now=now, leg=leg)
            return
        handler = {
            "BYE": self._on_bye,
            "INVITE": self._on_reinvite,
            "UPDATE": self._on_update,
            "INFO": self._on_info,
            "NOTIFY": self._on_notify,
            "OPTIONS": self._on_in_dialog_options,
        }.get(req.method)
        if handler is None:
            self._respond(
                tx,
                405 if req.method != "REFER" else 403,
                now=now,
                leg=leg,
                headers=(("Allow", ALLOW),),
            )
            return
        handler(leg, req, tx, now)

    def _on_invite(self, req: Request, tx: ServerTransaction, peer: Peer, now: float) -> None:
        assert isinstance(tx, ServerInviteTransaction)
        if self._auth is not None and not self._authenticated(req, tx, now):
            return
        if req.headers.get("Contact") is None:
            self._respond(tx, 400, "Missing Contact header", now=now)
            return
        try:
            session = negotiate_uas(
                req.headers.get("Session-Expires"),
                req.headers.get("Min-SE"),
                req.headers.get_all("Supported"),
                our_min_se=self.settings.min_se,
                preferred_interval=self.settings.session_expires or None,
            )
        except (SipParseError, ValueError):
            self._respond(tx, 400, "Bad Session-Expires header", now=now)
            return
        if session.status != 200:
            self._respond(tx, session.status, headers=session.headers, now=now)
            return
        leg_id = new_tag()
        try:
            dialog = Dialog.from_invite(
                req,
                leg_id,
                self.contact(peer),
                via_sent_by=f"{self.sent_by};rport",
                via_transport=peer.transport.upper(),
            )
        except SipParseError as exc:
            self._respond(tx, 400, f"Bad {exc.header or 'Request'} header", now=now)
            return
        leg = Leg(leg_id, req, peer, tx, dialog=dialog)
        if session.session_expires is not None:
            # The timer starts when we answer; until then the INVITE transaction guards us.
            leg.session_headers = session.headers
            leg.session_interval = session.session_expires.delta
            leg.session_we_refresh = session.we_refresh
        self._legs[leg_id] = leg
        self._by_tx[tx] = leg
        self._by_dialog[dialog.id] = leg
        self._events.append(
            ev.IncomingCall(leg_id, req, req.body or None, str(peer), req.call_id, now)
        )

    def _authenticated(self, req: Request, tx: ServerTransaction, now: float) -> bool:
        assert self._auth is not None
        header = req.headers.get("Authorization")
        stale = False
        if header is not None:
            result = self._auth.verify(req.method, header, now, body=req.body, request_uri=req.uri)
            if result.ok:
                return True
            stale = result.stale
        challenge = self._auth.challenge(now, self.settings.auth_algorithm, stale=stale)
        self._respond(tx, 401, headers=(("WWW-Authenticate", challenge),), now=now)
        return False

    def _on_ack(self, req: Request, now: float) -> None:
        leg = self._by_dialog.get(DialogId.for_incoming(req))
        if leg is None or leg.state not in ("answered", "confirmed"):
            self._events.append(ev.Dropped("stray_ack"))
            return
        pending, negotiated = leg.pending_offer, None
        if pending is not None and req.cseq.seq != pending.cseq:
            self._events.append(ev.Dropped("stale_ack"))  # a late ACK for an earlier 2xx
            return
        if leg.ok is not None:
            leg.ok.ack_received()
            leg.ok = None
        if pending is not None:
            leg.pending_offer = None
            result = read_ack_answer(pending.offer, req)
            if isinstance(result, AnswerRejected):
                reason, header = result.call_end_reason, result.reason_header
                self._end(leg, reason, now, send_bye=True, bye_headers=(header,))
                return
            negotiated = result
        if leg.state == "answered" or negotiated is not None:
            advance(leg, "ack")
            self._events.append(ev.CallConfirmed(leg.id, negotiated))

    def _on_cancel(
        self, tx: ServerTransaction, target: ServerInviteTransaction | None, now: float
    ) -> None:
        leg = self._by_tx.get(target) if target is not None else None
        if leg is None:
            self._respond(tx, 481, now=now)
            return
        self._respond(tx, 200, now=now, leg=leg)
        if leg.state == "incoming" and leg.server_tx is not None:
            self._respond(leg.server_tx, 487, now=now, leg=leg)
            self._finish(leg, now)
            self._events.append(ev.CallCancelled(leg.id))

    def _on_bye(self, leg: Leg, req: Request, tx: ServerTransaction, now: float) -> None:
        self._respond(tx, 200, now=now, leg=leg)
        if leg.state != "ended":
            self._finish(leg, now)
            self._events.append(ev.CallEnded(leg.id, "remote hangup"))

    def _on_reinvite(self, leg: Leg, req: Request, tx: ServerTransaction, now: float) -> None:
        if leg.reinvite_tx is not None or leg.state == "incoming":
            self._respond(tx, 491, now=now, leg=leg)  # RFC 3261 §14.2: glare
            return
        leg.reinvite_tx, leg.reinvite = tx, req
        self._events.append(ev.ReInvite(leg.id, req.body or None))

    def _on_update(self, leg: Leg, req: Request, tx: ServerTransaction, now: float) -> None:
        if req.body:
            # Offers in UPDATE (RFC 3311) are not used by trunks for audio-only calls.
            self._respond(tx, 488, now=now, leg=leg)
            return
        self._respond(tx, 200, headers=self._refresh(leg, req, now), now=now, leg=leg)

    def _refresh(self, leg: Leg, req: Request, now: float) -> tuple[tuple[str, str], ...]:
        """A re-INVITE or UPDATE refreshed the session (RFC 4028 §9)."""
        try:
            session = negotiate_uas(
                req.headers.get("Session-Expires"),
                req.headers.get("Min-SE"),
                req.headers.get_all("Supported"),
                our_min_se=self.settings.min_se,
                preferred_interval=self.settings.session_expires or None,
            )
        except (SipParseError, ValueError):
            return ()
        se = session.session_expires
        if se is None or session.status != 200:
            return ()
        if leg.session is not None and not leg.session.expired:
            leg.session.refreshed(now, se.delta, session.we_refresh)
        return session.headers

    def _on_info(self, leg: Leg, req: Request, tx: ServerTransaction, now: float) -> None:
        digit = dtmf_from_info(req)
        if digit is None and req.body:
            self._respond(tx, 415, headers=(("Accept", ACCEPT),), now=now, leg=leg)
            return
        self._respond(tx, 200, now=now, leg=leg)
        if digit is not None:
            self._events.append(ev.InfoDtmf(leg.id, digit))

    def _on_notify(self, leg: Leg, req: Request, tx: ServerTransaction, now: float) -> None:
        if leg.refer is None:
            self._respond(tx, 481, now=now, leg=leg)
            return
        status = leg.refer.receive_notify(req)
        self._respond(tx, status, now=now, leg=leg)
        if status == 200 and leg.refer.last_status is not None:
            final = leg.refer.final_status is not None
            self._events.append(ev.ReferStatus(leg.id, leg.refer.last_status, final))
            if leg.refer.done:
                leg.refer = None

    def _on_in_dialog_options(
        self, leg: Leg, req: Request, tx: ServerTransaction, now: float
    ) -> None:
        self._respond(
            tx, 200, headers=(("Allow", ALLOW), ("Supported", SUPPORTED)), now=now, leg=leg
        )

    # --- responses to what we sent ------------------------------------------------------------

    def _on_response(self, tx: ClientTransaction, resp: Response) -> None:
        leg_id = None
        leg = None
        for candidate in self._legs.values():
            if tx in candidate.client_txs:
                leg, leg_id = candidate, candidate.client_txs[tx]
                break
        if leg is None or leg_id is None:
            return
        method = leg_id
        if leg.dialog is not None and resp.status >= 200:
            try:
                leg.dialog.receive_response(method, resp)
            except InvalidTransition:
                pass
        if resp.status < 200:
            return
        del leg.client_txs[tx]
        if method == "UPDATE" and leg.session is not None and not leg.session.expired:
            if resp.status < 300:
                leg.session.refreshed(self._now)
        if method == "REFER" and leg.refer is not None:
            leg.refer.on_refer_response(resp.status)
            if resp.status >= 300:
                leg.refer = None
                self._events.append(ev.ReferStatus(leg.id, resp.status, True))
            else:
                self._events.append(ev.ReferStatus(leg.id, resp.status, False))
        self._collect_legs()

    # --- actions -------------------------------------------------------------------------

    def _leg(self, leg_id: str) -> Leg:
        try:
            return self._legs[leg_id]
        except KeyError:
            raise InvalidTransition("leg", "unknown", leg_id) from None

    def ring(self, leg_id: str, now: float) -> None:
        leg = self._leg(leg_id)
        if leg.state == "incoming" and leg.server_tx is not None:
            self._respond(leg.server_tx, 180, now=now, leg=leg)

    def answer(self, leg_id: str, sdp: bytes, now: float) -> None:
        self._answer(leg_id, sdp, None, now)

    def answer_with_offer(self, leg_id: str, offer: SessionDescription, now: float) -> None:
        """Delayed offer (RFC 3261 §13.2.1): a 200 carrying kefu's ``offer`` to an INVITE that
        had none. Its ACK must answer it: ``CallConfirmed.negotiated``, or BYE and
        ``CallEnded`` when it does not."""
        self._answer(leg_id, bytes(offer), offer, now)

    def _answer(
        self, leg_id: str, sdp: bytes, offer: SessionDescription | None, now: float
    ) -> None:
        leg = self._legs.get(leg_id)
        if leg is None or leg.state != "incoming" or leg.server_tx is None or leg.dialog is None:
            return  # cancelled while the application prepared its answer
        headers = [("Allow", ALLOW), ("Supported", SUPPORTED), *leg.session_headers]
        resp = self._stamp(
            leg.dialog.make_response(
                leg.invite, 200, headers=headers, body=sdp, content_type="application/sdp"
            )
        )
        leg.server_tx.send_response(resp, now)
        leg.dialog.confirm()
        advance(leg, "answer")
        leg.ok = OkRetransmitter(resp, now, self.settings.timers)
        if offer is not None:
            leg.pending_offer = PendingOffer(leg.invite.cseq.seq, offer)
        if leg.session_interval:
            leg.session = SessionTimer(leg.session_interval, leg.session_we_refresh, now)

    def reject(
        self,
        leg_id: str,
        status: int,
        reason: str | None = None,
        *,
        headers: Iterable[tuple[str, str]] = (),
        now: float = 0.0,
    ) -> None:
        leg = self._legs.get(leg_id)
        if leg is None or leg.state != "incoming" or leg.server_tx is None:
            return
        self._respond(leg.server_tx, status, reason, headers, now=now, leg=leg)
        self._finish(leg, now)

    def answer_reinvite(self, leg_id: str, sdp: bytes, now: float) -> None:
        self._answer_reinvite(leg_id, sdp, None, now)

    def answer_reinvite_with_offer(
        self, leg_id: str, offer: SessionDescription, now: float
    ) -> None:
        """An offerless re-INVITE (RFC 3264 §8): our 2xx offers, the ACK answers, as for
        :meth:`answer_with_offer`."""
        self._answer_reinvite(leg_id, bytes(offer), offer, now)

    def _answer_reinvite(
        self, leg_id: str, sdp: bytes, offer: SessionDescription | None, now: float
    ) -> None:
        leg = self._legs.get(leg_id)
        if leg is None:
            return
        tx, req = leg.reinvite_tx, leg.reinvite
        if tx is None or req is None or leg.dialog is None:
            return
        leg.reinvite_tx = leg.reinvite = None
        headers = [("Allow", ALLOW), ("Supported", SUPPORTED), *self._refresh(leg, req, now)]
        resp = self._stamp(
            leg.dialog.make_response(
                req, 200, headers=headers, body=sdp, content_type="application/sdp"
            )
        )
        tx.send_response(resp, now)
        leg.ok = OkRetransmitter(resp, now, self.settings.timers)
        if offer is not None:
            leg.pending_offer = PendingOffer(req.cseq.seq, offer)
        if leg.state == "confirmed":
            leg.state = "answered"  # wait for this 2xx's ACK too

    def reject_reinvite(
        self, leg_id: str, status: int, *, headers: Iterable[tuple[str, str]] = (), now: float = 0.0
    ) -> None:
        leg = self._legs.get(leg_id)
        if leg is None or leg.reinvite_tx is None:
            return
        tx, leg.reinvite_tx, leg.reinvite = leg.reinvite_tx, None, None
        self._respond(tx, status, headers=headers, now=now, leg=leg)

    def hangup(self, leg_id: str, now: float) -> None:
        leg = self._legs.get(leg_id)
        if leg is None or leg.state == "ended":
            return
        if leg.state == "incoming":
            self.reject(leg_id, 480, now=now)
            return
        self._end(leg, "local hangup", now, send_bye=True, notify=False)

    def refer(self, leg_id: str, target: str, now: float) -> None:
        leg = self._leg(leg_id)
        if leg.dialog is None or leg.state not in ("answered", "confirmed"):
            raise InvalidTransition("leg", leg.state, "refer")
        req = build_refer(leg.dialog, target, referred_by=self.contact(leg.peer).strip("<>"))
        leg.refer = ReferSubscription(req.cseq.seq)
        self._send_in_dialog(leg, req, now)

    def _send_in_dialog(self, leg: Leg, req: Request, now: float) -> None:
        tx = self.transactions.send_request(
            req, now, reliable=leg.peer.transport == "tcp", peer=leg.peer
        )
        leg.client_txs[tx] = req.method

    # --- ending ----------------------------------------------------------------------------

    def _end(
        self,
        leg: Leg,
        reason: str,
        now: float,
        *,
        send_bye: bool,
        notify: bool = True,
        bye_headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        if leg.state == "ended":
            return
        if send_bye and leg.dialog is not None and not leg.dialog.terminated:
            try:
                bye = leg.dialog.create_request("BYE", headers=bye_headers)
                self._send_in_dialog(leg, bye, now)
            except InvalidTransition:
                pass
        self._finish(leg, now)
        if notify:
            self._events.append(ev.CallEnded(leg.id, reason))

    def _finish(self, leg: Leg, now: float) -> None:
        advance(leg, "end")
        leg.ok = None
        leg.session = None
        leg.pending_offer = None
        if leg.reinvite_tx is not None:
            self._respond(leg.reinvite_tx, 487, now=now, leg=leg)
            leg.reinvite_tx = None
        self._collect_legs()

    def _collect_legs(self) -> None:
        for leg in [leg for leg in self._legs.values() if leg.state == "ended"]:
            if leg.client_txs:
                continue
            del self._legs[leg.id]
            if leg.dialog is not None:
                self._by_dialog.pop(leg.dialog.id, None)
            if leg.server_tx is not None:
                self._by_tx.pop(leg.server_tx, None)

    @property
    def leg_count(self) -> int:
        return len(self._legs)
