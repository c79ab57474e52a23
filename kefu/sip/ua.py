"""kefu's SIP user agent (RFC 3261 §8, §12-§15), sans-IO: input, timers and dispatch.

The user agent is split by responsibility: :mod:`kefu.sip.ua_core` (shared state, output,
ending a leg), :mod:`kefu.sip.ua_uas` (incoming calls: INVITE, ACK, CANCEL, answering),
:mod:`kefu.sip.ua_dialog` (requests inside a dialog, re-INVITE answers, REFER) and
:mod:`kefu.sip.ua_uac` (calls kefu places: ``dial``, digest, redirects, CANCEL; decisions in
:mod:`kefu.sip.uac`). :class:`UserAgent` composes them.

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

Leg state table (invariants, :mod:`kefu.sip.ua_leg`): ``incoming`` → ``answered`` (2xx
sent) → ``confirmed`` (ACK) → ``ended``; ``incoming`` → ``ended`` on reject or CANCEL; an
outbound leg ``calling`` → ``early`` → ``confirmed`` (or ``cancelling`` → ``ended``). A leg
leaves the table only when it is ended and its client transactions are done.

Delayed offer (RFC 3261 §13.2.1): an INVITE or re-INVITE without SDP is answered with
``answer_with_offer``/``answer_reinvite_with_offer``; the 2xx (and each retransmission of it,
byte for byte) carries kefu's offer, and the ACK with the INVITE's CSeq number must carry the
answer. A usable answer confirms the leg with the negotiated media in ``CallConfirmed``;
anything else (no body, bad SDP, no common codec, audio port 0) ends it: BYE with a ``Reason``
header (RFC 3326), then ``CallEnded`` (:mod:`kefu.sip.delayed_offer`).
"""

from __future__ import annotations

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.dialog import new_tag
from kefu.sip.message import Request, Response, make_response, parse_message
from kefu.sip.session_timer import RefreshDue, SessionExpired
from kefu.sip.transaction import (
    ClientTransaction,
    RequestReceived,
    ResponseReceived,
    ServerTransaction,
    Terminated,
    Timeout,
    TransportError,
)
from kefu.sip.ua_dialog import InDialogMixin
from kefu.sip.ua_events import Peer, UaEvent
from kefu.sip.ua_leg import ACCEPT, ALLOW, KNOWN_METHODS, SUPPORTED, UaSettings, replace_top_via
from kefu.sip.ua_uac import UacMixin
from kefu.sip.ua_uas import UasMixin
from kefu.sip.uac import DialSpec
from kefu.sip.validate import check_request, check_response, response_for_parse_error

__all__ = ["DialSpec", "Peer", "UaEvent", "UaSettings", "UserAgent"]


class UserAgent(UasMixin, InDialogMixin, UacMixin):
    """One SIP user agent: input, timers and dispatch over its parts (module docstring)."""

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
            if leg.outbound is not None:
                times.append(self._outbound_timer(leg))
        due = [t for t in times if t is not None]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        self._now = now
        self.transactions.handle_timer(now)
        for leg in list(self._legs.values()):
            if leg.outbound is not None:
                self._outbound_due(leg, now)
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
            self.transactions.receive(msg, now, reliable=peer.reliable, peer=peer)
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
                case Terminated():
                    tx = event.transaction
                    if isinstance(tx, ServerTransaction):
                        self._by_tx.pop(tx, None)
                    elif isinstance(tx, ClientTransaction):
                        # an outbound INVITE's stays past its 2xx (Timer M, RFC 6026)
                        for leg in self._legs.values():
                            if leg.client_txs.pop(tx, None) is not None:
                                break
                    self._collect_legs()

    # --- requests ------------------------------------------------------------------------

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
        self._on_in_dialog(req, tx, now)

    # --- responses to what we sent -----------------------------------------------------------

    def _on_response(self, tx: ClientTransaction, resp: Response) -> None:
        method = None
        leg = None
        for candidate in self._legs.values():
            if tx in candidate.client_txs:
                leg, method = candidate, candidate.client_txs[tx]
                break
        if leg is None or method is None:
            return
        if leg.outbound is not None and method in ("INVITE", "CANCEL"):
            self._on_outbound_response(leg, tx, resp)
            return
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

    # --- actions -----------------------------------------------------------------------------

    def hangup(self, leg_id: str, now: float) -> None:
        """End the leg: BYE once answered; before that 480 (incoming) or CANCEL (outbound)."""
        leg = self._legs.get(leg_id)
        if leg is None or leg.state == "ended":
            return
        if leg.outbound is not None and leg.state in ("calling", "early", "cancelling"):
            self._cancel(leg, "cancelled by kefu (local hangup)", now)
            return
        if leg.state == "incoming":
            self.reject(leg_id, 480, now=now)
            return
        self._end(leg, "local hangup", now, send_bye=True, notify=False)
