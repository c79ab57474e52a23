"""The end-of-turn cue: words and final pitch -> complete / statement / open / unsure."""

from __future__ import annotations

import numpy as np
import pytest

from kefu.ai_bridge.emotion.prosody import final_pitch_movement
from kefu.ai_bridge.listen.turn_end import TurnCue, judge_turn

RATE = 16000


def glide(seconds: float, f0_start: float, f0_end: float, *, tail_s: float = 0.4) -> np.ndarray:
    """A voiced, speech-like harmonic tone at ``f0_start`` whose last ``tail_s`` glides to
    ``f0_end`` (a final fall or rise)."""
    n, tail = int(seconds * RATE), int(tail_s * RATE)
    f0 = np.full(n, f0_start)
    f0[n - tail :] = np.linspace(f0_start, f0_end, tail)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    wave = sum(np.sin(k * phase) / k for k in range(1, 6))
    return (wave / np.max(np.abs(wave)) * 12000).astype(np.int16)


@pytest.mark.parametrize(
    ("text", "cue"),
    [
        # mid-sentence: a filler, a word no sentence ends on, a trailing mark, a number read out
        ("I was hoping to, um", TurnCue.OPEN),
        ("So I wanted to ask about", TurnCue.OPEN),
        ("Can you check the status of my", TurnCue.OPEN),
        ("I need to return the jacket,", TurnCue.OPEN),
        ("I'm calling because...", TurnCue.OPEN),
        ("My order number is 4 7 1", TurnCue.OPEN),
        ("the reference is seven two nine", TurnCue.OPEN),
        ("I wanted to speak with", TurnCue.OPEN),
        ("The tracking number is a B7.", TurnCue.OPEN),
        ("It's 555", TurnCue.OPEN),
        ("Could I split the bill between?", TurnCue.OPEN),
        ("I bought 2.", TurnCue.STATEMENT),  # a quantity, not a number read out
        ("I'd like to order the red one.", TurnCue.STATEMENT),
        ("Thank you.", TurnCue.STATEMENT),
        ("I'll call you back tomorrow, thank you.", TurnCue.STATEMENT),
        # finished: questions (a stranded preposition is fine with a question mark), answers
        ("Where is my parcel?", TurnCue.COMPLETE),
        ("What is this charge for?", TurnCue.COMPLETE),
        ("Yes.", TurnCue.STATEMENT),
        ("no thanks", TurnCue.STATEMENT),
        ("I wanted to ask about that.", TurnCue.STATEMENT),
        # no full stop, or too short to call: the plain wait
        ("I bought a pair of shoes last week", TurnCue.UNSURE),
        ("Shoes.", TurnCue.UNSURE),
        ("", TurnCue.UNSURE),
        # Mandarin: a question is complete, a trailing continuation word is open
        ("我的订单到哪里了？", TurnCue.COMPLETE),
        ("我想问一下关于", TurnCue.OPEN),
        ("我想查一下订单，", TurnCue.OPEN),
        ("我想退货，但是", TurnCue.OPEN),
        # ...a number being read out is open, a number said as a quantity is not
        ("我的订单号是", TurnCue.OPEN),
        ("手机号是139，0218", TurnCue.OPEN),
        ("手机号一三九，零二一八", TurnCue.OPEN),
        ("我身份证后四位是", TurnCue.OPEN),
        ("我想改一下手机号。", TurnCue.UNSURE),  # a cue word at the end, no number after it
        ("一共120块。", TurnCue.UNSURE),
        # ...a short answer is a statement
        ("好的", TurnCue.STATEMENT),
        ("行，谢谢你。", TurnCue.STATEMENT),
        ("谢谢啊", TurnCue.STATEMENT),
        # ...a longer one keeps the plain wait: a question may follow a scene set, and Whisper
        # writes a full stop for the comma between them
        ("我退货好几天了。", TurnCue.UNSURE),
        ("我的快递还没到。", TurnCue.UNSURE),
        ("我是昨天买的", TurnCue.UNSURE),
        ("帮我查一下", TurnCue.UNSURE),
    ],
)
def test_words_alone(text: str, cue: TurnCue) -> None:
    assert judge_turn(text).cue is cue, judge_turn(text)


def test_a_statement_with_a_full_stop_is_a_statement_without_pitch() -> None:
    verdict = judge_turn("I'd like to cancel my subscription.")
    assert verdict.cue is TurnCue.STATEMENT and verdict.pitch_st is None


def test_final_pitch_movement_reads_a_fall_and_a_rise() -> None:
    fall = final_pitch_movement(glide(1.5, 160, 115))
    rise = final_pitch_movement(glide(1.5, 160, 220))
    level = final_pitch_movement(glide(1.5, 160, 160))
    assert fall is not None and fall < -3.0
    assert rise is not None and rise > 3.0
    assert level is not None and abs(level) < 0.5
    assert final_pitch_movement(np.zeros(RATE, np.int16)) is None  # no voicing: no claim


def test_a_rising_pitch_vetoes_a_statement_and_a_fall_promotes_nothing() -> None:
    text = "The parcel never arrived."
    # pieces of a sentence fall as far as finished ones (piper: -2.4 st both): no promotion
    assert judge_turn(text, glide(1.5, 160, 115)).cue is TurnCue.STATEMENT
    assert judge_turn(text, glide(1.5, 160, 160)).cue is TurnCue.STATEMENT
    assert judge_turn(text, glide(1.5, 160, 220)).cue is TurnCue.UNSURE
    # a rising "yes" may be a question back: not cut short
    assert judge_turn("yes", glide(1.0, 160, 220)).cue is TurnCue.UNSURE
    # words that are open stay open whatever the voice does
    assert judge_turn("I need the", glide(1.5, 160, 115)).cue is TurnCue.OPEN
