"""The user agent as the called party (UAS, RFC 3261 §8.2, §13.3), sans-IO.

A new INVITE passes digest authentication (when ``sip.auth_users`` is set) and the session
timer negotiation (RFC 4028), creates a dialog and a leg, and becomes ``IncomingCall``; the
application answers (``answer``, or ``answer_with_offer`` for a delayed offer), rings or
rejects. The ACK confirms the leg (reading the answer to an offer our 2xx carried, RFC 3261
§13.2.1); a CANCEL before the answer ends it with 487 (§9.2).

Leg states used here (:mod:`kefu.sip.ua_leg`): ``incoming`` → ``answered`` → ``confirmed``;
``incoming`` → ``ended`` on reject or CANCEL.
"""

from __future__ import annotations

from collections.abc import Iterable

from kefu.errors import SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.delayed_offer import AnswerRejected, PendingOffer, read_ack_answer
from kefu.sip.dialog import Dialog, DialogId, OkRetransmitter, new_tag
from kefu.sip.message import Request
from kefu.sip.sdp import SessionDescription
from kefu.sip.session_timer import SessionTimer, negotiate_request
from kefu.sip.transaction import ServerInviteTransaction, ServerTransaction
from kefu.sip.ua_core import UaCore
from kefu.sip.ua_events import Peer
from kefu.sip.ua_leg import ALLOW, SUPPORTED, Leg, advance

__all__ = ["UasMixin"]


class UasMixin(UaCore):
    """Incoming calls: INVITE, ACK, CANCEL; ring, answer, reject."""

    def _on_invite(self, req: Request, tx: ServerTransaction, peer: Peer, now: float) -> None:
        assert isinstance(tx, ServerInviteTransaction)
        if self._auth is not None and not self._authenticated(req, tx, now):
            return
        if req.headers.get("Contact") is None:
            self._respond(tx, 400, "Missing Contact header", now=now)
            return
        try:
            session = negotiate_request(
                req,
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
                self.contact(peer, sips=req.uri.scheme == "sips"),
                via_sent_by=f"{self.sent_by_for(peer)};rport",
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
