"""Pocketsphinx partial hypotheses: cheap, early, inaccurate (WER ~35 %).

Used for barge-in cues (words, not just energy, while the bot talks) and for the semantic
end-of-turn hook; never as the transcript. ~3 ms of CPU per 20 ms of audio, so run ``feed``
in an executor when many calls share a core.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import structlog
from numpy.typing import NDArray

__all__ = ["PocketsphinxPartials", "looks_complete"]

log = structlog.get_logger(__name__)

# Words after which a sentence is almost never finished: a pause after them is a hesitation.
_CONTINUATIONS = frozenset(
    "a an the and or but so because to of for with my your in on at is are was were "
    "i um uh er if that which than then like about from".split()
)
_QUESTION_START = frozenset(
    "what where when why how who which can could would will do does did is are am "
    "should may have has".split()
)


# Mandarin: what a finished question ends on, and what a speaker pauses after mid-sentence.
_ZH_QUESTION_PARTICLES = ("吗", "呢", "么", "吧")
_ZH_CONTINUATIONS = (
    "和", "跟", "与", "或", "或者", "还有", "然后", "而且", "但是", "可是", "因为", "所以",
    "如果", "就是", "那个", "这个", "的话", "一下", "嗯", "呃", "啊", "那", "就", "是",
    "我想", "我要", "请问", "关于", "的", "在", "把", "给", "对",
)  # fmt: skip
_CJK = re.compile(r"[\u4e00-\u9fff]")


def _looks_complete_zh(text: str) -> bool:
    """A Mandarin question is complete when it ends with a question mark or a question
    particle (吗, 呢...) after at least four characters, and not on a word people pause after."""
    body = text.rstrip("？?。！!，,、 ")
    hanzi = _CJK.findall(body)
    if len(hanzi) < 4 or body.endswith(_ZH_CONTINUATIONS):
        return False
    return text.rstrip().endswith(("？", "?")) or body.endswith(_ZH_QUESTION_PARTICLES)


def looks_complete(text: str) -> bool:
    """Heuristic semantic hook: does this (partial or final) text end a request?

    True for punctuated sentences (Whisper) or questions of 4+ words that do not end on a
    continuation word (pocketsphinx gives no punctuation); in Mandarin, questions ending in
    a question mark or particle (see :func:`_looks_complete_zh`). Conservative: a wrong True
    cuts the caller off, a wrong False only costs the normal end-of-silence wait.
    """
    stripped = text.strip()
    if not stripped:
        return False
    if _CJK.search(stripped):
        return _looks_complete_zh(stripped)
    words = re.findall(r"[a-z']+", stripped.lower())
    if not words or words[-1] in _CONTINUATIONS:
        return False
    if stripped.endswith("?"):
        return True
    return len(words) >= 4 and words[0] in _QUESTION_START and stripped[-1].isalpha()


class PocketsphinxPartials:
    """Incremental recognizer over pocketsphinx's bundled en-us model (16 kHz int16)."""

    def __init__(self) -> None:
        self.ready = False
        self.error: str | None = None
        self._decoder: Any = None
        self._in_utt = False
        self._last: str | None = None
        try:
            from pocketsphinx import Decoder

            self._decoder = Decoder(loglevel="FATAL", samprate=16000)
            self.ready = True
        except Exception as exc:  # partials are optional; the agent works without them
            self.error = f"pocketsphinx failed to load: {exc}"
            log.error("partials_load_failed", error=self.error)

    def feed(self, pcm16k: NDArray[np.int16]) -> str | None:
        """Consume audio; return the hypothesis when it changed since the last call."""
        if self._decoder is None or pcm16k.size == 0:
            return None
        if not self._in_utt:
            self._decoder.start_utt()
            self._in_utt = True
        data = np.ascontiguousarray(pcm16k, dtype="<i2").tobytes()
        self._decoder.process_raw(data, False, False)
        hyp = self._decoder.hyp()
        text = hyp.hypstr.strip() if hyp is not None else ""
        if not text or text == self._last:
            return None
        self._last = text
        return text

    def reset(self) -> None:
        """End the current utterance; the next ``feed`` starts a new one."""
        if self._decoder is not None and self._in_utt:
            self._decoder.end_utt()
        self._in_utt = False
        self._last = None
