"""Who has the floor of a call, the AI's side: barge-in and takeover, as a table.

::

    clear    ──voice_over_bot──►  held      output paused at once, nothing dropped
    held     ──sustained───────►  barged    output flushed, answer cancelled, BargeIn published
    held     ──end─────────────►  clear     the same flush, then the turn is answered
    held     ──end_short───────►  clear     a backchannel ("uh-huh"): output resumed, turn ignored
    barged   ──end, end_short──►  clear     the interrupting turn is answered normally
    clear, held, barged ──takeover──► paused   a human has the floor: AI silenced
    paused   ──handback────────►  clear     the AI listens (and answers) again
    every state but closed ──hangup──► closed

Invariants:

* at most one barge-in is open (``held`` or ``barged``), and it belongs to the one caller turn
  the endpointer has open: the inputs of that turn (``sustained``, ``end``/``end_short``)
  arrive in order on the listener's control lane, which never drops, so a turn that opened a
  barge-in always closes it;
* ``voice`` (the caller starts while the bot is silent, or barge-in is off) changes nothing;
  ``voice_over_bot`` is chosen instead by the caller of the table when the bot is busy (an
  answer in flight or audio queued) and barge-in is on;
* a caller turn can only start when none is open: ``voice``/``voice_over_bot`` in ``held`` or
  ``barged`` is illegal, and so is a second ``sustained`` for the turn that barged;
* in ``paused`` the AI neither speaks nor answers nor barges in: the listener's inputs are
  absorbed (transcripts are still published by the agent); only ``handback`` or ``hangup``
  leave it; ``takeover`` in ``paused`` and ``handback`` outside it are illegal;
* ``closed`` is final: every input there is illegal;
* a transition is applied only after its action succeeded (:meth:`FloorMachine.apply`): an
  action that raises leaves the state as it was.

Anything else raises :class:`kefu.errors.InvalidTransition`.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from kefu.errors import InvalidTransition

__all__ = [
    "TRANSITIONS",
    "Floor",
    "FloorAction",
    "FloorInput",
    "FloorMachine",
    "allowed",
    "next_step",
]


class Floor(StrEnum):
    CLEAR = "clear"
    """No barge-in open; the bot speaks (or is silent) as its answers go."""
    HELD = "held"
    """The caller spoke over the bot: output paused, kept, until the voice proves a barge-in."""
    BARGED = "barged"
    """The caller interrupted: the bot's output was flushed; their turn will be answered."""
    PAUSED = "paused"
    """A human agent took over: the AI does not speak or answer (it still transcribes)."""
    CLOSED = "closed"
    """The call hung up. Final."""


class FloorInput(StrEnum):
    VOICE = "voice"
    """A caller turn opened while the bot was silent (or barge-in is off)."""
    VOICE_OVER_BOT = "voice_over_bot"
    """A caller turn opened while the bot was busy and barge-in is on."""
    SUSTAINED = "sustained"
    """The open turn's voice lasted ``barge_in_min_ms``, strongly voiced."""
    END = "end"
    """The open turn ended, long enough not to be a backchannel."""
    END_SHORT = "end_short"
    """The open turn ended short (a backchannel)."""
    TAKEOVER = "takeover"
    """A human agent takes the call (:meth:`CallAgent.pause`)."""
    HANDBACK = "handback"
    """The human hands the call back to the AI (:meth:`CallAgent.resume`)."""
    HANGUP = "hangup"
    """The call is over (:meth:`CallAgent.close`)."""


class FloorAction(StrEnum):
    NONE = "none"
    """Nothing to do."""
    HOLD = "hold"
    """Pause the bot's output (silence goes out, nothing is dropped)."""
    BARGE_IN = "barge_in"
    """Flush the bot's output, cancel its answer, publish BargeIn."""
    BACKCHANNEL = "backchannel"
    """Resume the held output where it stopped; the turn's transcript is ignored."""
    SILENCE = "silence"
    """Flush the bot's output and cancel its answer, publishing nothing (takeover)."""
    STOP = "stop"
    """Stop everything (hang-up)."""


S, In, A = Floor, FloorInput, FloorAction

TRANSITIONS: dict[tuple[Floor, FloorInput], tuple[Floor, FloorAction]] = {
    (S.CLEAR, In.VOICE): (S.CLEAR, A.NONE),
    (S.CLEAR, In.VOICE_OVER_BOT): (S.HELD, A.HOLD),
    (S.CLEAR, In.SUSTAINED): (S.CLEAR, A.NONE),
    (S.CLEAR, In.END): (S.CLEAR, A.NONE),
    (S.CLEAR, In.END_SHORT): (S.CLEAR, A.NONE),
    (S.CLEAR, In.TAKEOVER): (S.PAUSED, A.SILENCE),
    (S.HELD, In.SUSTAINED): (S.BARGED, A.BARGE_IN),
    (S.HELD, In.END): (S.CLEAR, A.BARGE_IN),
    (S.HELD, In.END_SHORT): (S.CLEAR, A.BACKCHANNEL),
    (S.HELD, In.TAKEOVER): (S.PAUSED, A.SILENCE),
    (S.BARGED, In.END): (S.CLEAR, A.NONE),
    (S.BARGED, In.END_SHORT): (S.CLEAR, A.NONE),
    (S.BARGED, In.TAKEOVER): (S.PAUSED, A.SILENCE),
    (S.PAUSED, In.VOICE): (S.PAUSED, A.NONE),
    (S.PAUSED, In.VOICE_OVER_BOT): (S.PAUSED, A.NONE),
    (S.PAUSED, In.SUSTAINED): (S.PAUSED, A.NONE),
    (S.PAUSED, In.END): (S.PAUSED, A.NONE),
    (S.PAUSED, In.END_SHORT): (S.PAUSED, A.NONE),
    (S.PAUSED, In.HANDBACK): (S.CLEAR, A.NONE),
    **{(state, In.HANGUP): (S.CLOSED, A.STOP) for state in S if state is not S.CLOSED},
}
"""(state, input) -> (next state, action to run first); a pair not listed is illegal."""


def allowed(state: Floor, event: FloorInput) -> bool:
    """Whether the table has a transition from ``state`` on ``event``."""
    return (state, event) in TRANSITIONS


def next_step(state: Floor, event: FloorInput) -> tuple[Floor, FloorAction]:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition("floor", state.value, event.value) from None


class FloorMachine:
    """The table's current state for one call; :meth:`apply` runs an input's action."""

    def __init__(self) -> None:
        self.state = Floor.CLEAR

    def apply(self, event: FloorInput, act: Callable[[FloorAction], None]) -> FloorAction:
        """Look ``event`` up, run ``act(action)``, then move; an action that raises moves
        nothing. Returns the action that ran."""
        nxt, action = next_step(self.state, event)
        act(action)
        self.state = nxt
        return action
