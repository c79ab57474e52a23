"""What the sans-IO user agent tells the application (frozen values, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass

from kefu.sip.message import Request
from kefu.sip.offer_answer import Negotiated


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a message came from and where its answer goes (RFC 3261 §18.2.2)."""

    transport: str
    """``udp``, ``tcp`` or ``tls``."""
    host: str
    """Source IP address of the packet or connection."""
    port: int
    """Source port."""

    @property
    def reliable(self) -> bool:
        """A stream transport: no retransmissions (RFC 3261 §17.1.1.2, §18.3)."""
        return self.transport in ("tcp", "tls")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.transport}:{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class IncomingCall:
    """A new INVITE passed every check; answer with ``answer()`` or ``reject()``, or with
    ``answer_with_offer()`` when it came without an offer."""

    leg: str
    invite: Request
    offer: bytes | None
    """The SDP offer, or None for a delayed-offer INVITE (RFC 3261 §13.2.1)."""
    source: str
    sip_call_id: str
    received_at: float
    """The ``now`` at which the INVITE arrived."""


@dataclass(frozen=True, slots=True)
class CallConfirmed:
    """The ACK for our 2xx arrived (RFC 3261 §13.3.1.4)."""

    leg: str
    negotiated: Negotiated | None = None
    """When our 2xx carried an offer (delayed offer, RFC 3261 §13.2.1; an offerless
    re-INVITE, RFC 3264 §8): the media the ACK's answer agreed on. None otherwise."""


@dataclass(frozen=True, slots=True)
class CallCancelled:
    """The caller sent CANCEL before we answered; 487 already went out (RFC 3261 §9.2)."""

    leg: str


@dataclass(frozen=True, slots=True)
class CallEnded:
    """The dialog is over: BYE from the peer, no ACK, an ACK without a usable answer to our
    offer (we sent BYE), session expiry, transport failure."""

    leg: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReInvite:
    """A target-refresh re-INVITE; answer with ``answer_reinvite()`` or ``reject_reinvite()``
    (``answer_reinvite_with_offer()`` when it came without an offer)."""

    leg: str
    offer: bytes | None


@dataclass(frozen=True, slots=True)
class InfoDtmf:
    """A digit sent in SIP INFO (application/dtmf-relay or application/dtmf)."""

    leg: str
    digit: str


@dataclass(frozen=True, slots=True)
class ReferStatus:
    """Progress of a REFER we sent: the REFER's response or a NOTIFY's sipfrag status."""

    leg: str
    status: int
    final: bool


@dataclass(frozen=True, slots=True)
class OutboundProgress:
    """A provisional response (101-199) to an INVITE kefu sent (RFC 3261 §13.2.2.1)."""

    leg: str
    status: int
    reason: str
    sdp: bytes | None
    """The answer to our offer when the 1xx carried one (early media, e.g. 183)."""


@dataclass(frozen=True, slots=True)
class OutboundRetried:
    """kefu sent the call's INVITE again: with credentials (``auth``, after 401/407) or to
    a Contact of a 3xx (``redirect``)."""

    leg: str
    cause: str
    status: int
    """The response that caused it."""
    target: str
    """The new INVITE's Request-URI."""


@dataclass(frozen=True, slots=True)
class OutboundAnswered:
    """A 2xx answered an INVITE kefu sent; the ACK is on its way (RFC 3261 §13.2.2.4)."""

    leg: str
    sdp: bytes | None
    """The 2xx's SDP answer, or the early one when the 2xx had none."""
    setup_seconds: float
    """From the first INVITE sent to this 2xx (redirects and challenges included)."""


@dataclass(frozen=True, slots=True)
class OutboundFailed:
    """An outbound call ended before it was answered: a final non-2xx response that was not
    retried, a second challenge, an unknown digest algorithm, no answer within the ring
    timeout (CANCEL, then the 487), no response at all (408)."""

    leg: str
    status: int
    reason: str


@dataclass(frozen=True, slots=True)
class RequestSeen:
    """Every request that parsed, for metrics."""

    method: str


@dataclass(frozen=True, slots=True)
class ResponseSent:
    """Every final or provisional response we sent, for metrics."""

    status: int


@dataclass(frozen=True, slots=True)
class Dropped:
    """A datagram we dropped without answering, and why."""

    reason: str


UaEvent = (
    IncomingCall
    | CallConfirmed
    | CallCancelled
    | CallEnded
    | ReInvite
    | InfoDtmf
    | ReferStatus
    | OutboundProgress
    | OutboundRetried
    | OutboundAnswered
    | OutboundFailed
    | RequestSeen
    | ResponseSent
    | Dropped
)
