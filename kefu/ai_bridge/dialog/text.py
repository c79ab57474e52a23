"""Text helpers shared by the dialog modules: language detection, BM25 tokens, sentences.

Chinese is detected by CJK ideographs alone: a caller's transcript either comes from the
Chinese ASR (Hanzi) or the English one (Latin letters), so no statistical detector is needed.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# Only words so common they carry no topic; "not", "no", "how", "when" stay because they
# separate questions ("how long" vs "how much") in a small customer-service corpus.
_EN_STOP = frozenset(
    "a an the is are was were be been am i me my we our you your it its this that to of in on "
    "for with at by from and or do does did can could would should will shall please hi hello "
    "there just so "
    # Question words are in nearly every entry: as shared words they made "what's the weather
    # on Mars?" look a third covered by the delivery answer.
    "what what's whats how when where why which who".split()
)
_ZH_STOP = frozenset("的 了 吗 呢 吧 啊 呀 我 你 您 是 在 有 和 就 都 也 请 一下 么 嘛 个".split())

_jieba_lock = threading.Lock()


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def detect_lang(text: str) -> str:
    """'zh' when the text holds any CJK ideograph, else 'en'."""
    return "zh" if has_cjk(text) else "en"


def stem(word: str) -> str:
    """A deliberately light English stemmer: plural/verb endings only.

    Porter-style stemming over-merges in a small corpus ("order"/"orderly"); only the endings
    that vary between paraphrases of the same question are folded.
    """
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("'s"):
        word = word[:-2]
    for suffix, repl, min_len in (
        ("ies", "y", 5),
        ("sses", "ss", 6),
        ("ing", "", 6),
        ("ed", "", 5),
        ("es", "", 5),
        ("s", "", 4),
    ):
        if word.endswith(suffix) and len(word) >= min_len and not word.endswith("ss"):
            base = word[: len(word) - len(suffix)] + repl
            # "shipping" -> "shipp" -> "ship": undo the doubled consonant of -ing/-ed.
            if suffix in ("ing", "ed") and len(base) > 3 and base[-1] == base[-2]:
                base = base[:-1]
            return base
    return word


def jieba_words(run: str, *, search: bool = True) -> list[str]:
    """jieba's words of a CJK run: search mode (long words and their parts, for BM25) or,
    with ``search=False``, the one best segmentation."""
    import jieba

    # jieba initialises its dictionary lazily and not thread-safely; executors may race.
    with _jieba_lock:
        if not jieba.dt.initialized:
            jieba.setLogLevel(logging.WARNING)
            jieba.initialize()
    return list(jieba.lcut_for_search(run) if search else jieba.lcut(run))


def tokenize(text: str) -> list[str]:
    """BM25 tokens: jieba words for CJK runs, stemmed lowercase words for the rest."""
    tokens: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(text):
        tokens.extend(_en_tokens(text[pos : m.start()]))
        tokens.extend(w for w in jieba_words(m.group()) if w.strip() and w not in _ZH_STOP)
        pos = m.end()
    tokens.extend(_en_tokens(text[pos:]))
    return tokens


def _en_tokens(text: str) -> Iterable[str]:
    for w in _WORD.findall(text.lower()):
        if w not in _EN_STOP:
            yield stem(w)


# Spoken disfluencies that carry no topic: hesitations anywhere, discourse markers ("yeah so",
# "I mean", "sorry") and filler "like" (not "I'd like", "looks like"). Embedding them pulls a
# turn towards whatever KB phrasing happens to share the filler; they are dropped before the
# turn is embedded and matched, never from what the rules or slots see.
_EN_HESITATION = re.compile(r"(?:,\s*)?\b(?:u+h+m*|u+m+|e+r+m*|h+m+|a+h+|o+h+)\b[,.]*\s*", re.I)
_EN_MARKERS = re.compile(
    r"(?:,\s*)?\b(?:yeah|yep|sorry|actually|basically|honestly|literally|just|you know|i mean|"
    r"kind of|sort of)\b[,.]*\s*",
    re.I,
)
# Only where a clause starts: "ok" and "well" mean something elsewhere ("is it ok to ...").
_EN_OPENERS = re.compile(r"(?:^|(?<=[,.!?;]))\s*(?:ok(?:ay)?|so|well|hi|hello|hey)\b[,.!]*", re.I)
_EN_LIKE = re.compile(r"(?:,\s*)?\blike\b[,.]*\s*", re.I)
# "like" after these is the verb or a comparison ("I'd like", "looks like"), not a filler.
_LIKE_KEPT_AFTER = frozenset(
    "i i'd you'd we'd they'd he'd she'd would we you they don't didn't do does not "
    "look looks feel feels sound sounds seem seems something anything just".split()
)
# "the, the delivery charge": a word said twice in a row (a stutter).
_EN_REPEAT = re.compile(r"\b(\w+)(?:,?\s+\1\b)+", re.I)
# 嗯/呃 anywhere; 额/哎/喂 and "那个/就是/然后" only opening the turn (金额, 那个订单 stay).
_ZH_FILLERS = re.compile(
    r"[嗯呃]+[，,、。]*|^(?:额|哎|唉|喂|那个|就是|然后)+[，,、。]*|(?:那个|就是)[，,]+"
)
_ZH_PARTICLE_END = re.compile(r"[啊呀呢嘛吧哦]+(?=[，,。？！?!]|$)")


def _drop_filler_like(m: re.Match[str]) -> str:
    if m.group().startswith(","):  # ", like," set off by commas is a filler
        return " "
    before = m.string[: m.start()].split()
    return m.group() if before and before[-1].lower() in _LIKE_KEPT_AFTER else " "


def clean_query(text: str, lang: str) -> str:
    """The caller's turn without spoken fillers, for embedding and matching (see above).

    Returns the text unchanged when nothing but fillers would remain ("um, yeah")."""
    if lang == "zh":
        s = _ZH_FILLERS.sub("", text)
        s = _ZH_PARTICLE_END.sub("", s)
    else:
        s = _EN_HESITATION.sub(" ", text)
        s = _EN_MARKERS.sub(" ", s)
        for _ in range(3):  # "hi, so, well, ..." one opener at a time
            s = _EN_OPENERS.sub("", s).lstrip(" ,.")
        s = _EN_LIKE.sub(_drop_filler_like, s)
        s = _EN_REPEAT.sub(r"\1", s)
    s = re.sub(r"\s+([,.?!])", r"\1", re.sub(r"\s{2,}", " ", s)).strip(" ,，、.。")
    return s if s.strip("?？!！ ") else text


def warm_up() -> None:
    """Load jieba's dictionary now (~1 s) instead of on a caller's first Chinese turn."""
    jieba_words("预热")


# Sentence ends: CJK punctuation always ends a sentence; ASCII . ! ? only when followed by
# whitespace (so "12.50" and "e.g." mid-token do not split) or at the end of the text.
_SENT_END = re.compile(r"[。！？；!?]+[”\"')]*|\.(?:[”\"')]*)(?=\s)|\n+")
_ABBREV = re.compile(r"(?:\b(?:e\.g|i\.e|mr|mrs|ms|dr|st|no|vs|etc|approx|a\.m|p\.m))\.$", re.I)


def split_sentences(text: str) -> list[str]:
    """Split a finished text into speakable sentences."""
    splitter = SentenceSplitter()
    out = splitter.feed(text)
    out.extend(splitter.flush())
    return out


class SentenceSplitter:
    """Incremental sentence splitter for streamed LLM tokens.

    ``feed`` returns the sentences completed so far; a trailing "." is held back until the
    next token shows whether whitespace follows (decimal points, abbreviations).
    """

    def __init__(self, min_chars: int = 2) -> None:
        self._buf = ""
        self._min_chars = min_chars

    def feed(self, chunk: str) -> list[str]:
        self._buf += chunk
        out: list[str] = []
        start = 0
        for m in _SENT_END.finditer(self._buf):
            candidate = self._buf[start : m.end()].strip()
            if m.group().startswith(".") and _ABBREV.search(self._buf[start : m.end()]):
                continue
            if len(candidate) >= self._min_chars:
                out.append(candidate)
                start = m.end()
        self._buf = self._buf[start:]
        return out

    def flush(self) -> list[str]:
        rest = self._buf.strip()
        self._buf = ""
        return [rest] if rest else []
