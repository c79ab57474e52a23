"""Requests inside an established dialog (RFC 3261 §12.2, §14, §15), sans-IO.

BYE, re-INVITE (target refresh, hold, offerless re-INVITE answered in the ACK), UPDATE
session refreshes (RFC 4028), INFO DTMF, NOTIFY for a REFER we sent (RFC 3515) and in-dialog
OPTIONS; the application's answers to a re-INVITE; REFER. The same handlers serve dialogs
kefu answered and dialogs it created by calling out (:mod:`kefu.sip.ua_uac`).
"""

from __future__ import annotations

from collections.abc import Iterable

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.delayed_offer import PendingOffer
from kefu.sip.dialog import DialogId, OkRetransmitter
from kefu.sip.message import Request
from kefu.sip.refer import ReferSubscription, build_refer
from kefu.sip.sdp import SessionDescription
from kefu.sip.session_timer import negotiate_request
from kefu.sip.transaction import ServerTransaction
from kefu.sip.ua_core import UaCore
from kefu.sip.ua_leg import ACCEPT, ALLOW, SUPPORTED, Leg, dtmf_from_info

__all__ = ["InDialogMixin"]


class InDialogMixin(UaCore):
    """Requests in a dialog and the application's answers to them."""

    def _on_in_dialog(self, req: Request, tx: ServerTransaction, now: float) -> None:
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
            session = negotiate_request(
                req,
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

    def refer(self, leg_id: str, target: str, now: float) -> None:
        leg = self._leg(leg_id)
        if leg.dialog is None or leg.state not in ("answered", "confirmed"):
            raise InvalidTransition("leg", leg.state, "refer")
        req = build_refer(leg.dialog, target, referred_by=self.contact(leg.peer).strip("<>"))
        leg.refer = ReferSubscription(req.cseq.seq)
        self._send_in_dialog(leg, req, now)
