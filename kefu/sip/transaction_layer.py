"""The transaction layer (RFC 3261 §17): many transactions of one user agent, sans-IO.

:class:`TransactionLayer` creates client transactions for outgoing requests and server
transactions for new incoming ones, matches incoming messages to them (§17.1.3, §17.2.3 and
the RFC 2543 fallback), keeps one timer heap for all of them, gathers their outputs as
:class:`Outgoing` messages and events, and forgets terminated ones. The machines themselves
live in :mod:`kefu.sip.transaction`, which re-exports both names defined here.

Invariants: a transaction is reachable from the key tables exactly while it is not
Terminated; every message and event a transaction produces is moved here after the input
that caused it (through its on-change callback); the heap may hold stale entries, but
``get_timer()`` only reports a transaction's current earliest timer.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

from kefu.errors import InvalidTransition
from kefu.sip.message import Request, Response
from kefu.sip.transaction import (
    ClientInviteTransaction,
    ClientNonInviteTransaction,
    ClientTransaction,
    RequestReceived,
    ServerInviteTransaction,
    ServerNonInviteTransaction,
    ServerTransaction,
    TimerConfig,
    Transaction,
    TransactionEvent,
)

__all__ = ["Outgoing", "TransactionLayer"]

Message = Request | Response


# --- header access ------------------------------------------------------------------------


def _sent_by(msg: Message) -> str:
    host, port = msg.top_via.sent_by
    return f"{host.lower()}:{port}"


def _branch(msg: Message) -> str:
    return msg.top_via.branch or ""


# --- the layer ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Outgoing:
    """A message to serialise and send to ``peer`` (the transaction's opaque address)."""

    message: Message
    peer: object
    transaction: Transaction


_Key = tuple[str, ...]


def _server_key(req: Request, method: str) -> _Key:
    """§17.2.3 key; ``method`` is INVITE for an ACK or a CANCEL looking for its INVITE."""
    via = req.top_via
    if via.has_rfc3261_branch:
        return ("3261", via.branch or "", _sent_by(req), method)
    # RFC 2543 peers (and RFC 4475's badbranch) have no usable branch: §17.2.3 fallback.
    return (
        "2543",
        str(req.uri),
        req.to.tag or "",
        req.from_.tag or "",
        req.call_id,
        str(req.cseq.seq),
        method,
        str(via),
    )


def _ack_2543_key(req: Request) -> _Key:
    """2543 ACK matching ignores the To tag, compared separately with our response's."""
    return ("2543ack", str(req.uri), req.from_.tag or "", req.call_id, str(req.cseq.seq))


class TransactionLayer:
    """All transactions of one user agent: matching, timers, outputs, cleanup.

    Feed it with :meth:`receive`, :meth:`send_request` and :meth:`handle_timer`; the TU
    answers through the server transaction it got in :class:`RequestReceived`. Then drain
    :meth:`messages_to_send` and :meth:`next_event`, and re-arm at :meth:`get_timer`.
    Terminated transactions are forgotten as soon as they terminate.
    """

    def __init__(self, config: TimerConfig | None = None) -> None:
        self.config = config or TimerConfig()
        self._client: dict[_Key, ClientTransaction] = {}
        self._server: dict[_Key, ServerTransaction] = {}
        self._ack_index: dict[_Key, ServerInviteTransaction] = {}
        self._keys: dict[Transaction, list[tuple[dict[_Key, Any], _Key]]] = {}
        self._heap: list[tuple[float, int, Transaction]] = []
        self._scheduled: dict[Transaction, float] = {}
        self._seq = itertools.count()
        self._events: deque[TransactionEvent] = deque()
        self._outbox: list[Outgoing] = []
        self.retransmissions_absorbed = 0
        """Requests matched to an existing server transaction (not shown to the TU)."""
        self.stray_responses = 0
        """Responses matching no client transaction, dropped (§18.1.2)."""

    def __len__(self) -> int:
        return len(self._keys)

    # -- inputs --

    def send_request(
        self, request: Request, now: float, *, reliable: bool = False, peer: object = None
    ) -> ClientTransaction:
        """Create and start a client transaction (ACK is not one: send it directly)."""
        if request.method == "ACK":
            raise InvalidTransition("TransactionLayer", "idle", "send_request(ACK)")
        cls = ClientInviteTransaction if request.method == "INVITE" else ClientNonInviteTransaction
        tx = cls(request, now, reliable=reliable, config=self.config, peer=peer)
        key = ("client", _branch(request), request.cseq.method)
        if key in self._client:
            raise InvalidTransition("TransactionLayer", "busy", f"duplicate branch {key[1]}")
        self._register(tx, [(self._client, key)])
        tx.start(now)
        return tx

    def receive(
        self, msg: Message, now: float, *, reliable: bool = False, peer: object = None
    ) -> None:
        """Route an incoming message; raises SipParseError if Via/CSeq/Call-ID are bad."""
        if isinstance(msg, Response):
            ctx = self._client.get(("client", _branch(msg), msg.cseq.method))
            if ctx is None:
                self.stray_responses += 1
                return
            ctx.receive(msg, now)
            return
        match_method = "INVITE" if msg.method == "ACK" else msg.method
        stx: ServerTransaction | None = self._server.get(_server_key(msg, match_method))
        if stx is None and msg.method == "ACK" and not msg.top_via.has_rfc3261_branch:
            itx = self._ack_index.get(_ack_2543_key(msg))
            if itx is not None and itx.response_to_tag == msg.to.tag:
                stx = itx
        if stx is not None:
            self.retransmissions_absorbed += msg.method != "ACK"
            stx.receive(msg, now)
            return
        if msg.method == "ACK":
            # An ACK for a 2xx is its own transaction-less request for the dialog (§17.2.3).
            self._events.append(RequestReceived(None, msg))
            return
        cancels: ServerInviteTransaction | None = None
        if msg.method == "CANCEL":
            target = self._server.get(_server_key(msg, "INVITE"))
            if isinstance(target, ServerInviteTransaction):
                cancels = target
        new: ServerTransaction
        keys: list[tuple[dict[_Key, Any], _Key]] = [(self._server, _server_key(msg, msg.method))]
        if msg.method == "INVITE":
            new = ServerInviteTransaction(
                msg, now, reliable=reliable, config=self.config, peer=peer
            )
            if not msg.top_via.has_rfc3261_branch:
                keys.append((self._ack_index, _ack_2543_key(msg)))
        else:
            new = ServerNonInviteTransaction(
                msg, now, reliable=reliable, config=self.config, peer=peer
            )
        self._events.append(RequestReceived(new, msg, cancels))
        self._register(new, keys)

    def transport_error(self, peer: object, now: float) -> None:
        """The transport cannot reach ``peer``: fail every transaction talking to it."""
        for tx in [t for t in self._keys if t.peer == peer]:
            tx.transport_error(now)

    def get_timer(self) -> float | None:
        heap = self._heap
        while heap:
            at, _, tx = heap[0]
            if self._scheduled.get(tx) == at:
                return at
            heapq.heappop(heap)  # superseded or forgotten
        return None

    def handle_timer(self, now: float) -> None:
        due: list[Transaction] = []
        while (at := self.get_timer()) is not None and at <= now:
            _, _, tx = heapq.heappop(self._heap)
            del self._scheduled[tx]
            due.append(tx)
        for tx in due:
            tx.handle_timer(now)

    # -- outputs --

    def messages_to_send(self) -> list[Outgoing]:
        out, self._outbox = self._outbox, []
        return out

    def next_event(self) -> TransactionEvent | None:
        return self._events.popleft() if self._events else None

    # -- bookkeeping --

    def _register(self, tx: Transaction, keys: list[tuple[dict[_Key, Any], _Key]]) -> None:
        for table, key in keys:
            table[key] = tx
        self._keys[tx] = keys
        tx.set_on_change(self._collect)
        self._collect(tx)

    def _collect(self, tx: Transaction) -> None:
        """Called by a transaction after every input: move its outputs here."""
        self._outbox.extend(Outgoing(m, tx.peer, tx) for m in tx.messages_to_send())
        while (ev := tx.next_event()) is not None:
            self._events.append(ev)
        if tx.terminated:
            for table, key in self._keys.pop(tx, []):
                if table.get(key) is tx:
                    del table[key]
            self._scheduled.pop(tx, None)
            tx.set_on_change(None)
            return
        at = tx.get_timer()
        if at is None:
            self._scheduled.pop(tx, None)
        elif self._scheduled.get(tx) != at:
            self._scheduled[tx] = at
            heapq.heappush(self._heap, (at, next(self._seq), tx))
