"""The user agent as the caller (UAC, RFC 3261 §8.1, §9.1, §13.2), sans-IO.

``dial(spec, now)`` sends an INVITE (through the outbound proxy, or to the target's IP) and
returns the new leg's id; from then on the leg reports ``OutboundProgress`` (1xx),
``OutboundRetried`` (the INVITE sent again after 401/407 or a 3xx, :mod:`kefu.sip.uac`),
then either ``OutboundAnswered`` — the 2xx created the dialog and kefu ACKed it, with the
INVITE's CSeq number, its credentials and the dialog's route set (§13.2.2.4) — or
``OutboundFailed`` with the SIP status and a reason. After that the leg is a dialog like an
answered incoming one (:mod:`kefu.sip.ua_dialog`: BYE either way, re-INVITE, INFO...).

Giving up (the ring timeout, or the application hanging up first) sends CANCEL (§9.1) once a
provisional response has arrived — never before — and reports the 487 that ends the INVITE;
without one within 64*T1 of the CANCEL the leg ends anyway. A 2xx that crosses the CANCEL is
ACKed and ended with a BYE. A 2xx from a second fork (another To tag) is ACKed and BYEd too.
"""

from __future__ import annotations

import secrets

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.dialog import Dialog, new_branch, new_tag
from kefu.sip.message import Headers, Request, Response
from kefu.sip.transaction import ClientTransaction, make_cancel
from kefu.sip.ua_core import UaCore
from kefu.sip.ua_events import Peer
from kefu.sip.ua_leg import ALLOW, Leg, advance
from kefu.sip.uac import DialSpec, Failure, Outbound, after_final, next_hop
from kefu.sip.uri import SipUri, is_ip_address

__all__ = ["UacMixin"]

_SDP = "application/sdp"
_EARLY = ("calling", "early", "cancelling")


class UacMixin(UaCore):
    """Calls kefu places: INVITE, its responses, CANCEL, the ACK of the 2xx."""

    def dial(self, spec: DialSpec, now: float) -> str:
        """Send the INVITE for ``spec``; the new leg's id. ValueError when the target is not
        a SIP URI kefu can route (a host name without an outbound proxy, sips:, TCP)."""
        try:
            target = SipUri.parse(spec.target)
        except SipParseError as exc:
            raise ValueError(f"not a SIP URI: {exc}") from None
        peer = next_hop(target, spec.outbound_proxy)
        if peer is None:
            raise ValueError(
                f"cannot route {spec.target}: without trunk.outbound_proxy the URI's host "
                "must be an IP address (kefu resolves no names), over UDP"
            )
        leg_id = new_tag()
        host = self._host if ":" not in self._host else f"[{self._host}]"
        headers: list[tuple[str, str]] = [
            ("Via", f"SIP/2.0/UDP {self.sent_by};branch={new_branch()};rport"),
            ("Max-Forwards", "70"),
            ("From", f"{spec.from_uri};tag={new_tag()}"),
            ("To", f"<{target}>"),
            ("Call-ID", f"{secrets.token_hex(12)}@{host}"),
            ("CSeq", "1 INVITE"),
            ("Contact", self.contact(peer)),
            ("Allow", ALLOW),
            ("User-Agent", self.settings.user_agent),
            *spec.headers,
            ("Content-Type", _SDP),
        ]
        invite = Request("INVITE", target, Headers(headers), spec.sdp)
        out = Outbound(spec, started=now, ring_deadline=now + spec.ring_timeout)
        out.tried.add(str(target))
        leg = Leg(leg_id, invite, peer, None, state="calling", outbound=out)
        self._legs[leg_id] = leg
        self._send_invite(leg, invite, peer, now)
        return leg_id

    def _send_invite(self, leg: Leg, invite: Request, peer: Peer, now: float) -> None:
        assert leg.outbound is not None
        leg.invite, leg.peer = invite, peer
        leg.outbound.provisional = False
        tx = self.transactions.send_request(invite, now, reliable=False, peer=peer)
        leg.outbound.tx = tx
        leg.client_txs[tx] = "INVITE"

    # --- giving up ---------------------------------------------------------------------------

    def _cancel(self, leg: Leg, reason: str, now: float) -> None:
        """Stop ringing (§9.1): CANCEL now if a 1xx came, else as soon as one does."""
        out = leg.outbound
        assert out is not None
        if out.cancel_reason is None:
            out.cancel_reason = reason
            advance(leg, "cancel")
        if out.provisional and not out.cancel_sent and out.tx is not None:
            cancel = make_cancel(leg.invite)
            tx = self.transactions.send_request(cancel, now, reliable=False, peer=leg.peer)
            leg.client_txs[tx] = "CANCEL"
            out.cancel_sent = True
            out.give_up_at = now + self.settings.timers.timeout

    def _outbound_timer(self, leg: Leg) -> float | None:
        out = leg.outbound
        if out is None or leg.state not in _EARLY:
            return None
        if out.cancel_reason is None:
            return out.ring_deadline
        return out.give_up_at

    def _outbound_due(self, leg: Leg, now: float) -> None:
        out = leg.outbound
        if out is None or leg.state not in _EARLY:
            return
        if out.cancel_reason is None and now >= out.ring_deadline:
            timeout = out.spec.ring_timeout
            self._cancel(leg, f"no answer within {timeout:g} s (CANCEL sent)", now)
        elif out.give_up_at is not None and now >= out.give_up_at:
            self._fail(leg, 408, "no final response within 64*T1 of the CANCEL", now)

    def _fail(self, leg: Leg, status: int, reason: str, now: float) -> None:
        if leg.state == "ended":
            return
        self._finish(leg, now)
        self._events.append(ev.OutboundFailed(leg.id, status, reason))

    # --- responses ---------------------------------------------------------------------------

    def _on_outbound_response(self, leg: Leg, tx: ClientTransaction, resp: Response) -> None:
        out = leg.outbound
        assert out is not None
        now = self._now
        if leg.client_txs.get(tx) == "CANCEL":
            if resp.status >= 200:
                del leg.client_txs[tx]
                self._collect_legs()
            return
        if resp.status < 200:
            self._provisional(leg, tx, resp, now)
        elif resp.status < 300:
            self._accepted(leg, tx, resp, now)
        else:
            self._rejected(leg, tx, resp, now)

    def _provisional(self, leg: Leg, tx: ClientTransaction, resp: Response, now: float) -> None:
        out = leg.outbound
        assert out is not None
        if tx is not out.tx or leg.state not in _EARLY:
            return
        out.provisional = True
        advance(leg, "provisional")
        if out.cancel_reason is not None:
            self._cancel(leg, out.cancel_reason, now)
            return
        sdp = resp.body if resp.body and (resp.content_type or "").startswith(_SDP) else None
        if sdp is not None:
            out.early_sdp = sdp
        if resp.status > 100:
            self._events.append(ev.OutboundProgress(leg.id, resp.status, resp.reason, sdp))

    def _accepted(self, leg: Leg, tx: ClientTransaction, resp: Response, now: float) -> None:
        out = leg.outbound
        assert out is not None
        tag = resp.to.tag
        if leg.dialog is not None and leg.dialog.id.remote_tag == tag:
            if out.ack is not None:  # a retransmission of the 2xx: the same ACK again
                self._emit(out.ack, leg.peer)
            return
        try:
            dialog = Dialog.from_response(
                leg.invite, resp, via_sent_by=f"{self.sent_by};rport", via_transport="UDP"
            )
        except (SipParseError, InvalidTransition):
            return  # a 2xx without To tag cannot be ACKed in a dialog; Timer M drops it
        peer = self._dialog_peer(dialog, out, leg.peer)
        ack = dialog.create_request("ACK", headers=self._credentials(leg.invite))
        if leg.dialog is not None or leg.state not in _EARLY:
            # a second fork answered (§13.2.2.4): ACK it, then end that dialog at once
            self._emit(ack, peer)
            bye = dialog.create_request("BYE")
            self.transactions.send_request(bye, now, reliable=False, peer=peer)
            return
        leg.dialog, leg.peer, out.ack = dialog, peer, ack
        self._by_dialog[dialog.id] = leg
        self._emit(ack, peer)
        cancelled = out.cancel_reason
        advance(leg, "accept")
        if cancelled is not None:  # the 2xx crossed our CANCEL: hang up what we gave up
            self._end(leg, cancelled, now, send_bye=True, notify=False)
            self._events.append(ev.OutboundFailed(leg.id, 487, cancelled))
            return
        sdp = resp.body if resp.body else out.early_sdp
        self._events.append(ev.OutboundAnswered(leg.id, sdp or None, now - out.started))

    def _rejected(self, leg: Leg, tx: ClientTransaction, resp: Response, now: float) -> None:
        out = leg.outbound
        assert out is not None
        leg.client_txs.pop(tx, None)  # the transaction ACKs it and absorbs retransmissions
        if tx is not out.tx or leg.state not in _EARLY:
            self._collect_legs()
            return
        out.tx = None
        decision = after_final(out, leg.invite, resp, leg.peer)
        if isinstance(decision, Failure):
            self._fail(leg, decision.status, decision.reason, now)
            return
        advance(leg, "retry")
        self._send_invite(leg, decision.invite, decision.peer, now)
        self._events.append(
            ev.OutboundRetried(leg.id, decision.cause, resp.status, str(decision.invite.uri))
        )

    # --- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _credentials(invite: Request) -> tuple[tuple[str, str], ...]:
        """The INVITE's credentials, which its 2xx's ACK carries too (§13.2.2.4, §22.1)."""
        names = ("Authorization", "Proxy-Authorization")
        return tuple((n, v) for n in names for v in invite.headers.get_raw(n))

    @staticmethod
    def _dialog_peer(dialog: Dialog, out: Outbound, fallback: Peer) -> Peer:
        """Where in-dialog requests go: the outbound proxy; else the first Route, or the
        remote target, when its host is an IP; else where the INVITE went."""
        if out.spec.outbound_proxy is not None:
            return out.spec.outbound_proxy
        uri = dialog.route_set[0].uri if dialog.route_set else dialog.remote_target
        if uri.is_sip and is_ip_address(uri.host) and uri.transport in (None, "udp"):
            return Peer("udp", uri.bare_host, uri.port or uri.default_port)
        return fallback
