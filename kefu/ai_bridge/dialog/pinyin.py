"""Sound-based matching for Chinese: what the caller said, when the ASR wrote it wrong.

The Mandarin ASR mishears mostly by sound: it writes a homophone or a near-homophone of the
word that was said ("物流" → "五六", "签收" → "牵受", "订单" → "定当", "密码" → "米马"). The
characters then share nothing with the knowledge base, so neither BM25 nor the embedding can
find the entry, although the *syllables* are those of the KB's words.

:class:`PhoneticLexicon` holds the words of the knowledge base's Chinese phrasings (question
and alternatives, jieba words of 2 to 5 ideographs), keyed by their toneless pinyin, by the
same with the confusions of accented speech and phone-line audio merged (:func:`fuzzy`: zh/z,
ch/c, sh/s, n/l, and -ng/-n finals), and, for words of 3+ syllables, with one syllable's final
free (信用卡 heard as 心用可). :meth:`PhoneticLexicon.correct` rewrites a turn: each stretch of
syllables that sounds like a KB word is replaced by that word, longest first, left to right,
an exact reading before a merged one (网上 stays 网上 although 晚上 merges with it). Merging
j/q/x as well, and taking words from the answers too, changed nothing on the dev split. The
retriever (:mod:`.retrieval`) ranks the rewritten turn as
a second reading of the same turn and keeps, per entry, the better of the two; a turn that
sounds like no KB word is left exactly as it was.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .text import jieba_words

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_INITIALS = (
    "zh ch sh b p m f d t n l g k h j q x r z c s y w".split()  # two-letter ones first
)
# Initials an accented voice through G.711 swaps (and northern/southern speakers merge).
_MERGED_INITIALS = {"zh": "z", "ch": "c", "sh": "s", "n": "l"}
# Shortest and longest KB word looked up, in syllables.
MIN_SYLLABLES = 2
MAX_SYLLABLES = 5
# KB words this long also match with one syllable's final misheard (same initial).
LOOSE_SYLLABLES = 3

_lock = threading.Lock()


def _pinyin(run: str) -> list[str]:
    """pypinyin's toneless reading (imported on first use, ~0.4 s; its phrase dictionary
    picks the reading of polyphones from their neighbours)."""
    with _lock:  # the first import is not thread-safe
        from pypinyin import Style, lazy_pinyin

    return [str(s) for s in lazy_pinyin(run, style=Style.NORMAL)]


def fuzzy(syllable: str) -> str:
    """A toneless syllable with the usual confusions merged: zh/z, ch/c, sh/s, n/l initials,
    an/ang, en/eng, in/ing, ian/iang, uan/uang finals (``ong`` stays)."""
    initial, final = _split(syllable.lower())
    initial = _MERGED_INITIALS.get(initial, initial)
    if final.endswith("ng") and not final.endswith("ong"):
        final = final[:-1]
    return initial + final


def toneless(run: str) -> list[str]:
    """One toneless syllable per ideograph of ``run`` (a string of CJK ideographs only)."""
    out = _pinyin(run)
    if len(out) != len(run):  # a reading pypinyin joined or split: go char by char
        out = [_pinyin(ch)[0] for ch in run]
    return out


def _words(text: str) -> Iterable[str]:
    for m in _CJK_RUN.finditer(text):
        for w in jieba_words(m.group(), search=False):
            if MIN_SYLLABLES <= len(w) <= MAX_SYLLABLES and _CJK_RUN.fullmatch(w):
                yield w


def _split(syllable: str) -> tuple[str, str]:
    initial = next((i for i in _INITIALS if syllable.startswith(i) and len(syllable) > len(i)), "")
    return initial, syllable[len(initial) :]


def _near(a: str, b: str) -> bool:
    """Two fuzzy syllables with the same initial (a final misheard: 卡/可, 上/少, 其/前)."""
    return _split(a)[0] == _split(b)[0]


@dataclass(frozen=True, slots=True)
class PhoneticLexicon:
    """The knowledge base's Chinese words by sound (see the module docstring)."""

    exact: dict[tuple[str, ...], str] = field(default_factory=dict)
    """Toneless syllables → the KB word that sounds so (the most frequent one on a tie)."""
    fuzzy: dict[tuple[str, ...], str] = field(default_factory=dict)
    """The same with the usual confusions merged (:func:`fuzzy`)."""
    loose: dict[tuple[str, ...], list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)
    """Words of :data:`LOOSE_SYLLABLES`+ syllables by their fuzzy syllables with one of them
    left out ("*"): (word, its fuzzy syllables); the syllable left out may differ in its
    final."""

    @classmethod
    def build(cls, phrasings: Sequence[str]) -> PhoneticLexicon:
        counts = Counter(w for text in phrasings for w in _words(text))
        exact: dict[tuple[str, ...], str] = {}
        fuzzy_: dict[tuple[str, ...], str] = {}
        loose: dict[tuple[str, ...], list[tuple[str, tuple[str, ...]]]] = {}
        for word, _n in sorted(counts.items(), key=lambda p: (-p[1], p[0])):
            plain = tuple(toneless(word))
            merged = tuple(fuzzy(s) for s in plain)
            exact.setdefault(plain, word)
            fuzzy_.setdefault(merged, word)
            if len(merged) >= LOOSE_SYLLABLES:
                for p in range(len(merged)):
                    loose.setdefault((*merged[:p], "*", *merged[p + 1 :]), []).append(
                        (word, merged)
                    )
        return cls(exact, fuzzy_, loose)

    @property
    def empty(self) -> bool:
        return not self.exact

    def correct(self, text: str) -> str:
        """``text`` with each stretch that sounds like a KB word, but is written otherwise,
        replaced by that word; ``text`` itself when nothing sounds like one."""
        if not self.exact:
            return text
        parts: list[str] = []
        pos = 0
        for m in _CJK_RUN.finditer(text):
            parts.append(text[pos : m.start()])
            parts.append(self._correct_run(m.group()))
            pos = m.end()
        parts.append(text[pos:])
        return "".join(parts)

    def _lookup(self, plain: Sequence[str], merged: Sequence[str]) -> str | None:
        word = self.exact.get(tuple(plain)) or self.fuzzy.get(tuple(merged))
        if word is not None or len(merged) < LOOSE_SYLLABLES:
            return word
        for p in range(len(merged)):
            for cand, sounds in self.loose.get((*merged[:p], "*", *merged[p + 1 :]), ()):
                if _near(sounds[p], merged[p]):
                    return cand
        return None

    def _correct_run(self, run: str) -> str:
        if len(run) < MIN_SYLLABLES:
            return run
        plain = toneless(run)
        merged = [fuzzy(s) for s in plain]
        out: list[str] = []
        i = 0
        while i < len(run):
            for n in range(min(MAX_SYLLABLES, len(run) - i), MIN_SYLLABLES - 1, -1):
                word = self._lookup(plain[i : i + n], merged[i : i + n])
                if word is not None:
                    out.append(word)
                    i += n
                    break
            else:
                out.append(run[i])
                i += 1
        return "".join(out)
