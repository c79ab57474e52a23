"""Handing a call a human holds to another agent (the workbench's "transfer to an agent").

A phone call or a web call (``room:<id>``) that an agent has taken over can be passed to a
colleague without going back to the AI: the call stays ``human_active``, its ``owner`` becomes
the colleague, and ``call.assigned`` tells every workbench. The colleague then takes it over
(a takeover by the owner of a ``human_active`` call is accepted and changes nothing) and joins
its room; the agent who passed it leaves. Should the colleague never come, the agent-presence
grace gives the call back to the AI as when an agent vanishes (:mod:`.agent_presence`).

Only the agent holding the call, or a supervisor, may pass it on — or hand it back, transfer
it or hang it up (:func:`require_holder`).
"""

from __future__ import annotations

import time
from typing import Protocol

from kefu.errors import CallStateConflict
from kefu.mediaserver.call_state import CallState
from kefu.mediaserver.events import CallAssigned

MAX_AGENT_NAME = 128


class HeldCall(Protocol):
    @property
    def id(self) -> str: ...

    state: CallState
    owner: str | None


def assign(call: HeldCall, by: str, to: str, *, supervisor: bool = False) -> CallAssigned:
    """Make ``to`` the owner of ``call``; returns the event to publish.

    ValueError for an empty or oversized name; CallStateConflict unless a human holds the
    call and ``by`` is that human (or a supervisor). Nothing changes on an error.
    """
    to = to.strip()
    if not to or len(to) > MAX_AGENT_NAME or not to.isprintable():
        raise ValueError(f"an agent's name is 1-{MAX_AGENT_NAME} printable characters")
    if call.state is not CallState.HUMAN_ACTIVE:
        raise CallStateConflict(call.id, call.state.value, "transfer to an agent", owner=call.owner)
    if call.owner != by and not supervisor:
        raise CallStateConflict(
            call.id, call.state.value, "transfer another agent's call", owner=call.owner
        )
    previous = call.owner or by
    call.owner = to
    return CallAssigned(call.id, time.time(), previous, to, by)


def holds(call: HeldCall, who: str) -> bool:
    """``who`` already holds ``call`` (their takeover is accepted and changes nothing)."""
    return call.state is CallState.HUMAN_ACTIVE and call.owner == who


def require_holder(call: HeldCall, who: str, action: str, *, supervisor: bool) -> None:
    """Only the human holding a call (or a supervisor) acts on it while they hold it: hand
    back, transfer, hang up. CallStateConflict naming the holder otherwise; a call the AI has
    is anyone's."""
    if call.owner is not None and call.owner != who and not supervisor:
        raise CallStateConflict(
            call.id, call.state.value, f"{action} a call {call.owner} holds", owner=call.owner
        )
