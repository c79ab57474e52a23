"""SIP dialogs (RFC 3261 §12) and the UAS 2xx retransmitter (§13.3.1.4), sans-IO.

A :class:`Dialog` holds the state RFC 3261 §12 lists — id, CSeq numbers, local/remote URI,
remote target, route set — builds in-dialog requests (§12.2.1.1) and checks incoming ones
(§12.2.2). It never touches the network; the transaction layer sends what it builds.

Dialog state table (invariants):

* ``early`` → ``confirmed`` only on a 2xx to the dialog-creating INVITE (§12.1, §13.2.2.4);
* ``terminated`` is final: after a BYE (sent or received), a non-2xx final to the creating
  INVITE, or a 481/408 to an in-dialog request (§12.2.1.2). Only a repeated BYE (e.g. with
  credentials after a 401) may still be built there;
* the local CSeq only grows, by one per request other than ACK and CANCEL (§12.2.1.1); the
  remote CSeq only grows, and a request below it is rejected with 500 (§12.2.2);
* the UAS never sends BYE on an early dialog (§15).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from kefu.errors import InvalidTransition, SipParseError
from kefu.sip.headers import MAGIC_COOKIE, NameAddr, SipUri
from kefu.sip.message import Headers, Request, Response, make_response
from kefu.sip.transaction import TimerConfig

__all__ = [
    "AckTimeout",
    "Dialog",
    "DialogId",
    "DialogState",
    "OkRetransmitter",
    "TARGET_REFRESH_METHODS",
    "new_branch",
    "new_tag",
]

TARGET_REFRESH_METHODS = frozenset({"INVITE", "UPDATE", "SUBSCRIBE", "NOTIFY"})
"""Requests whose Contact replaces the remote target (§12.2, RFC 3311 §5.2, RFC 6665 §4.2)."""


def new_tag() -> str:
    """A From/To tag with enough randomness to be globally unique (§19.3: 32 bits or more)."""
    return secrets.token_hex(8)


def new_branch() -> str:
    """A Via branch for a new transaction, with the RFC 3261 magic cookie (§8.1.1.7)."""
    return MAGIC_COOKIE + secrets.token_hex(10)


@dataclass(frozen=True, slots=True)
class DialogId:
    """Dialog identifier from the local point of view (RFC 3261 §12)."""

    call_id: str
    """Call-ID shared by every message of the dialog (§12, §20.8)."""
    local_tag: str
    """Our tag: From tag for the UAC, To tag for the UAS (§12)."""
    remote_tag: str
    """The peer's tag: To tag for the UAC, From tag for the UAS (§12)."""

    @classmethod
    def for_incoming(cls, msg: Request | Response) -> DialogId:
        """The id a received request (UAS view) or response (UAC view) belongs to."""
        to_tag, from_tag = msg.to.tag or "", msg.from_.tag or ""
        if isinstance(msg, Request):
            return cls(msg.call_id, to_tag, from_tag)
        return cls(msg.call_id, from_tag, to_tag)


class DialogState(StrEnum):
    """Dialog states (RFC 3261 §12)."""

    EARLY = "early"
    CONFIRMED = "confirmed"
    TERMINATED = "terminated"


_D = DialogState
# (state, event) -> state. Events: provisional, confirm, request (build one), bye,
# terminate (failure or 481/408), refresh (2xx to a re-INVITE/UPDATE).
_TABLE: dict[tuple[DialogState, str], DialogState] = {
    (_D.EARLY, "provisional"): _D.EARLY,
    (_D.EARLY, "confirm"): _D.CONFIRMED,
    (_D.EARLY, "request"): _D.EARLY,
    (_D.EARLY, "bye"): _D.TERMINATED,
    (_D.EARLY, "terminate"): _D.TERMINATED,
    (_D.CONFIRMED, "provisional"): _D.CONFIRMED,
    (_D.CONFIRMED, "confirm"): _D.CONFIRMED,
    (_D.CONFIRMED, "request"): _D.CONFIRMED,
    (_D.CONFIRMED, "bye"): _D.TERMINATED,
    (_D.CONFIRMED, "terminate"): _D.TERMINATED,
    (_D.TERMINATED, "bye"): _D.TERMINATED,
    (_D.TERMINATED, "terminate"): _D.TERMINATED,
}


def _contact_uri(msg: Request | Response) -> SipUri | None:
    contacts = msg.contacts
    return contacts[0].uri.without_headers() if contacts else None


def _untagged(addr: NameAddr) -> str:
    return str(
        NameAddr(
            addr.uri, addr.display_name, tuple(p for p in addr.params if p[0].lower() != "tag")
        )
    )


class Dialog:
    """One dialog; construct with :meth:`from_invite` (UAS) or :meth:`from_response` (UAC)."""

    def __init__(
        self,
        *,
        id: DialogId,
        is_uac: bool,
        state: DialogState,
        local_uri: str,
        remote_uri: str,
        remote_target: SipUri,
        route_set: tuple[NameAddr, ...],
        local_contact: str,
        local_seq: int | None,
        remote_seq: int | None,
        invite_seq: int | None,
        via_sent_by: str = "kefu.invalid",
        via_transport: str = "UDP",
    ) -> None:
        self.id = id
        self.is_uac = is_uac
        self.state = state
        self.local_uri = local_uri
        """Our address without tag: From for the UAC, To for the UAS (§12.1.1, §12.1.2)."""
        self.remote_uri = remote_uri
        self.remote_target = remote_target
        """Where in-dialog requests go: the peer's latest Contact (§12.1, §12.2.1.2)."""
        self.route_set = route_set
        """Record-Route, reversed for the UAC, as received for the UAS (§12.1.1, §12.1.2)."""
        self.local_contact = local_contact
        self.local_seq = local_seq
        self.remote_seq = remote_seq
        self.invite_seq = invite_seq
        """CSeq number of the latest INVITE; its ACK reuses it (§13.2.2.4)."""
        self.via_sent_by = via_sent_by
        self.via_transport = via_transport

    def __repr__(self) -> str:
        return f"<Dialog {self.id.call_id} {self.state.value} uac={self.is_uac}>"

    # -- creation --

    @classmethod
    def from_invite(
        cls,
        invite: Request,
        local_tag: str,
        local_contact: str,
        *,
        initial_seq: int | None = None,
        via_sent_by: str = "kefu.invalid",
        via_transport: str = "UDP",
    ) -> Dialog:
        """UAS side, when we answer ``invite`` with a tagged 1xx or a 2xx (§12.1.1)."""
        target = _contact_uri(invite)
        if target is None:
            raise SipParseError("INVITE without Contact cannot create a dialog", header="Contact")
        if invite.from_.tag is None:
            raise SipParseError("INVITE without From tag", header="From")
        routes = tuple(NameAddr.parse(v) for v in invite.headers.get_all("Record-Route"))
        return cls(
            id=DialogId(invite.call_id, local_tag, invite.from_.tag),
            is_uac=False,
            state=DialogState.EARLY,
            local_uri=_untagged(invite.to),
            remote_uri=_untagged(invite.from_),
            remote_target=target,
            route_set=routes,
            local_contact=local_contact,
            local_seq=initial_seq,
            remote_seq=invite.cseq.seq,
            invite_seq=None,
            via_sent_by=via_sent_by,
            via_transport=via_transport,
        )

    @classmethod
    def from_response(
        cls,
        invite: Request,
        response: Response,
        *,
        via_sent_by: str | None = None,
        via_transport: str | None = None,
    ) -> Dialog:
        """UAC side, from a tagged 1xx or 2xx to our ``invite`` (§12.1.2)."""
        to_tag = response.to.tag
        if to_tag is None:
            raise SipParseError("response without To tag cannot create a dialog", header="To")
        if not 101 <= response.status < 300:
            raise InvalidTransition("Dialog", "none", f"create on {response.status}")
        target = _contact_uri(response)
        if target is None:
            # Tolerated in a 1xx (the 2xx will bring it); the Request-URI is the best guess.
            target = invite.uri
        routes = tuple(NameAddr.parse(v) for v in response.headers.get_all("Record-Route"))
        top = invite.top_via
        return cls(
            id=DialogId(invite.call_id, invite.from_.tag or "", to_tag),
            is_uac=True,
            state=DialogState.CONFIRMED if response.status >= 200 else DialogState.EARLY,
            local_uri=_untagged(invite.from_),
            remote_uri=_untagged(invite.to),
            remote_target=target,
            route_set=tuple(reversed(routes)),
            local_contact=invite.headers.get("Contact") or "",
            local_seq=invite.cseq.seq,
            remote_seq=None,
            invite_seq=invite.cseq.seq,
            via_sent_by=via_sent_by or f"{top.host}" + (f":{top.port}" if top.port else ""),
            via_transport=via_transport or top.transport,
        )

    # -- state --

    def _go(self, event: str) -> DialogState:
        before = self.state
        nxt = _TABLE.get((before, event))
        if nxt is None:
            raise InvalidTransition("Dialog", before.value, event)
        self.state = nxt
        return before

    def confirm(self) -> None:
        """UAS: we sent a 2xx to the dialog-creating INVITE (§12.1.1)."""
        self._go("confirm")

    def terminate(self) -> None:
        """The dialog is over (final failure, 481/408, or a local decision)."""
        self._go("terminate")

    @property
    def terminated(self) -> bool:
        return self.state is DialogState.TERMINATED

    # -- outgoing --

    def create_request(
        self,
        method: str,
        *,
        body: bytes = b"",
        content_type: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        branch: str | None = None,
    ) -> Request:
        """Build an in-dialog request (§12.2.1.1); ACK reuses the INVITE's CSeq number."""
        if method == "CANCEL":
            raise InvalidTransition("Dialog", self.state.value, "create_request(CANCEL)")
        if method == "BYE":
            if not self.is_uac and self.state is DialogState.EARLY:
                raise InvalidTransition("Dialog", self.state.value, "UAS BYE")  # §15
            self._go("bye")
        else:
            self._go("request")
        if method == "ACK":
            if self.invite_seq is None:
                raise InvalidTransition("Dialog", self.state.value, "ACK without INVITE")
            seq = self.invite_seq
        else:
            seq = (self.local_seq or 0) + 1
            self.local_seq = seq
            if method == "INVITE":
                self.invite_seq = seq
        uri, routes = self._request_target()
        h: list[tuple[str, str]] = [
            (
                "Via",
                f"SIP/2.0/{self.via_transport} {self.via_sent_by};branch={branch or new_branch()}",
            ),
            ("Max-Forwards", "70"),
        ]
        h += [("Route", r) for r in routes]
        h += [
            ("From", f"{self.local_uri};tag={self.id.local_tag}"),
            ("To", f"{self.remote_uri};tag={self.id.remote_tag}"),
            ("Call-ID", self.id.call_id),
            ("CSeq", f"{seq} {method}"),
        ]
        if method in TARGET_REFRESH_METHODS or method == "REFER":
            h.append(("Contact", self.local_contact))
        h += list(headers)
        if body and content_type is not None:
            h.append(("Content-Type", content_type))
        return Request(method, uri, Headers(h), body)

    def _request_target(self) -> tuple[SipUri, list[str]]:
        """Request-URI and Route values per §12.2.1.1, including strict routers (§16.12)."""
        if not self.route_set:
            return self.remote_target, []
        first = self.route_set[0]
        if first.uri.lr:
            return self.remote_target, [str(r) for r in self.route_set]
        # Strict router: it becomes the Request-URI and the remote target rides last.
        uri = first.uri.without_headers()
        routes = [str(r) for r in self.route_set[1:]] + [f"<{self.remote_target}>"]
        return uri, routes

    def make_response(
        self,
        request: Request,
        status: int,
        reason: str | None = None,
        *,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        content_type: str | None = None,
    ) -> Response:
        """UAS: a response in this dialog, with our tag, Record-Route and Contact (§12.1.1)."""
        extra: list[tuple[str, str]] = []
        if 100 < status < 300:
            extra += [("Record-Route", rr) for rr in request.headers.get_raw("Record-Route")]
            if request.method in TARGET_REFRESH_METHODS or request.method == "REFER":
                extra.append(("Contact", self.local_contact))
        extra += list(headers)
        if body and content_type is not None:
            extra.append(("Content-Type", content_type))
        tag = self.id.local_tag if status > 100 else None
        return make_response(request, status, reason, to_tag=tag, headers=extra, body=body)

    # -- incoming --

    def receive_request(self, request: Request) -> int | None:
        """Check an in-dialog request (§12.2.2); None to accept, else the status to answer."""
        if DialogId.for_incoming(request) != self.id:
            return 481
        if self.terminated and request.method not in ("ACK", "BYE"):
            return 481
        seq = request.cseq.seq
        if request.method not in ("ACK", "CANCEL"):
            if self.remote_seq is not None and seq < self.remote_seq:
                return 500
            self.remote_seq = seq
        if request.method in TARGET_REFRESH_METHODS:
            target = _contact_uri(request)
            if target is not None:
                self.remote_target = target
        if request.method == "BYE":
            self._go("bye")
        return None

    def receive_response(self, method: str, response: Response) -> None:
        """UAC: a response to our request ``method`` in this dialog (§12.1.2, §12.2.1.2)."""
        status = response.status
        if status in (408, 481):
            # The peer lost the dialog or never got our request: §12.2.1.2 ends it.
            self._go("terminate")
            return
        if method != "INVITE" and method != "UPDATE":
            return
        if status < 200:
            self._go("provisional")
            return
        if status >= 300:
            if method == "INVITE" and self.state is DialogState.EARLY:
                self._go("terminate")
            return
        target = _contact_uri(response)
        if target is not None:
            self.remote_target = target
        if self.state is DialogState.EARLY and method == "INVITE":
            # The 2xx decides the route set of a dialog that started early (§13.2.2.4).
            routes = (NameAddr.parse(v) for v in response.headers.get_all("Record-Route"))
            self.route_set = tuple(reversed(tuple(routes)))
        if self.state is not DialogState.TERMINATED:
            self._go("confirm")


# --- §13.3.1.4: the UAS core retransmits its 2xx until the ACK ------------------------------


@dataclass(frozen=True, slots=True)
class AckTimeout:
    """No ACK within 64*T1 of the 2xx: the UAS should send BYE (§13.3.1.4)."""

    response: Response
    """The 2xx that was never acknowledged."""


class OkRetransmitter:
    """Re-sends a 2xx at T1, 2T1, ... capped at T2 until :meth:`ack_received` or 64*T1.

    Runs on every transport: the 2xx retransmission is end to end, not hop by hop
    (§13.3.1.4). The queued responses should go out through the INVITE server transaction,
    whose Accepted state passes them on (RFC 6026 §7.1).
    """

    def __init__(self, response: Response, now: float, config: TimerConfig | None = None) -> None:
        self.response = response
        self.config = config or TimerConfig()
        self._interval = self.config.t1
        self._next: float | None = now + self._interval
        self._give_up = now + self.config.timeout
        self._outbox: list[Response] = []
        self._events: deque[AckTimeout] = deque()
        self.retransmissions = 0

    @property
    def done(self) -> bool:
        return self._next is None

    def ack_received(self) -> None:
        self._next = None

    def get_timer(self) -> float | None:
        return None if self._next is None else min(self._next, self._give_up)

    def handle_timer(self, now: float) -> None:
        while self._next is not None and min(self._next, self._give_up) <= now:
            if self._give_up <= self._next:
                self._next = None
                self._events.append(AckTimeout(self.response))
                return
            self._outbox.append(self.response)
            self.retransmissions += 1
            self._interval = min(2 * self._interval, self.config.t2)
            self._next += self._interval

    def messages_to_send(self) -> list[Response]:
        out, self._outbox = self._outbox, []
        return out

    def next_event(self) -> AckTimeout | None:
        return self._events.popleft() if self._events else None
