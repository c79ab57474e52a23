"""UnheardTurns: when an empty transcript makes the bot ask the caller to repeat."""

from __future__ import annotations

from kefu.ai_bridge.unheard import UnheardTurns


def test_empty_turns_short_ones_are_asked_about_only_in_a_row() -> None:
    turns = UnheardTurns()
    turns.started(1, 10.0)
    turns.ended(1, 10.3)  # a cough: 0.3 s of "voice"
    assert not turns.ask_again(1)
    turns.started(2, 12.0)
    turns.ended(2, 12.2)
    assert turns.ask_again(2)  # the second empty one in a row
    turns.started(3, 15.0)
    turns.ended(3, 15.2)
    turns.heard(3)  # words in between break the run
    turns.started(4, 18.0)
    turns.ended(4, 18.25)
    assert not turns.ask_again(4)
    turns.started(5, 20.0)
    turns.ended(5, 21.4)  # 1.4 s of voice and no words: a question it could not read
    assert turns.ask_again(5)
    assert not turns.ask_again(99)  # a turn it never saw counts as noise
