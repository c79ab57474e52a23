"""When a caller's turn came back with no words: ask them to say it again, or let it pass.

Whisper returns an empty transcript for noise (a cough, a door, a breath) and also for
speech it cannot trust (its no-speech and compression guards drop a doubtful decode; an
accented Mandarin question was dropped that way 3 times in 20). Answering nothing to noise
is right; answering nothing to a question leaves the caller in silence. What tells them
apart is how long the caller's voice lasted: a turn with VOICED_TURN_S of voice or more was
speech, and the bot asks for it again at once; shorter empty turns only after NOISE_EMPTIES
of them in a row (as before).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["NOISE_EMPTIES", "VOICED_TURN_S", "UnheardTurns"]

VOICED_TURN_S = 0.6
"""Voice (speech start to speech end) that makes an empty transcript a missed question:
longer than "yes", "no" or a cough, shorter than any question."""
NOISE_EMPTIES = 2
"""Short empty turns in a row after which the bot asks all the same."""
_KEPT = 16
"""Turns whose start is remembered (one call has one or two open at a time)."""


class UnheardTurns:
    """Per call: how long each turn's voice lasted, and the run of empty transcripts."""

    def __init__(self) -> None:
        self._starts: OrderedDict[int, float] = OrderedDict()
        self._voiced: OrderedDict[int, float] = OrderedDict()
        self._empties = 0

    def started(self, turn_id: int, at: float) -> None:
        """The caller's voice began (``SpeechStarted``)."""
        _bounded_put(self._starts, turn_id, at)

    def ended(self, turn_id: int, speech_end_at: float) -> None:
        """The caller's voice stopped (``EndOfTurn``)."""
        start = self._starts.pop(turn_id, None)
        if start is not None:
            _bounded_put(self._voiced, turn_id, max(0.0, speech_end_at - start))

    def heard(self, turn_id: int) -> None:
        """The turn had words: the run of empty ones is over."""
        self._voiced.pop(turn_id, None)
        self._empties = 0

    def ask_again(self, turn_id: int) -> bool:
        """The turn came back empty: True when the caller should be asked to repeat."""
        voiced = self._voiced.pop(turn_id, 0.0)
        self._empties += 1
        if voiced >= VOICED_TURN_S or self._empties >= NOISE_EMPTIES:
            self._empties = 0
            return True
        return False

    def reset(self) -> None:
        """Start counting afresh (the call was handed back to the AI)."""
        self._empties = 0


def _bounded_put(d: OrderedDict[int, float], key: int, value: float) -> None:
    d[key] = value
    while len(d) > _KEPT:
        d.popitem(last=False)
