"""The user agent's shared core: its state, output plumbing and the end of a leg, sans-IO.

:class:`UaCore` holds what every part of :class:`~kefu.sip.ua.UserAgent` uses — settings, the
transaction layer, the leg tables, the outbox and the event queue — and the helpers they share:
emitting messages, stateless and transaction responses, in-dialog requests, and ending and
forgetting a leg. The parts themselves are mixins over it: :mod:`kefu.sip.ua_uas` (a new
INVITE, its ACK and CANCEL, answering), :mod:`kefu.sip.ua_dialog` (requests inside a dialog,
re-INVITE answers, REFER), :mod:`kefu.sip.ua_uac` (calls kefu places); :mod:`kefu.sip.ua`
composes them and owns input, timers and dispatch.

Invariant: a leg is in ``_legs`` until it is ended and has no client transaction left;
``_by_dialog`` and ``_by_tx`` only ever point at legs in ``_legs``.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections import deque
from collections.abc import Iterable

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip import ua_events as ev
from kefu.sip.auth import DigestServer
from kefu.sip.dialog import DialogId, new_tag
from kefu.sip.message import InvalidHeaderValue, Request, Response, make_response
from kefu.sip.transaction import ServerTransaction, TransactionLayer
from kefu.sip.ua_events import Peer, UaEvent
from kefu.sip.ua_leg import Leg, UaSettings, advance
from kefu.sip.uri import in_networks

__all__ = ["UaCore"]


class UaCore:
    """State and shared helpers of the user agent (see the module docstring)."""

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
        self._tls_port = 5061
        self._now = 0.0
        """The latest ``now`` fed in, for events the transaction layer reports without one."""

    # --- plumbing ------------------------------------------------------------------------

    def set_local_address(self, host: str, port: int) -> None:
        self._host, self._port = host, port

    def set_tls_port(self, port: int) -> None:
        """The SIP-over-TLS listener's port: Via and Contact of TLS dialogs name it."""
        self._tls_port = port

    @property
    def sent_by(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    def sent_by_for(self, peer: Peer) -> str:
        """Our Via sent-by on ``peer``'s transport (the TLS listener has its own port)."""
        if peer.transport != "tls":
            return self.sent_by
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._tls_port}"

    def contact(self, peer: Peer, *, sips: bool = False) -> str:
        """Our Contact towards ``peer``: ``sips:`` when the dialog's request asked for it
        (RFC 3261 §12.1.1), ``;transport=tcp|tls`` on stream transports."""
        if sips and peer.transport == "tls":
            return f"<sips:kefu@{self.sent_by_for(peer)}>"
        transport = f";transport={peer.transport}" if peer.reliable else ""
        return f"<sip:kefu@{self.sent_by_for(peer)}{transport}>"

    def datagrams_to_send(self) -> list[tuple[bytes, Peer]]:
        for out in self.transactions.messages_to_send():
            assert isinstance(out.peer, Peer)
            self._emit(out.message, out.peer)
        sent, self._out = self._out, []
        return sent

    def _emit(self, msg: Request | Response, peer: Peer) -> None:
        if isinstance(msg, Response):
            self._events.append(ev.ResponseSent(msg.status))
        self._out.append((bytes(msg), peer))

    def _allowed(self, host: str) -> bool:
        return in_networks(host, self._networks)

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

    # --- legs ----------------------------------------------------------------------------

    def _leg(self, leg_id: str) -> Leg:
        try:
            return self._legs[leg_id]
        except KeyError:
            raise InvalidTransition("leg", "unknown", leg_id) from None

    def _send_in_dialog(self, leg: Leg, req: Request, now: float) -> None:
        tx = self.transactions.send_request(req, now, reliable=leg.peer.reliable, peer=leg.peer)
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
