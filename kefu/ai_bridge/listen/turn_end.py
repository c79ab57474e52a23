"""Has the caller finished? The semantic end of turn, from what was said and how (sans-IO).

The endpointer waits ``end_silence_ms`` (450 ms) of silence before it ends a turn. While it
waits, the speculative transcript of the turn so far is ready (about 100-200 ms into the
silence), and with it this judgement, one of three cues:

* ``COMPLETE``: a question — the turn ends after ``semantic_end_silence_ms`` (200 ms).
* ``STATEMENT``: a short answer ("yes", "no thanks") or a statement that reads finished (a
  full stop, three words or more, no open last word) and whose pitch did not rise at the
  end — ``statement_end_silence_ms`` (350 ms), not 200: people pause between clauses
  ("Yeah, so basically...", "I forgot my username, can you help me find it?": 180-390 ms in
  piper's held-out questions, and 300 ms split one of them), and Whisper puts a full stop
  after a clause it heard alone.
* ``OPEN``: the caller is mid-sentence: the words end on a filler ("um"), a word that needs
  a continuation ("about", "the", "and", "my"), a trailing comma or ellipsis, or a number
  or code being read out in groups ("my order number is 4 7 1", "it's 555", "SW1A") — the
  turn waits ``open_end_silence_ms`` (1.5 s) so a hesitant caller is not cut off.
* ``UNSURE``: anything else (a statement whose pitch stayed level or rose, as in a list
  going on) keeps the plain ``end_silence_ms``.

A wrong ``COMPLETE`` cuts the caller off, a wrong ``OPEN`` makes them wait 0.75 s longer, a
wrong ``UNSURE`` costs nothing new: so ``COMPLETE`` needs the words and the voice to agree,
and ``OPEN`` only the words. The pitch measure is a weak cue: on piper's voice, fragments
that end on a comma fall as far as finished sentences (-2.4 semitones on average, the
hesitation set of ``python -m loadtest hesitation``), so a fall promotes nothing; a rise
only vetoes ``STATEMENT``. Pitch is measured on the
turn's last 3 s (:func:`kefu.ai_bridge.emotion.prosody.final_pitch_movement`), off the event
loop.

Mandarin's tones mask intonation, so Mandarin is judged on words alone (:func:`_judge_zh`): a
question (mark or particle) is complete; a trailing continuation word or comma, or a number
being read out ("我的订单号是", "手机号一三九，零二一八"), is open; a short answer ("好的",
"不用了，谢谢") is a statement; any other statement keeps the plain wait (see there why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from kefu.ai_bridge.emotion.prosody import final_pitch_movement

from .asr.partials import looks_complete

__all__ = ["TurnCue", "TurnJudgement", "judge_turn"]

SAMPLE_RATE = 16000
PITCH_WINDOW_S = 3.0
"""Only the end of a long turn matters for its final pitch."""
RISE_ST = 1.5
"""Pitch this far above the median at the end: a question, or a caller going on."""

FILLERS = frozenset("um umm uh uhh er erm hmm mm ah eh like".split())
CLOSED_CLASS = frozenset(
    (
        "a an the and or but because if than my your our their his its "
        "i we he she they i'm i'd i'll i've we're you're they're "
        "between among towards toward via per including except regarding whether"
    ).split()
)
"""Words no sentence, question or not, ends on: a caller who stops after them is pausing."""
OPEN_WORDS = frozenset(
    (
        "to of for with from about into onto by is are was were am be been can could would "
        "should will number like also plus just since until"
    ).split()
)
"""Words a statement does not end on (a question may: "what is this for?")."""
SHORT_ANSWERS = frozenset(
    (
        "yes yeah yep yup no nope nah sure okay ok alright right correct exactly thanks "
        "thank you please fine great perfect bye goodbye hello hi"
    ).split()
)
NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten double triple".split()
)
NUMBER_CUES = (
    "number", "code", "postcode", "zip", "phone", "account", "reference", "order", "tracking",
    "serial", "pin", "card",
)  # fmt: skip
ZH_OPEN = (
    "和", "跟", "与", "或", "或者", "还有", "然后", "而且", "但是", "可是", "因为", "所以",
    "如果", "就是", "那个", "这个", "的话", "嗯", "呃", "我想", "我要", "请问", "关于", "把",
)  # fmt: skip
"""What a Mandarin speaker stops after mid-sentence: conjunctions, fillers, "I want", "about".
Narrower than the words a *question* does not end on (partials._ZH_CONTINUATIONS): 的, 是, 一下,
啊, 对 end many finished Mandarin sentences ("我是昨天买的", "帮我查一下")."""
ZH_SHORT_ANSWERS = frozenset(
    (
        "好 好的 好吧 好嘞 行 对 对的 是 是的 不是 没有 没有了 没了 不用 不用了 不要 不要了 可以 "
        "谢谢 谢谢你 谢谢您 多谢 嗯嗯 知道了 明白了 没问题 算了 再见 拜拜"
    ).split()
)
"""Mandarin answers that are whole in one to four characters ("行，谢谢你": each part)."""
ZH_SOFTENERS = "啊呀哈哦嘛啦呢"
"""Particles that soften a short answer without changing it ("谢谢啊", "好的呀")."""
ZH_NUMBER_CUES = (
    "号", "号码", "单号", "订单", "手机", "电话", "尾号", "验证码", "卡号", "编号", "后四位",
    "密码", "身份证",
)  # fmt: skip
"""What a number read out in groups follows ("我的订单号是", "手机号一三九，零二一八")."""
_ZH_DIGITS = "0123456789零〇一幺二两三四五六七八九"
_ZH_CODE = _ZH_DIGITS + " ，,-"
_ZH_CUE_IS = tuple(cue + mark for cue in ZH_NUMBER_CUES for mark in ("是", "：", ":"))
_WORD = re.compile(r"[a-z0-9']+")
_CJK = re.compile(r"[\u4e00-\u9fff]")


class TurnCue(Enum):
    COMPLETE = "complete"
    STATEMENT = "statement"
    OPEN = "open"
    UNSURE = "unsure"


@dataclass(frozen=True, slots=True)
class TurnJudgement:
    cue: TurnCue
    why: str
    """What decided it: ``question``, ``short_answer``, ``statement``, ``trailing_word``,
    ``trailing_mark``, ``reading_number``, ``pitch_rise``, ``no_full_stop``, ``empty``,
    ``zh_statement``."""
    pitch_st: float | None = None
    """The final pitch movement measured (semitones), None when not measured."""


def judge_turn(text: str, audio: NDArray[np.int16] | None = None) -> TurnJudgement:
    """The cue for a turn whose words so far are ``text`` and whose audio (16 kHz) is
    ``audio`` (None: judge on words alone)."""
    stripped = text.strip()
    if not stripped:
        return TurnJudgement(TurnCue.UNSURE, "empty")
    if _CJK.search(stripped):
        return _judge_zh(stripped)
    words = _WORD.findall(stripped.lower())
    if not words:
        return TurnJudgement(TurnCue.UNSURE, "no_words")
    if stripped.endswith(("...", "…", ",", "-", "—", ";", ":")):
        return TurnJudgement(TurnCue.OPEN, "trailing_mark")
    if words[-1] in FILLERS or words[-1] in CLOSED_CLASS:
        return TurnJudgement(TurnCue.OPEN, "trailing_word")
    if _reading_number(words):
        return TurnJudgement(TurnCue.OPEN, "reading_number")
    if stripped.endswith("?") and len(words) >= 2:
        return TurnJudgement(TurnCue.COMPLETE, "question")
    if words[-1] in OPEN_WORDS:
        return TurnJudgement(TurnCue.OPEN, "trailing_word")
    if looks_complete(stripped):
        return TurnJudgement(TurnCue.COMPLETE, "question")
    pitch = _final_pitch(audio)
    short = len(words) <= 3 and all(w in SHORT_ANSWERS for w in words)
    if not short and (not stripped.endswith((".", "!")) or len(words) < 3):
        return TurnJudgement(TurnCue.UNSURE, "no_full_stop", pitch)
    if pitch is not None and pitch >= RISE_ST:
        return TurnJudgement(TurnCue.UNSURE, "pitch_rise", pitch)
    return TurnJudgement(TurnCue.STATEMENT, "short_answer" if short else "statement", pitch)


def _reading_number(words: list[str]) -> bool:
    """The words end on a number or code being read out: digits, number words or codes with
    digits ("b7", "sw1a") after a cue like "order number", or, without a cue, a run of
    digits that is no quantity (three or more digits, or several groups)."""
    tail = digits = 0
    for word in reversed(words):
        if any(c.isdigit() for c in word) or word in NUMBER_WORDS:
            tail += 1
            digits += sum(c.isdigit() for c in word) or 1
        elif len(word) == 1 and tail:  # a spelled letter inside a code: "a b 7"
            tail += 1
        else:
            break
    if tail == 0 or (tail == 1 and digits == 1 and not words[-1].isdigit()):
        return False  # one number word alone is a pronoun as often ("the red one")
    before = words[max(0, len(words) - tail - 4) : len(words) - tail]
    return any(cue in w for w in before for cue in NUMBER_CUES) or digits >= 3


def _final_pitch(audio: NDArray[np.int16] | None) -> float | None:
    if audio is None or audio.size == 0:
        return None
    return final_pitch_movement(audio[-int(PITCH_WINDOW_S * SAMPLE_RATE) :])


def _judge_zh(text: str) -> TurnJudgement:
    """Mandarin on words alone: its tones mask the final pitch. A trailing comma or
    continuation word, or a number being read out, is open; a question is complete; a short
    answer is a statement. A longer statement keeps the plain wait even when Whisper closed
    it with a full stop: Mandarin callers often set the scene before they ask ("我退货好几天
    了，| 钱什么时候能退回来？"), the pause at that comma can pass 350 ms, and Whisper then
    writes "。" where the comma was."""
    stripped = text.rstrip()
    body = stripped.rstrip("？?。！!，,、 ")
    if stripped.endswith(("，", ",", "、", "…")) or body.endswith(ZH_OPEN):
        return TurnJudgement(TurnCue.OPEN, "trailing_word")
    if _zh_reading_number(body):
        return TurnJudgement(TurnCue.OPEN, "reading_number")
    if looks_complete(text):
        return TurnJudgement(TurnCue.COMPLETE, "question")
    parts = [p.rstrip(ZH_SOFTENERS) or p for p in re.split(r"[，,。！!\s]+", body) if p]
    if parts and all(p in ZH_SHORT_ANSWERS for p in parts):
        return TurnJudgement(TurnCue.STATEMENT, "short_answer")
    return TurnJudgement(TurnCue.UNSURE, "zh_statement")


def _zh_reading_number(body: str) -> bool:
    """The words end on a number cue and 是 ("我的订单号是"), or on digits (written or said one
    by one) after a cue ("手机号一三九，零二一八"), or on three digits or more."""
    if body.endswith(_ZH_CUE_IS):
        return True
    start = len(body)
    while start and (
        body[start - 1] in _ZH_CODE or body[start - 1].isascii() and body[start - 1].isalpha()
    ):
        start -= 1
    digits = sum(c in _ZH_DIGITS for c in body[start:])
    before = body[max(0, start - 6) : start]
    return digits > 0 and (any(cue in before for cue in ZH_NUMBER_CUES) or digits >= 3)
