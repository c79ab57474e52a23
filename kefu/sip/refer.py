"""REFER helpers (RFC 3515, RFC 3892 Referred-By, RFC 3420 message/sipfrag, RFC 6665 events).

kefu uses REFER to hand a caller back to the call center (blind transfer). This module builds
the REFER's headers, parses the NOTIFYs that report progress, and tracks the outcome.

ReferSubscription state table (invariants):

* ``pending`` until the REFER gets a final response or the first NOTIFY arrives (a NOTIFY may
  overtake the 202 on UDP, RFC 3515 §2.4.4, so NOTIFYs are accepted in ``pending`` too);
* ``success`` / ``failed`` are reached only from a final sipfrag status (or a failed REFER)
  and are never left except for ``terminated``;
* ``terminated`` means the implicit subscription ended: nothing more will arrive. A
  subscription that ends before any final status counts as failed first.
* A late 202 after progress is a no-op self-transition, never a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from kefu.errors import InvalidTransition, SipParseError

if TYPE_CHECKING:
    from kefu.sip.dialog import Dialog
    from kefu.sip.message import Request

__all__ = [
    "EventHeader",
    "ReferState",
    "ReferSubscription",
    "SipFrag",
    "SubscriptionState",
    "build_refer",
    "refer_headers",
]


def _params(parts: list[str], header: str) -> tuple[tuple[str, str | None], ...]:
    out: list[tuple[str, str | None]] = []
    for p in parts:
        p = p.strip()
        if not p:
            raise SipParseError(f"{header}: empty parameter", header=header)
        k, eq, v = p.partition("=")
        out.append((k.strip().lower(), v.strip().strip('"') if eq else None))
    return tuple(out)


def _fmt_params(params: tuple[tuple[str, str | None], ...]) -> str:
    return "".join(f";{k}" if v is None else f";{k}={v}" for k, v in params)


@dataclass(frozen=True, slots=True)
class EventHeader:
    """The ``Event`` header (RFC 6665 §8.2.1; ``id`` per RFC 3515 §2.4.6)."""

    package: str
    """Event package name, ``refer`` for REFER (RFC 3515 §2.4.6)."""
    id: str | None = None
    """CSeq number of the REFER this NOTIFY reports on (RFC 3515 §2.4.6)."""
    params: tuple[tuple[str, str | None], ...] = ()
    """Other event parameters (RFC 6665 §8.2.1 ``generic-param``)."""

    @classmethod
    def parse(cls, value: str) -> EventHeader:
        head, *rest = value.split(";")
        package = head.strip().lower()
        if not package or any(c in package for c in " \t,"):
            raise SipParseError(f"Event: bad package {head!r}", header="Event")
        params = _params(rest, "Event")
        ev_id = next((v for k, v in params if k == "id"), None)
        return cls(package, ev_id, tuple((k, v) for k, v in params if k != "id"))

    def __str__(self) -> str:
        out = self.package
        if self.id is not None:
            out += f";id={self.id}"
        return out + _fmt_params(self.params)


@dataclass(frozen=True, slots=True)
class SubscriptionState:
    """The ``Subscription-State`` header (RFC 6665 §8.2.3)."""

    state: str
    """``active``, ``pending`` or ``terminated`` (RFC 6665 §8.2.3 ``substate-value``)."""
    expires: int | None = None
    """Seconds the subscription has left (RFC 6665 §8.2.3)."""
    reason: str | None = None
    """Why it terminated, e.g. ``noresource`` (RFC 6665 §8.2.3 ``event-reason-value``)."""
    retry_after: int | None = None
    """Seconds before resubscribing makes sense (RFC 6665 §8.2.3)."""

    @classmethod
    def parse(cls, value: str) -> SubscriptionState:
        h = "Subscription-State"
        head, *rest = value.split(";")
        state = head.strip().lower()
        if not state:
            raise SipParseError(f"{h}: missing state", header=h)
        expires = retry = None
        reason = None
        for k, v in _params(rest, h):
            if k in ("expires", "retry-after"):
                if v is None or not v.isdigit():
                    raise SipParseError(f"{h}: bad {k} {v!r}", header=h)
                if k == "expires":
                    expires = int(v)
                else:
                    retry = int(v)
            elif k == "reason":
                reason = v
        return cls(state, expires, reason, retry)

    @property
    def terminated(self) -> bool:
        return self.state == "terminated"

    def __str__(self) -> str:
        out = self.state
        if self.reason is not None:
            out += f";reason={self.reason}"
        if self.expires is not None:
            out += f";expires={self.expires}"
        if self.retry_after is not None:
            out += f";retry-after={self.retry_after}"
        return out


@dataclass(frozen=True, slots=True)
class SipFrag:
    """A ``message/sipfrag`` body carrying a status line (RFC 3420 §2, RFC 3515 §2.4.5)."""

    status: int
    """Status code of the referred request's latest response (RFC 3515 §2.4.5)."""
    reason: str
    """Reason phrase, free text (RFC 3261 §7.2)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Optional header lines in the fragment (RFC 3420 §2)."""

    @classmethod
    def parse(cls, body: bytes) -> SipFrag:
        h = "Content-Type"
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SipParseError("sipfrag body is not UTF-8", header=h) from exc
        lines = text.replace("\r\n", "\n").split("\n")
        first = lines[0].strip()
        version, _, rest = first.partition(" ")
        code, _, reason = rest.strip().partition(" ")
        if version.upper() != "SIP/2.0":
            raise SipParseError(f"sipfrag: not a status line: {first!r}", header=h)
        if len(code) != 3 or not code.isdigit() or not 100 <= int(code) <= 699:
            raise SipParseError(f"sipfrag: bad status code {code!r}", header=h)
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line.strip():
                break
            name, colon, value = line.partition(":")
            if not colon:
                raise SipParseError(f"sipfrag: bad header line {line!r}", header=h)
            headers.append((name.strip(), value.strip()))
        return cls(int(code), reason.strip(), tuple(headers))

    def __bytes__(self) -> bytes:
        lines = [f"SIP/2.0 {self.status} {self.reason}"]
        lines += [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n").encode("utf-8")

    serialize = __bytes__


SIPFRAG_CONTENT_TYPE = "message/sipfrag;version=2.0"


def refer_headers(refer_to: str, referred_by: str | None = None) -> tuple[tuple[str, str], ...]:
    """Headers of a REFER (RFC 3515 §2.1, RFC 3892 §3).

    ``refer_to`` is a URI or name-addr; a bare URI with parameters or ``?`` headers is wrapped
    in angle brackets, which RFC 3515 §2.1 requires so they are not read as header params.
    """
    target = refer_to.strip()
    if not target:
        raise ValueError("Refer-To target must not be empty")
    if "<" not in target:
        target = f"<{target}>"
    out = [("Refer-To", target)]
    if referred_by is not None:
        by = referred_by.strip()
        out.append(("Referred-By", by if "<" in by else f"<{by}>"))
    return tuple(out)


def build_refer(dialog: Dialog, refer_to: str, *, referred_by: str | None = None) -> Request:
    """An in-dialog REFER from ``dialog`` (RFC 3515 §2.4.1)."""
    return dialog.create_request("REFER", headers=refer_headers(refer_to, referred_by))


class ReferState(StrEnum):
    """Progress of a REFER we sent (RFC 3515 §2.4)."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    TRYING = "trying"
    SUCCESS = "success"
    FAILED = "failed"
    TERMINATED = "terminated"


_S = ReferState
# (state, event) -> next state. Events: accepted (2xx to REFER), rejected (>=300 to REFER),
# progress (NOTIFY 1xx), success (NOTIFY 2xx), failure (NOTIFY >=300), ended (subscription
# terminated).
_TABLE: dict[tuple[ReferState, str], ReferState] = {
    (_S.PENDING, "accepted"): _S.ACCEPTED,
    (_S.PENDING, "rejected"): _S.FAILED,
    (_S.PENDING, "progress"): _S.TRYING,
    (_S.PENDING, "success"): _S.SUCCESS,
    (_S.PENDING, "failure"): _S.FAILED,
    (_S.ACCEPTED, "progress"): _S.TRYING,
    (_S.ACCEPTED, "success"): _S.SUCCESS,
    (_S.ACCEPTED, "failure"): _S.FAILED,
    (_S.ACCEPTED, "ended"): _S.FAILED,
    (_S.TRYING, "accepted"): _S.TRYING,
    (_S.TRYING, "rejected"): _S.FAILED,
    (_S.TRYING, "progress"): _S.TRYING,
    (_S.TRYING, "success"): _S.SUCCESS,
    (_S.TRYING, "failure"): _S.FAILED,
    (_S.TRYING, "ended"): _S.FAILED,
    (_S.SUCCESS, "accepted"): _S.SUCCESS,
    (_S.SUCCESS, "rejected"): _S.SUCCESS,
    (_S.SUCCESS, "ended"): _S.TERMINATED,
    (_S.FAILED, "accepted"): _S.FAILED,
    (_S.FAILED, "rejected"): _S.FAILED,
    (_S.FAILED, "ended"): _S.TERMINATED,
    (_S.TERMINATED, "accepted"): _S.TERMINATED,
    (_S.TERMINATED, "rejected"): _S.TERMINATED,
}


class ReferSubscription:
    """Tracks the implicit subscription created by one REFER we sent (RFC 3515 §2.4.4).

    ``refer_cseq`` is the REFER's CSeq number, matched against ``Event: refer;id=``.
    ``final_status`` keeps the last final sipfrag status (or the REFER's rejection code).
    """

    def __init__(self, refer_cseq: int) -> None:
        self.refer_cseq = refer_cseq
        self.state = ReferState.PENDING
        self.final_status: int | None = None
        self.last_status: int | None = None

    def _go(self, event: str) -> None:
        nxt = _TABLE.get((self.state, event))
        if nxt is None:
            raise InvalidTransition("ReferSubscription", self.state.value, event)
        self.state = nxt

    @property
    def done(self) -> bool:
        return self.state is ReferState.TERMINATED

    def on_refer_response(self, status: int) -> ReferState:
        """Feed the REFER's response; 1xx leave the state alone."""
        if status < 200:
            return self.state
        if status < 300:
            self._go("accepted")
        else:
            self.final_status = status
            self._go("rejected")
            if self.state is ReferState.FAILED:
                # A rejected REFER creates no subscription (RFC 3515 §2.4.2).
                self._go("ended")
        return self.state

    def matches(self, event: EventHeader) -> bool:
        """True when a NOTIFY's Event header is about this REFER (RFC 3515 §2.4.6)."""
        if event.package != "refer":
            return False
        return event.id is None or event.id == str(self.refer_cseq)

    def on_notify(self, event: str | None, subscription_state: str | None, body: bytes) -> int:
        """Feed a NOTIFY's raw headers and body; returns the status code to answer with.

        200 when accepted, 489 (Bad Event) for another package, 481 for another REFER's id,
        400 for a malformed body. A NOTIFY after termination is answered 481 (RFC 6665 §4.1.3).
        """
        if event is None or subscription_state is None:
            return 400
        try:
            ev = EventHeader.parse(event)
            sub = SubscriptionState.parse(subscription_state)
        except SipParseError:
            return 400
        if ev.package != "refer":
            return 489
        if not self.matches(ev) or self.done:
            return 481
        if body.strip():
            try:
                frag = SipFrag.parse(body)
            except SipParseError:
                return 400
            self.last_status = frag.status
            if self.state in (ReferState.SUCCESS, ReferState.FAILED):
                pass  # a repeated final NOTIFY adds nothing
            elif frag.status < 200:
                self._go("progress")
            elif frag.status < 300:
                self.final_status = frag.status
                self._go("success")
            else:
                self.final_status = frag.status
                self._go("failure")
        if sub.terminated:
            if self.state is ReferState.PENDING:
                self._go("accepted")
            self._go("ended")
            if self.state is ReferState.FAILED:
                self._go("ended")
        return 200

    def receive_notify(self, request: Request) -> int:
        """:meth:`on_notify` for a parsed NOTIFY request."""
        h = request.headers
        return self.on_notify(h.get("Event"), h.get("Subscription-State"), request.body)
