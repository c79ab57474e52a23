"""SIP transactions (RFC 3261 §17, with the Accepted states of RFC 6026), sans-IO.

Each transaction is driven by the caller: ``receive(msg, now)``, ``send_response(resp, now)``
(server) or ``start(now)`` (client), ``handle_timer(now)`` whenever ``get_timer()`` is due; it
queues :class:`~kefu.sip.message.Request`/``Response`` objects (``messages_to_send()``) and
events (``next_event()``). :class:`~kefu.sip.transaction_layer.TransactionLayer` owns many
of them, matches incoming messages to them (§17.1.3, §17.2.3 and the RFC 2543 fallback) and
forgets terminated ones; it is re-exported here with :class:`Outgoing`.

Invariants, for every machine below:

* the state only changes through the class's ``TABLE``; a pair missing from it raises
  :class:`~kefu.errors.InvalidTransition` (TU misuse) — peer-driven pairs that must be
  ignored (late retransmissions, stray responses) are listed as self-transitions instead;
* a timer exists only in the states the RFC runs it in; entering Terminated clears them all,
  emits exactly one :class:`Terminated` event, and nothing is ever sent afterwards;
* on reliable transports no retransmission timer (A, E, G) ever runs and the wait timers
  D, I, J, K are zero, i.e. the machine passes straight through to Terminated;
* the TU sees every request once: retransmissions are absorbed (answered with the last
  response where the RFC says so) and never surface as events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from kefu.errors import InvalidTransition
from kefu.sip.headers import MAGIC_COOKIE
from kefu.sip.message import Headers, Request, Response, make_response

if TYPE_CHECKING:
    from kefu.sip.transaction_layer import Outgoing, TransactionLayer

__all__ = [
    "MAGIC_COOKIE",
    "ClientInviteTransaction",
    "ClientNonInviteTransaction",
    "ClientTransaction",
    "Outgoing",
    "RequestReceived",
    "ResponseReceived",
    "ServerInviteTransaction",
    "ServerNonInviteTransaction",
    "ServerTransaction",
    "State",
    "Terminated",
    "Timeout",
    "TimerConfig",
    "Transaction",
    "TransactionEvent",
    "TransactionLayer",
    "TransportError",
    "make_ack",
    "make_cancel",
]


Message = Request | Response


if not TYPE_CHECKING:  # type checkers see the real imports above and keep flagging typos

    def __getattr__(name: str) -> object:
        # TransactionLayer and Outgoing moved to transaction_layer, which imports this module;
        # resolving them on first use keeps this import path working without an import cycle.
        if name in ("Outgoing", "TransactionLayer"):
            from kefu.sip import transaction_layer

            return getattr(transaction_layer, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class TimerConfig:
    """Transaction timer constants (RFC 3261 §17, Table 4 in Appendix A)."""

    t1: float = 0.5
    """RTT estimate; base of timers A, B, E, F, G, H, J and 2xx retransmission (§17.1.1.1)."""
    t2: float = 4.0
    """Cap on non-INVITE and INVITE-response retransmission intervals (§17.1.2.2)."""
    t4: float = 5.0
    """Longest time a message stays in the network; timers I and K (§17.1.2.2)."""
    d: float = 32.0
    """Timer D on unreliable transports, "at least 32 seconds" (§17.1.1.2)."""
    trying_delay: float = 0.2
    """The INVITE server sends 100 Trying if the TU has not answered this soon (§17.2.1)."""

    @property
    def timeout(self) -> float:
        """64*T1: timers B, F, H, J and RFC 6026's L and M."""
        return 64 * self.t1


class State(StrEnum):
    """Transaction states of RFC 3261 §17 figures 5-8 and RFC 6026 §7."""

    CALLING = "calling"
    TRYING = "trying"
    PROCEEDING = "proceeding"
    ACCEPTED = "accepted"
    COMPLETED = "completed"
    CONFIRMED = "confirmed"
    TERMINATED = "terminated"


def _table(spec: str) -> dict[tuple[State, str], State]:
    """Parse ``state, state: event, event -> next`` lines into a transition table."""
    table: dict[tuple[State, str], State] = {}
    for line in spec.strip().splitlines():
        lhs, nxt = line.split("->")
        states, events = lhs.split(":")
        for st in states.split(","):
            for ev in events.split(","):
                table[(State(st.strip()), ev.strip())] = State(nxt.strip())
    return table


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class ResponseReceived:
    """A response for the TU (§17.1.1.2, §17.1.2.2); 2xx retransmissions too (RFC 6026)."""

    transaction: ClientTransaction
    response: Response


@dataclass(frozen=True, slots=True, eq=False)
class RequestReceived:
    """A new request for the TU (only from :class:`~kefu.sip.transaction_layer.TransactionLayer`).

    ``transaction`` is None for an ACK that matched nothing (the ACK for a 2xx, §17.2.3 /
    §13.2.2.4, which belongs to the dialog). For a CANCEL, ``cancels`` is the INVITE server
    transaction it matches (§9.2), or None: the TU then answers 481.
    """

    transaction: ServerTransaction | None
    request: Request
    cancels: ServerInviteTransaction | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Timeout:
    """Timer B, F or H fired (§17.1.1.2, §17.1.2.2, §17.2.1); ``timer`` names it."""

    transaction: Transaction
    timer: str


@dataclass(frozen=True, slots=True, eq=False)
class TransportError:
    """The transport could not deliver a message of this transaction (§17.1.4, §17.2.4)."""

    transaction: Transaction


@dataclass(frozen=True, slots=True, eq=False)
class Terminated:
    """The transaction reached Terminated and may be forgotten."""

    transaction: Transaction


TransactionEvent = ResponseReceived | RequestReceived | Timeout | TransportError | Terminated


# --- ACK and CANCEL construction -----------------------------------------------------------


def _copy_headers(request: Request, method: str, to_value: str | None) -> Headers:
    h = request.headers
    out: list[tuple[str, str]] = [("Via", h.get_all("Via")[0]), ("Max-Forwards", "70")]
    out.append(("From", h.get("From") or ""))
    out.append(("To", to_value if to_value is not None else h.get("To") or ""))
    out.append(("Call-ID", request.call_id))
    out.append(("CSeq", f"{request.cseq.seq} {method}"))
    out.extend(("Route", r) for r in h.get_raw("Route"))
    return Headers(out)


def make_ack(invite: Request, response: Response) -> Request:
    """The ACK for a non-2xx final response, built by the transaction (§17.1.1.3).

    Same Request-URI, Call-ID, From, CSeq number and top Via as the INVITE, the To of the
    response (with its tag), and the INVITE's Route headers.
    """
    return Request("ACK", invite.uri, _copy_headers(invite, "ACK", response.headers.get("To")))


def make_cancel(request: Request) -> Request:
    """A CANCEL for a pending request: same Via branch, CSeq number and Route set (§9.1)."""
    return Request("CANCEL", request.uri, _copy_headers(request, "CANCEL", None))


# --- transactions ---------------------------------------------------------------------------


class Transaction:
    """Common machinery: transition table, timers, outbox, events."""

    NAME: ClassVar[str] = "Transaction"
    INITIAL: ClassVar[State] = State.TERMINATED
    TABLE: ClassVar[dict[tuple[State, str], State]] = {}

    def __init__(
        self,
        request: Request,
        now: float,
        *,
        reliable: bool = False,
        config: TimerConfig | None = None,
        peer: object = None,
    ) -> None:
        self.request = request
        self.reliable = reliable
        self.config = config or TimerConfig()
        self.peer = peer
        """Opaque destination/source for the transport layer (e.g. its Peer)."""
        self.created = now
        self.state = self.INITIAL
        self._timers: dict[str, float] = {}
        self._outbox: list[Message] = []
        self._events: deque[TransactionEvent] = deque()
        self._on_change: Callable[[Transaction], None] | None = None
        self._setup(now)

    def _setup(self, now: float) -> None:
        """Per-machine initialisation, run at the end of ``__init__``."""

    # -- table and timers --

    def _go(self, event: str) -> State:
        """Apply ``event``; returns the state it was applied in."""
        before = self.state
        nxt = self.TABLE.get((before, event))
        if nxt is None:
            raise InvalidTransition(self.NAME, before.value, event)
        self.state = nxt
        if nxt is State.TERMINATED:
            # Nothing leaves Terminated, so this runs once per transaction.
            self._timers.clear()
            self._events.append(Terminated(self))
        return before

    def _start_timer(self, name: str, delay: float, now: float) -> None:
        self._timers[name] = now + delay

    def _stop_timer(self, *names: str) -> None:
        for n in names:
            self._timers.pop(n, None)

    def _wait_then_terminate(self, name: str, unreliable_delay: float, now: float) -> None:
        """Timers D, I, J, K: zero on reliable transports (§17.1.1.2 ff.)."""
        if self.reliable:
            self._go(f"timer_{name}")
        else:
            self._start_timer(name, unreliable_delay, now)

    def get_timer(self) -> float | None:
        return min(self._timers.values()) if self._timers else None

    def handle_timer(self, now: float) -> None:
        while self._timers:
            name, at = min(self._timers.items(), key=lambda kv: kv[1])
            if at > now:
                break
            del self._timers[name]
            if name in ("B", "F", "H"):
                # Timeout precedes the Terminated event that the same firing causes.
                self._events.append(Timeout(self, name))
            self._fire(name, now)
        self._changed()

    def _fire(self, name: str, now: float) -> None:
        raise NotImplementedError

    def transport_error(self, now: float) -> None:
        """The transport failed to send one of our messages (§17.1.4, §17.2.4)."""
        if self.state is State.TERMINATED:
            return
        self._events.append(TransportError(self))
        self._go("transport_error")
        self._changed()

    # -- outputs --

    def _send(self, msg: Message) -> None:
        self._outbox.append(msg)

    def messages_to_send(self) -> list[Message]:
        out, self._outbox = self._outbox, []
        return out

    def next_event(self) -> TransactionEvent | None:
        return self._events.popleft() if self._events else None

    @property
    def terminated(self) -> bool:
        return self.state is State.TERMINATED

    def set_on_change(self, callback: Callable[[Transaction], None] | None) -> None:
        """Have ``callback(self)`` run after every input (the layer collects outputs then)."""
        self._on_change = callback

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    def __repr__(self) -> str:
        branch = self.request.top_via.branch or ""
        return f"<{self.NAME} {self.request.method} {branch} {self.state.value}>"


class ClientTransaction(Transaction):
    """Base of the two client machines; ``start(now)`` sends the request."""

    RETRANSMIT: ClassVar[str] = "A"
    TIMEOUT: ClassVar[str] = "B"

    def _setup(self, now: float) -> None:
        self._interval = self.config.t1
        self._started = False

    def start(self, now: float) -> None:
        """Send the request and arm the retransmit (UDP only) and timeout timers."""
        if self._started:
            raise InvalidTransition(self.NAME, self.state.value, "start")
        self._started = True
        self._send(self.request)
        if not self.reliable:
            self._start_timer(self.RETRANSMIT, self._interval, now)
        self._start_timer(self.TIMEOUT, self.config.timeout, now)
        self._changed()

    def receive(self, response: Response, now: float) -> None:
        raise NotImplementedError


class ServerTransaction(Transaction):
    """Base of the two server machines; created by an incoming request."""

    last_response: Response | None = None

    def receive(self, request: Request, now: float) -> None:
        raise NotImplementedError

    def send_response(self, response: Response, now: float) -> None:
        raise NotImplementedError


class ClientInviteTransaction(ClientTransaction):
    """RFC 3261 §17.1.1, figure 5, with RFC 6026's Accepted state (Timer M)."""

    NAME = "ClientInviteTransaction"
    INITIAL = State.CALLING
    TABLE = _table(
        """
        calling: timer_A -> calling
        calling: timer_B -> terminated
        calling, proceeding: 1xx -> proceeding
        calling, proceeding: 2xx -> accepted
        calling, proceeding: 3xx-6xx -> completed
        accepted: 1xx, 2xx, 3xx-6xx -> accepted
        accepted: timer_M -> terminated
        completed: 1xx, 2xx, 3xx-6xx -> completed
        completed: timer_D -> terminated
        calling, proceeding, accepted, completed: transport_error -> terminated
        """
    )

    _ack: Request | None = None

    def receive(self, response: Response, now: float) -> None:
        status = response.status
        kind = "1xx" if status < 200 else "2xx" if status < 300 else "3xx-6xx"
        before = self.state
        if before is State.TERMINATED:
            return
        self._go(kind)
        if before in (State.CALLING, State.PROCEEDING):
            self._stop_timer("A", "B")
            self._events.append(ResponseReceived(self, response))
            if kind == "2xx":
                self._start_timer("M", self.config.timeout, now)
            elif kind == "3xx-6xx":
                self._ack = make_ack(self.request, response)
                self._send(self._ack)
                self._wait_then_terminate("D", max(self.config.d, 0.0), now)
        elif before is State.ACCEPTED and kind == "2xx":
            # The 2xx retransmission must reach the TU, which re-sends its ACK (RFC 6026 §8.4).
            self._events.append(ResponseReceived(self, response))
        elif before is State.COMPLETED and kind == "3xx-6xx" and self._ack is not None:
            self._send(self._ack)
        self._changed()

    def _fire(self, name: str, now: float) -> None:
        self._go(f"timer_{name}")
        if name == "A":
            self._send(self.request)
            self._interval *= 2  # INVITE keeps doubling; Timer B bounds it (§17.1.1.2)
            self._start_timer("A", self._interval, now)


class ClientNonInviteTransaction(ClientTransaction):
    """RFC 3261 §17.1.2, figure 6."""

    NAME = "ClientNonInviteTransaction"
    INITIAL = State.TRYING
    RETRANSMIT = "E"
    TIMEOUT = "F"
    TABLE = _table(
        """
        trying: timer_E -> trying
        proceeding: timer_E -> proceeding
        trying, proceeding: timer_F -> terminated
        trying, proceeding: 1xx -> proceeding
        trying, proceeding: final -> completed
        completed: 1xx, final -> completed
        completed: timer_K -> terminated
        trying, proceeding, completed: transport_error -> terminated
        """
    )

    def receive(self, response: Response, now: float) -> None:
        if self.state is State.TERMINATED:
            return
        kind = "1xx" if response.status < 200 else "final"
        before = self._go(kind)
        if before is not State.COMPLETED:
            self._events.append(ResponseReceived(self, response))
            if kind == "final":
                self._stop_timer("E", "F")
                self._wait_then_terminate("K", self.config.t4, now)
        self._changed()

    def _fire(self, name: str, now: float) -> None:
        before = self._go(f"timer_{name}")
        if name == "E":
            self._send(self.request)
            # Proceeding retransmits every T2; Trying doubles up to T2 (§17.1.2.2).
            nxt = self.config.t2 if before is State.PROCEEDING else 2 * self._interval
            self._interval = min(nxt, self.config.t2)
            self._start_timer("E", self._interval, now)


class ServerInviteTransaction(ServerTransaction):
    """RFC 3261 §17.2.1, figure 7, with RFC 6026's Accepted state (Timer L)."""

    NAME = "ServerInviteTransaction"
    INITIAL = State.PROCEEDING
    TABLE = _table(
        """
        proceeding: request, ack, timer_trying, send_1xx -> proceeding
        proceeding: send_2xx -> accepted
        proceeding: send_3xx-6xx -> completed
        accepted: request, ack, send_2xx -> accepted
        accepted: timer_L -> terminated
        completed: request, timer_G -> completed
        completed: timer_H -> terminated
        completed: ack -> confirmed
        confirmed: request, ack -> confirmed
        confirmed: timer_I -> terminated
        proceeding, accepted, completed, confirmed: transport_error -> terminated
        """
    )

    def _setup(self, now: float) -> None:
        self._interval_g = self.config.t1
        self._start_timer("trying", self.config.trying_delay, now)

    @property
    def response_to_tag(self) -> str | None:
        """To tag of our last response, used to match a 2543-style ACK (§17.2.3)."""
        return self.last_response.to.tag if self.last_response is not None else None

    def receive(self, request: Request, now: float) -> None:
        if self.state is State.TERMINATED:
            return
        if request.method == "ACK":
            before = self._go("ack")
            if before is State.COMPLETED:
                self._stop_timer("G", "H")
                self._wait_then_terminate("I", self.config.t4, now)
            elif before is State.ACCEPTED:
                # Only a 2543-style ACK for our 2xx lands here; it is the TU's (RFC 6026 §7.1).
                self._events.append(RequestReceived(None, request))
        else:
            before = self._go("request")
            if before is State.PROCEEDING:
                if self.last_response is None:
                    self._send_trying()
                else:
                    self._send(self.last_response)
            elif before is State.COMPLETED and self.last_response is not None:
                self._send(self.last_response)
            # Accepted absorbs retransmissions: the TU re-sends the 2xx itself (RFC 6026 §7.1).
        self._changed()

    def _send_trying(self) -> None:
        self._stop_timer("trying")
        self.last_response = make_response(self.request, 100)
        self._send(self.last_response)

    def send_response(self, response: Response, now: float) -> None:
        status = response.status
        kind = "send_1xx" if status < 200 else "send_2xx" if status < 300 else "send_3xx-6xx"
        before = self._go(kind)
        self._stop_timer("trying")
        self.last_response = response
        self._send(response)
        if before is State.PROCEEDING and kind == "send_2xx":
            self._start_timer("L", self.config.timeout, now)
        elif kind == "send_3xx-6xx":
            if not self.reliable:
                self._start_timer("G", self._interval_g, now)
            self._start_timer("H", self.config.timeout, now)
        self._changed()

    def _fire(self, name: str, now: float) -> None:
        self._go(f"timer_{name}")
        if name == "trying":
            self._send_trying()
        elif name == "G" and self.last_response is not None:
            self._send(self.last_response)
            self._interval_g = min(2 * self._interval_g, self.config.t2)
            self._start_timer("G", self._interval_g, now)


class ServerNonInviteTransaction(ServerTransaction):
    """RFC 3261 §17.2.2, figure 8."""

    NAME = "ServerNonInviteTransaction"
    INITIAL = State.TRYING
    TABLE = _table(
        """
        trying: request -> trying
        trying, proceeding: send_1xx -> proceeding
        trying, proceeding: send_final -> completed
        proceeding: request -> proceeding
        completed: request -> completed
        completed: timer_J -> terminated
        trying, proceeding, completed: transport_error -> terminated
        """
    )

    def receive(self, request: Request, now: float) -> None:
        if self.state is State.TERMINATED:
            return
        self._go("request")
        # Trying discards retransmissions; later states repeat the last response (§17.2.2).
        if self.last_response is not None:
            self._send(self.last_response)
        self._changed()

    def send_response(self, response: Response, now: float) -> None:
        kind = "send_1xx" if response.status < 200 else "send_final"
        self._go(kind)
        self.last_response = response
        self._send(response)
        if kind == "send_final":
            self._wait_then_terminate("J", self.config.timeout, now)
        self._changed()

    def _fire(self, name: str, now: float) -> None:
        self._go(f"timer_{name}")
