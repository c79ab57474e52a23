"""Delayed offer (RFC 3261 §13.2.1, RFC 3264 §5): kefu offers in its 2xx, the ACK answers.

An INVITE (or re-INVITE) without a body asks the UAS for an offer: kefu's 2xx carries it, and
the ACK for that 2xx must carry the answer. Nothing else can carry it — the offer/answer
exchange of that INVITE is over once the ACK is in — so an ACK without a usable answer leaves
a dialog with no media, and kefu ends it with BYE, stating why in a ``Reason`` header
(RFC 3326).

This module is pure: the user agent (``ua.py``) keeps a :class:`PendingOffer` on the leg and
hands the ACK to :func:`read_ack_answer`; the media server builds the offer with
:func:`~kefu.sip.offer.make_offer`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kefu.errors import SdpError
from kefu.sip.message import Request
from kefu.sip.offer import accept_answer
from kefu.sip.offer_answer import Negotiated, NegotiationError
from kefu.sip.sdp import SessionDescription

__all__ = ["AnswerRejected", "PendingOffer", "read_ack_answer"]


@dataclass(frozen=True, slots=True)
class PendingOffer:
    """An offer kefu sent in a 2xx; the ACK with the same CSeq number must answer it."""

    cseq: int
    """CSeq number of the (re-)INVITE the 2xx answered; its ACK carries the same number
    (RFC 3261 §13.2.2.4), which tells it from a late ACK for an earlier 2xx."""
    offer: SessionDescription
    """What kefu offered (RFC 3264 §5); the answer is read against it (§7)."""


@dataclass(frozen=True, slots=True)
class AnswerRejected:
    """Why the ACK did not carry an acceptable answer; the BYE that ends the call says so."""

    cause: int
    """The SIP status that best names the fault, for ``Reason: SIP;cause=`` (RFC 3326 §2):
    400 for a missing or unparsable answer, 488 for one that cannot be used."""
    detail: str
    """Human-readable text, e.g. ``Incompatible media format: ...``."""

    @property
    def reason_header(self) -> tuple[str, str]:
        """The BYE's ``Reason`` header (RFC 3326 §2): protocol SIP, the cause and the text."""
        text = "".join(ch if ch.isprintable() else " " for ch in self.detail[:200])
        text = text.replace("\\", "\\\\").replace('"', '\\"')
        return ("Reason", f'SIP;cause={self.cause};text="{text}"')

    @property
    def call_end_reason(self) -> str:
        """The reason the user agent's ``CallEnded`` carries; its first word is a metric label."""
        return f"bad_answer ({self.detail})"


def read_ack_answer(offer: SessionDescription, ack: Request) -> Negotiated | AnswerRejected:
    """The media the ACK's answer to ``offer`` agrees on, or why there is none.

    Rejected: no body, a body that is not ``application/sdp``, SDP that does not parse,
    an answer that picks no codec kefu offered or sets the audio port to 0 (RFC 3264 §6, §7).
    """
    if not ack.body.strip():
        return AnswerRejected(400, "no SDP answer in the ACK")
    # RFC 3261 §20.15 requires Content-Type with a body; without one, read it as SDP.
    ctype = ack.content_type or "application/sdp"
    if ctype != "application/sdp":
        return AnswerRejected(400, f"the ACK's body is {ctype[:60]}, not application/sdp")
    try:
        answer = SessionDescription.parse(ack.body)
    except ValueError as exc:  # SdpError, or bytes that are not UTF-8
        return AnswerRejected(400, f"Bad SDP answer: {exc}")
    try:
        return accept_answer(offer, answer)
    except NegotiationError as exc:
        return AnswerRejected(exc.status, str(exc))
    except SdpError as exc:
        return AnswerRejected(488, f"Unusable SDP answer: {exc}")
