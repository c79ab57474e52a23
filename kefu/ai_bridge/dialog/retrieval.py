"""Hybrid retrieval: BM25 + vector cosine, fused, with a calibrated confidence.

With multilingual-e5 (:mod:`.e5`, both languages) entries are ranked by a score fusion of
absolute signals, ``support + LEX_WEIGHT * coverage`` (see below), because e5's cosines are
comparable across entries and queries and rank better than ranks alone; ``support`` is the
mean cosine of the entry's best :data:`SUPPORT_TOP` phrasings, so one stray phrasing that
shares a surface word does not outrank an entry several phrasings agree on. BM25 (via RRF)
only breaks exact ties and brings in entries the vector search missed. The confidence is
``sigmoid((fused - mid) / scale)`` with ``mid``/``scale`` per model and language
(:data:`CALIBRATION`). The dialog manager then folds in the out-of-scope evidence
(:meth:`HybridRetriever.scoped_confidence`: how much nearer the best KB phrasing is than the
nearest off-topic example, :data:`SCOPED_CALIBRATION`). All constants were chosen on the dev
split of loadtest/eval (never on heldout). With MiniLM (English only) or no model at all the
original scheme below applies.

Chinese turns are also read by sound (:mod:`.pinyin`): the ASR's homophones ("五六信息" for
"物流信息") are rewritten to the KB words they sound like, and the rewritten turn is ranked the
same way as a second reading; each entry keeps its better score (minus
:data:`PHONETIC_PENALTY`), so the channel only lifts entries the written turn missed and a turn
that sounds like no KB word is ranked exactly as before. A hit from that reading carries the
reading (``heard_as``) and its own distance to the off-topic examples (``off_topic``), which
:meth:`HybridRetriever.scoped_confidence` uses in place of the written turn's: a turn that
merely contains a KB-sounding word is still judged as the sentence it became.

Reciprocal-rank fusion (Cormack et al. 2009) adds 1/(k + rank) over the rankers, k = 60: it
needs no score normalisation across rankers whose scales differ (BM25 is unbounded, cosine is
in [-1, 1]), and an entry ranked well by both beats one ranked first by only one.

RRF scores say nothing absolute ("is the best hit any good?"), so the confidence is computed
separately from two absolute signals of the top hit:

* ``cosine``: best MiniLM cosine between the query and any phrasing of the entry. Reliable in
  English; near-meaningless for Chinese (the model is English-only).
* ``coverage``: the share of the query's content tokens (text.tokenize, stop words removed,
  tokens with digits ignored) found in the entry's indexed text. The only usable signal for
  Chinese.

confidence = max(sigmoid((cosine - 0.52) / 0.05), sigmoid((coverage - 0.6) / 0.1)), the
coverage term only for queries with at least 2 content tokens. On the sets in
tests/ai_bridge/dialog/test_dialog_retrieval.py answerable questions score >= 0.81 and
off-topic ones <= 0.34; LOW_CONFIDENCE = 0.45 sits between them. The dialog manager lifts a
hit whose intent agrees with the intent classifier to just above the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .e5 import E5_MODEL_NAME
from .embed import TextEncoder
from .kb import KbEntry, KnowledgeBase
from .pinyin import PhoneticLexicon
from .text import tokenize

RRF_K = 60
LOW_CONFIDENCE = 0.45
# Cosine calibration for all-MiniLM-L6-v2 on this domain: paraphrases of a KB question sit
# at 0.55-0.9, unrelated customer-service questions at 0.2-0.45.
_COS_MID = 0.52
_COS_SCALE = 0.05
# Fusion for e5: coverage (share of the query's content words found in the entry) is worth
# this much cosine. Calibration (mid, scale) of the fused score, per model, from the dev split.
LEX_WEIGHT = 0.02
CALIBRATION: dict[tuple[str, str], tuple[float, float]] = {
    (E5_MODEL_NAME, "en"): (0.86, 0.01),
    (E5_MODEL_NAME, "zh"): (0.86, 0.01),
}
# With e5 an entry's cosine is the mean over its best SUPPORT_TOP phrasings, not the single
# best: on the dev split the single best phrasing was often a sibling entry's that shared
# one surface word ("order", "change"), while the right entry had several close phrasings.
SUPPORT_TOP = 2
# Off-topic evidence: how much nearer the best KB phrasing is than the nearest out-of-scope
# example (data/intents.json) is added to the fused score with this weight before the
# calibration SCOPED_CALIBRATION (mid, scale) turns it into the answer's confidence.
OFF_TOPIC_WEIGHT = 1.0
SCOPED_CALIBRATION: dict[tuple[str, str], tuple[float, float]] = {
    (E5_MODEL_NAME, "en"): (0.90, 0.01),
    (E5_MODEL_NAME, "zh"): (0.92, 0.01),
}
# A Chinese turn re-written by sound (pinyin.py) is ranked as a second reading; its fused
# scores count this much less than the written turn's. 0 on the dev split: 0.005 and 0.01
# only turned right answers to heard turns into abstentions, with no fewer wrong ones.
PHONETIC_PENALTY = 0.0
# ... and it is not answered when an out-of-scope example is about as near as its best hit.
PHONETIC_OOS_MARGIN = 0.01


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved knowledge-base entry."""

    entry: KbEntry
    """The entry."""
    score: float
    """Ranking score, only comparable within one query: the fused cosine + coverage with a
    calibrated model (e5), else the reciprocal-rank-fusion score (sum of 1/(k+rank))."""
    confidence: float
    """Calibrated 0..1 belief that this entry answers the query (see module docstring)."""
    bm25: float
    """Raw BM25 score (0 when no query token matched)."""
    cosine: float
    """Best cosine between the query vector and the entry's phrasings (0 without vectors)."""
    coverage: float
    """Share of the query's content tokens present in the entry's indexed text."""
    heard_as: str = ""
    """The turn as the phonetic channel re-wrote it when this hit came from that reading
    (pinyin.py), else empty."""
    off_topic: float = 0.0
    """With ``heard_as``: that reading's best cosine to an out-of-scope example."""


class VectorIndex(Protocol):
    """Nearest entries by cosine; the seam where Milvus can replace the numpy matrix."""

    def nearest(self, vector: NDArray[Any], k: int) -> list[tuple[int, float]]:
        """(entry index, best cosine) pairs, best first."""
        ...


class Retriever(Protocol):
    """What the dialog manager needs; synchronous and CPU-bound, so call it in an executor."""

    def search(
        self, query: str, *, vector: NDArray[Any] | None = None, lang: str | None = None, k: int = 5
    ) -> list[Hit]: ...


class NumpyVectorIndex:
    """Brute-force cosine over the phrasing vectors stored with the knowledge base.

    A few hundred rows × 384 dims is a ~0.05 ms matrix-vector product: no ANN index needed
    until tens of thousands of entries.
    """

    def __init__(self, vectors: NDArray[Any], rows: NDArray[Any], n_entries: int) -> None:
        self._vectors = vectors
        self._rows = rows
        self._n = n_entries
        # (entry, phrasing slot) -> row of ``vectors``; len(vectors) (an -inf pad) when unused.
        counts = np.bincount(rows, minlength=n_entries) if len(rows) else np.zeros(n_entries)
        self._grid = np.full((n_entries, max(1, int(counts.max(initial=0)))), len(rows))
        fill = np.zeros(n_entries, dtype=np.int64)
        for r, e in enumerate(rows.tolist()):
            self._grid[e, fill[e]] = r
            fill[e] += 1

    def nearest(self, vector: NDArray[Any], k: int) -> list[tuple[int, float]]:
        if len(self._vectors) == 0:
            return []
        sims = self._vectors @ vector
        best = np.full(self._n, -1.0, dtype=np.float32)
        np.maximum.at(best, self._rows, sims)
        order = np.argsort(-best)[:k]
        return [(int(i), float(best[i])) for i in order if best[i] > -1.0]

    def support(self, vector: NDArray[Any], top: int = SUPPORT_TOP) -> NDArray[Any]:
        """Per entry, the mean cosine of its ``top`` best phrasings (all it has when fewer):
        an entry that several phrasings agree on beats one odd phrasing that shares a word."""
        if len(self._vectors) == 0:
            return np.zeros(self._n, dtype=np.float32)
        padded = np.append(self._vectors @ vector, -np.inf)[self._grid]
        best = -np.sort(-padded, axis=1)[:, :top]
        finite = np.isfinite(best)
        sums = np.where(finite, best, 0.0).sum(axis=1)
        out: NDArray[Any] = (sums / np.maximum(finite.sum(axis=1), 1)).astype(np.float32)
        return out


class MilvusVectorIndex:
    """Vector search in a Milvus collection (optional: needs pymilvus).

    The collection must hold one row per phrasing with an int field ``entry`` (index into
    the KnowledgeBase entries) and a 384-dim COSINE-metric vector field ``vector``.
    """

    def __init__(self, uri: str, collection: str, *, token: str | None = None) -> None:
        try:
            from pymilvus import MilvusClient
        except ImportError as exc:  # optional backend
            from kefu.errors import ConfigError

            raise ConfigError(
                "Milvus retrieval needs the 'pymilvus' package", key="milvus"
            ) from exc
        self._client: Any = MilvusClient(uri=uri, token=token or "")
        self._collection = collection

    def nearest(self, vector: NDArray[Any], k: int) -> list[tuple[int, float]]:
        res = self._client.search(
            self._collection, data=[vector.tolist()], limit=k * 3, output_fields=["entry"]
        )
        best: dict[int, float] = {}
        for hit in res[0]:
            e = int(hit["entity"]["entry"])
            best[e] = max(best.get(e, -1.0), float(hit["distance"]))
        return sorted(best.items(), key=lambda p: -p[1])[:k]


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal-rank fusion of several rankings (lists of ids, best first; rank 1-based)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def confidence(cosine: float, coverage: float, n_tokens: int) -> float:
    """Calibrated confidence from the top hit's absolute signals (see module docstring)."""
    c = _sigmoid((cosine - _COS_MID) / _COS_SCALE) if cosine > 0 else 0.0
    if n_tokens >= 2:
        # Full coverage of a 2+ token query is strong lexical evidence (and the only signal
        # for Chinese); half coverage alone stays below LOW_CONFIDENCE.
        c = max(c, _sigmoid((coverage - 0.6) / 0.1))
    return c


class HybridRetriever:
    """BM25 (bm25s) + vector cosine over a KnowledgeBase, fused with RRF."""

    def __init__(
        self,
        kb: KnowledgeBase,
        embedder: TextEncoder | None = None,
        vector_index: VectorIndex | None = None,
        *,
        rrf_k: int = RRF_K,
        depth: int = 20,
    ) -> None:
        self.kb = kb
        self.embedder = embedder if embedder is not None and embedder.ready else None
        if self.embedder is not None:
            kb = kb.with_vectors(self.embedder)
            self.kb = kb
        self.model = kb.model or ""
        self.calibrated = any(m == self.model for m, _ in CALIBRATION)
        """True when scores are fused cosines (comparable gaps), not RRF ranks."""
        self.vector_langs = self.embedder.languages if self.embedder else frozenset({"en"})
        self.vectors: VectorIndex = vector_index or NumpyVectorIndex(
            kb.vectors, kb.rows, len(kb.entries)
        )
        self.rrf_k = rrf_k
        self.depth = depth
        self._doc_tokens = [
            frozenset(tokenize(" ".join((*e.phrasings(), e.answer)))) for e in kb.entries
        ]
        self.phonetic = PhoneticLexicon.build(
            [p for e in kb.entries if e.lang == "zh" for p in e.phrasings()]
        )
        self._off_topic_zh = self._off_topic_vectors()

    def _off_topic_vectors(self) -> NDArray[Any]:
        """The Chinese out-of-scope examples (data/intents.json) embedded, to judge a turn
        re-written by sound on its own (the manager judges the turn as written)."""
        if self.embedder is None or "zh" not in self.vector_langs or self.phonetic.empty:
            return np.zeros((0, 1), dtype=np.float32)
        from .intents import OUT_OF_SCOPE, load_examples

        texts = load_examples().get(OUT_OF_SCOPE, {}).get("zh", [])
        return self.embedder.embed(texts) if texts else np.zeros((0, 1), dtype=np.float32)

    def scoped_confidence(
        self, hit: Hit, off_topic: float, lang: str, on_topic: float = 0.0
    ) -> float | None:
        """The confidence that ``hit`` answers the turn, given ``off_topic``, the turn's best
        cosine to an out-of-scope example, and ``on_topic``, its best cosine to any in-scope
        example (the hit's own cosine when larger); None when this model and language have
        no calibration (the caller then applies its own off-topic rule)."""
        calibration = SCOPED_CALIBRATION.get((self.model, lang))
        if calibration is None or self.embedder is None:  # scores are then RRF ranks
            return None
        mid, scale = calibration
        gap = max(hit.cosine, on_topic) - off_topic
        if hit.heard_as:
            # Re-written by sound: that reading is judged against the off-topic examples on
            # its own, with the manager's veto (an example about as near as the KB).
            gap = hit.cosine - max(off_topic, hit.off_topic)
            if gap <= PHONETIC_OOS_MARGIN:
                return 0.0
        return _sigmoid((hit.score + OFF_TOPIC_WEIGHT * gap - mid) / scale)

    def search(
        self, query: str, *, vector: NDArray[Any] | None = None, lang: str | None = None, k: int = 5
    ) -> list[Hit]:
        entries = self.kb.entries
        allowed = np.ones(len(entries), dtype=bool)
        if lang is not None:
            mask = np.array([e.lang == lang for e in entries], dtype=bool)
            if mask.any():  # a KB without the caller's language still answers (in its own)
                allowed = mask
        hits = self._rank(query, vector, lang, allowed, k, 0.0)
        heard = self.phonetic.correct(query) if lang == "zh" else query
        if heard == query:
            return hits
        # The turn as it sounds (pinyin.py): a second reading, ranked the same way; each entry
        # keeps its better score, so it only lifts entries the written turn missed.
        vec = self.embedder.embed_one(heard) if self.embedder is not None else None
        off = 0.0
        if vec is not None and len(self._off_topic_zh):
            off = float((self._off_topic_zh @ vec).max())
        best = {h.entry.id: h for h in hits}
        for h in self._rank(heard, vec, lang, allowed, k, PHONETIC_PENALTY):
            h = replace(h, heard_as=heard, off_topic=off)
            if h.entry.id not in best or h.score > best[h.entry.id].score:
                best[h.entry.id] = h
        return sorted(best.values(), key=lambda h: -h.score)[:k]

    def _rank(
        self,
        query: str,
        vector: NDArray[Any] | None,
        lang: str | None,
        allowed: NDArray[Any],
        k: int,
        penalty: float,
    ) -> list[Hit]:
        """The top ``k`` hits of one reading of the turn; ``penalty`` comes off calibrated
        scores (a re-written reading counts less)."""
        entries = self.kb.entries
        tokens = tokenize(query)
        bm = self.kb.bm25_scores(tokens)
        bm_rank = [int(i) for i in np.argsort(-bm) if bm[i] > 0 and allowed[i]][: self.depth]
        cos: dict[int, float] = {}
        use_vec = (lang or "en") in self.vector_langs
        if vector is None and self.embedder is not None and use_vec:
            vector = self.embedder.embed_one(query)
        if vector is not None and use_vec:
            for i, c in self.vectors.nearest(vector, self.depth * 2):
                if allowed[i]:
                    cos[i] = c
        vec_rank = sorted(cos, key=lambda i: -cos[i])[: self.depth]
        fused = rrf([bm_rank, vec_rank], self.rrf_k)
        # Order numbers and amounts are slots, not topic words: they never occur in the KB.
        qset = {t for t in tokens if not any(ch.isdigit() for ch in t)}

        def cov(i: int) -> float:
            return len(qset & self._doc_tokens[i]) / len(qset) if qset else 0.0

        hits = []
        calibration = CALIBRATION.get((self.model, lang or "en"))
        if calibration is not None and cos:
            mid, scale = calibration
            support_of = getattr(self.vectors, "support", None)
            sup = support_of(vector) if support_of is not None else None
            score = {
                i: (float(sup[i]) if sup is not None else cos.get(i, 0.0))
                + LEX_WEIGHT * cov(i)
                - penalty
                for i in fused
            }
            for i in sorted(score, key=lambda i: (-score[i], -fused[i]))[:k]:
                conf = _sigmoid((score[i] - mid) / scale)
                hits.append(Hit(entries[i], score[i], conf, float(bm[i]), cos.get(i, 0.0), cov(i)))
            return hits
        for i, rscore in sorted(fused.items(), key=lambda p: -p[1])[:k]:
            c = cos.get(i, 0.0) if use_vec else 0.0
            hits.append(
                Hit(
                    entry=entries[i],
                    score=rscore,
                    confidence=confidence(c, cov(i), len(qset)),
                    bm25=float(bm[i]),
                    cosine=cos.get(i, 0.0),
                    coverage=cov(i),
                )
            )
        return hits
