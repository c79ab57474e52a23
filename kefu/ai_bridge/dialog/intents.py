"""Intent classification: keyword/regex rules first, then nearest neighbours over examples.

Rules catch the short, formulaic turns a similarity model handles badly ("yes", "no",
"agent!") and the requests that must never be missed (asking for a human). Everything else
goes to k-nearest-neighbour voting over example utterances: sentence-vector cosine for the
languages the embedder covers (multilingual-e5: English and Chinese; MiniLM: English only),
character uni+bigram cosine for Chinese without a multilingual model. Examples come from
data/intents.json plus every phrasing of the knowledge-base entries that name an intent.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .callers import OUT_OF_SCOPE as OUT_OF_SCOPE
from .callers import CallerTurn
from .disk_cache import cached_vectors
from .embed import TextEncoder
from .kb import KbEntry
from .text import detect_lang

UNKNOWN = "unknown"
# OUT_OF_SCOPE (defined with the callers' turns, which use it too) labels the examples of
# questions the knowledge base does not answer: a turn whose nearest examples are these is
# off-topic however close its best KB match looks.
# kNN thresholds: below these the best example is too far to trust (chosen on the held-out
# set in tests/ai_bridge/dialog/heldout_intents.jsonl: no false intents on off-topic turns).
EN_MIN_COSINE = 0.45
ZH_MIN_SIMILARITY = 0.30
# multilingual-e5 cosines are compressed into ~0.75-1.0: unrelated turns sit near 0.8-0.85.
E5_MIN_COSINE = 0.86
# Social turns: answered by canned replies, never by the knowledge base.
SOCIAL_INTENTS = frozenset({"greeting", "thanks", "goodbye", "affirm", "deny"})
# Labels whose examples are not questions the knowledge base answers.
_NOT_TOPICS = SOCIAL_INTENTS | {OUT_OF_SCOPE}
_K = 3

# (intent, lang, pattern). Anchored patterns only fire on short, formulaic turns.
_RULES: tuple[tuple[str, str, str], ...] = (
    (
        "human_agent",
        "en",
        r"\b(human|real person|live person|representative|operator|an agent|real agent|"
        r"the agent|speak to (?:a|an|the|some) ?(?:one|body|person|manager|supervisor)|"
        r"talk to (?:a|an|some) ?(?:one|body|person)|manager|supervisor|"
        r"put me through|transfer me|(?:a|an actual|a real) person|someone real|"
        r"(?:pass|hand|put|get|connect) me (?:over |across |through )?to (?:a|an|one|some|your)|"
        r"(?:member|one) of (?:your |the )?staff|a colleague|"
        r"some ?(?:one|body) (?:from|in) (?:customer )?(?:service|support))\b|^agent\W*$",
    ),
    ("human_agent", "zh", r"人工|真人|转接|接线员|客服人员|经理|投诉|找个人|活人"),
    ("greeting", "en", r"^(hi|hello|hey|hiya|good (morning|afternoon|evening))( there)?\W*$"),
    ("greeting", "zh", r"^(你好|您好|喂|嗨|哈喽|早上好|下午好|晚上好)[\W，。！]*$"),
    ("thanks", "en", r"^(ok(ay)?,? )?(thanks?( you)?|thank you (so|very) much|cheers)\W*$"),
    ("thanks", "zh", r"^(好的)?[，,]?(谢谢|多谢|感谢)"),
    ("goodbye", "en", r"^(ok(ay)?,? )?(bye|goodbye|see you|that'?s all)\b.*$"),
    ("goodbye", "zh", r"^(再见|拜拜|没事了|就这样)"),
    (
        "affirm",
        "en",
        r"^(yes|yeah|yep|yup|sure|ok|okay|please do|go ahead|right|correct)"
        r"( please| that's right| thanks)?\W*$",
    ),
    ("affirm", "zh", r"^(是|是的|好|好的|可以|嗯|对|对的|行|要)[\W，。！啊吧]*$"),
    ("deny", "en", r"^(no|nope|nah|not now|no thanks?( you)?|no,? (that's fine|i'm good))\W*$"),
    ("deny", "zh", r"^(不|不用|不用了|不要|不了|算了|没有|不需要)[\W，。！]*$"),
)


# A request for a human that asks *when* one is available is a question about opening hours.
_ASKS_WHEN = {
    "en": re.compile(
        r"\b(what time|when|what hours|hours|open|available|o'?clock|\d+ ?[ap]\.?m\b|"
        r"night|evening|morning|weekends?|weekdays?|saturday|sunday|bank holiday)"
    ),
    "zh": re.compile(
        r"几点|什么时候|啥时候|时间|上班|下班|有人吗|还在吗|晚上|早上|白天|半夜|凌晨|中午|"
        r"周末|周[六日天]|星期|礼拜[六日天]|节假日|过年|[0-9一二两三四五六七八九十]+点"
    ),
}
# Asking whether the voice is a person or a machine is a question for the knowledge base
# ("Is this a robot?"), not a request for one, unless it also asks to be put through.
_ASKS_IF_HUMAN = {
    "en": re.compile(
        r"\b(are you|you'?re|you are|is (this|that|it) (a |an |just |really |even |actually )?|"
        r"am i (talking|speaking|chatting) (to|with))\b.{0,40}\b(human|real|person|robot|bot|"
        r"machine|computer|automated|automatic|recording|recorded|ai|artificial)\b|"
        r"\b(human|person) or (a |an )?(robot|bot|machine|computer|ai)\b|"
        r"\b(robot|bot|machine|computer|ai) or (a |an )?(human|person|real)\b"
    ),
    "zh": re.compile(
        r"(你|您|恁|这|对面|那边|这边|接电话的|后面).{0,4}是.{0,4}"
        r"(真人|活人|人工|机器|ai|人工智能|录音|自动|电脑)|"
        r"(真人|活人|人工|人)\s*还是.{0,2}(机器|ai|人工智能|录音|电脑|自动)|"
        r"(机器|ai|人工智能|录音|电脑)\s*还是.{0,2}(真人|活人|人工|人)|"
        r"(跟|和|同).{0,2}(机器|ai|人工智能|电脑|真人).{0,2}(说话|聊天|讲话|对话)|"
        r"不是真人|是不是真人|有真人在"
    ),
}
_ASKS_FOR_HUMAN = {
    "en": re.compile(
        r"\b(put me through|transfer|connect me|speak to|talk to|get me|give me|i want|"
        r"i need|i'?d like)\b"
    ),
    "zh": re.compile(
        r"(?<![别不甭])(转人工|转接)|帮我接|给我接|接人工|找(个|一个)?(真人|人工|人)|要(人工|真人)|"
        r"换(个|成)?(真人|人工)|叫(个|一个)?(真人|人工|人)|[要想](和|跟|同|找)|让(真人|人工)"
    ),
}


def _not_a_request(text: str, lang: str) -> bool:
    """Whether a turn the human-agent rule matched asks when people are available or whether
    the voice is a person, rather than asking to be put through."""
    if _ASKS_WHEN[lang].search(text):
        return True
    return bool(_ASKS_IF_HUMAN[lang].search(text)) and not _ASKS_FOR_HUMAN[lang].search(text)


@dataclass(frozen=True, slots=True)
class IntentResult:
    """The classified intent of one utterance."""

    intent: str
    """Intent name, or 'unknown'."""
    confidence: float
    """Best similarity (kNN) or 1.0 (rule); 0 for unknown without any candidate."""
    method: str
    """'rule', 'knn' or 'none'."""
    lang: str
    """Language the utterance was classified in ('en' or 'zh')."""


def default_examples_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "intents.json"


def load_examples(path: Path | None = None) -> dict[str, dict[str, list[str]]]:
    data = json.loads((path or default_examples_path()).read_text(encoding="utf-8"))
    return {i: {lang: list(v) for lang, v in langs.items()} for i, langs in data.items()}


def _char_ngrams(text: str) -> Counter[str]:
    chars = [c for c in text if c.isalnum()]
    grams = Counter(chars)
    grams.update(a + b for a, b in zip(chars, chars[1:], strict=False))
    return grams


def _ngram_cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    if not dot:
        return 0.0
    na = sum(v * v for v in a.values()) ** 0.5
    nb = sum(v * v for v in b.values()) ** 0.5
    return float(dot / (na * nb))


class IntentClassifier:
    """Rules + kNN. ``classify`` is CPU-bound (one embedding): run it in an executor."""

    def __init__(
        self,
        embedder: TextEncoder | None,
        examples: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
        kb_entries: Iterable[KbEntry] = (),
        *,
        callers: Iterable[CallerTurn] = (),
        cache_dir: str | Path | None = None,
    ) -> None:
        self.embedder = embedder if embedder is not None and embedder.ready else None
        ex = examples if examples is not None else load_examples()
        en: list[tuple[str, str]] = []
        zh: list[tuple[str, str]] = []
        for intent, langs in ex.items():
            en.extend((intent, t) for t in langs.get("en", ()))
            zh.extend((intent, t) for t in langs.get("zh", ()))
        # Callers' turns the knowledge base does not answer are off-topic examples too.
        for c in callers:
            if c.label == OUT_OF_SCOPE:
                (zh if c.lang == "zh" else en).append((OUT_OF_SCOPE, c.text))
        # The first rows of each language are the examples, the KB phrasings follow.
        self._n_examples = {"en": len(en), "zh": len(zh)}
        for e in kb_entries:
            if e.intent:
                (zh if e.lang == "zh" else en).extend((e.intent, q) for q in e.phrasings())
        self.intents = sorted({i for i, _ in en} | {i for i, _ in zh})
        vec_langs = self.embedder.languages if self.embedder is not None else frozenset()
        self._labels = {"en": [i for i, _ in en], "zh": [i for i, _ in zh]}
        self._vectors = {
            lang: self._example_vectors([t for _, t in ex_], cache_dir)
            for lang, ex_ in (("en", en), ("zh", zh))
            if lang in vec_langs
        }
        self._zh = [(i, _char_ngrams(t)) for i, t in zh]
        self.min_cosine = E5_MIN_COSINE if "zh" in vec_langs else EN_MIN_COSINE
        self._rules = [(i, lang, re.compile(p, re.I)) for i, lang, p in _RULES]

    def _example_vectors(self, texts: list[str], cache_dir: str | Path | None) -> NDArray[Any]:
        if self.embedder is None:
            return np.zeros((0, 384), np.float32)
        return cached_vectors(cache_dir, self.embedder, texts)

    def labelled_examples(self, lang: str) -> list[tuple[str, NDArray[Any]]]:
        """(intent, vector) of every data/intents.json example of ``lang`` (KB phrasings
        not included); empty without vectors for the language."""
        vectors = self._vectors.get(lang)
        if vectors is None:
            return []
        n = self._n_examples[lang]
        return list(zip(self._labels[lang][:n], vectors[:n], strict=True))

    def rule(self, text: str, lang: str) -> str | None:
        s = text.strip().lower()
        for intent, rlang, pat in self._rules:
            if rlang == lang and pat.search(s):
                if intent == "human_agent" and _not_a_request(s, rlang):
                    continue  # "when are your agents available?", "are you a robot?": the KB
                return intent
        return None

    def nearest(self, intent: str, lang: str, vector: NDArray[Any] | None) -> float:
        """Best cosine between ``vector`` and the examples of ``intent`` (0 without vectors)."""
        key = "zh" if lang == "zh" else "en"
        vectors = self._vectors.get(key)
        if vector is None or vectors is None or not len(vectors):
            return 0.0
        mask = np.array([i == intent for i in self._labels[key]], dtype=bool)
        return float((vectors[mask] @ vector).max()) if mask.any() else 0.0

    def nearest_topic(self, lang: str, vector: NDArray[Any] | None) -> float:
        """Best cosine between ``vector`` and any example of a service topic: neither
        out of scope nor a social turn (greeting, yes, no ...); 0 without vectors. Set
        against :meth:`nearest` of OUT_OF_SCOPE it says which side the turn's nearest labelled
        neighbour is on."""
        key = "zh" if lang == "zh" else "en"
        vectors = self._vectors.get(key)
        if vector is None or vectors is None or not len(vectors):
            return 0.0
        mask = np.array([i not in _NOT_TOPICS for i in self._labels[key]], dtype=bool)
        return float((vectors[mask] @ vector).max()) if mask.any() else 0.0

    def classify(
        self, text: str, *, lang: str | None = None, vector: NDArray[Any] | None = None
    ) -> IntentResult:
        lang = lang or detect_lang(text)
        hit = self.rule(text, lang)
        if hit is not None:
            return IntentResult(hit, 1.0, "rule", lang)
        vectors = self._vectors.get("zh" if lang == "zh" else "en")
        if vectors is not None and len(vectors) and self.embedder is not None:
            v = vector if vector is not None else self.embedder.embed_one(text)
            sims = vectors @ v
            labels = self._labels["zh" if lang == "zh" else "en"]
            scored = list(zip(sims.tolist(), labels, strict=True))
            threshold = self.min_cosine
        elif lang == "zh":
            q = _char_ngrams(text)
            scored = [(_ngram_cosine(q, g), i) for i, g in self._zh]
            threshold = ZH_MIN_SIMILARITY
        else:
            return IntentResult(UNKNOWN, 0.0, "none", lang)
        if not scored:
            return IntentResult(UNKNOWN, 0.0, "none", lang)
        scored.sort(key=lambda p: -p[0])
        best = scored[0][0]
        if best < threshold:
            return IntentResult(UNKNOWN, float(best), "none", lang)
        # Similarity-weighted vote among the k nearest: one odd example cannot flip a turn
        # that its neighbours agree on.
        votes: dict[str, float] = {}
        for s, intent in scored[:_K]:
            votes[intent] = votes.get(intent, 0.0) + s
        winner = max(votes, key=lambda i: votes[i])
        conf = max(s for s, i in scored[:_K] if i == winner)
        return IntentResult(winner, float(conf), "knn", lang)
