"""The learned scorer (learned.py): softmax regression over e5 vectors, re-ranking the hits.

The utterances here are written for these tests; none is in loadtest/eval, intents.json or
the KB.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kefu.ai_bridge.dialog import choice
from kefu.ai_bridge.dialog.classifier import SoftmaxModel, train_network
from kefu.ai_bridge.dialog.e5 import E5Embedder
from kefu.ai_bridge.dialog.intents import OUT_OF_SCOPE, IntentClassifier
from kefu.ai_bridge.dialog.kb import KbEntry, KnowledgeBase
from kefu.ai_bridge.dialog.learned import (
    RERANK_WEIGHT,
    SOCIAL,
    LearnedScorer,
    training_set,
)
from kefu.ai_bridge.dialog.manager import DialogManager
from kefu.ai_bridge.dialog.retrieval import Hit, HybridRetriever

# --- the network itself -------------------------------------------------------------------


def test_the_network_learns_separable_classes_and_generalises() -> None:
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(3, 16))
    x = np.concatenate([c + 0.3 * rng.normal(size=(20, 16)) for c in centres])
    y = np.repeat(np.eye(3), 20, axis=0)
    model = train_network(x, y, ("a", "b", "c"), units=32, epochs=200)
    # Points never seen in training, near each centre.
    for label, c in zip("abc", centres, strict=True):
        p = model.prob_of(c + 0.3 * rng.normal(size=16))
        assert max(p, key=lambda k: p[k]) == label
        assert sum(p.values()) == pytest.approx(1.0)


def test_soft_targets_split_the_belief() -> None:
    """An example labelled with two classes equally (an intent with two entries) leaves the
    model undecided between them, and sure it is neither of the others."""
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    y = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    p = train_network(x, y, ("a", "b", "c"), units=32, epochs=500).prob_of(np.array([1.0, 0.0]))
    assert p["a"] == pytest.approx(p["b"], abs=0.05)
    assert p["a"] + p["b"] > 0.9


def test_the_network_separates_what_a_linear_model_cannot() -> None:
    """Two classes on the diagonals of a square (XOR): no line separates them, one hidden
    layer does; the same data give the same model."""
    rng = np.random.default_rng(3)
    corners = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]])
    x = np.concatenate([c + 0.2 * rng.normal(size=(30, 2)) for c in corners])
    y = np.repeat(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), 30, axis=0)
    net = train_network(x, y, ("same", "opposite"), units=16, epochs=300)
    probes = corners * 0.9
    want = ["same", "same", "opposite", "opposite"]
    assert [max(p := net.prob_of(v), key=p.__getitem__) for v in probes] == want
    assert all(net.prob_of(v)[w] > 0.8 for v, w in zip(probes, want, strict=True))
    again = train_network(x, y, ("same", "opposite"), units=16, epochs=300)
    assert again.hidden is not None and net.hidden is not None
    assert np.array_equal(again.hidden, net.hidden)


def _entry(id_: str, intent: str, lang: str = "en") -> KbEntry:
    return KbEntry(id=id_, question=id_, answer="...", intent=intent, lang=lang)


def test_training_set_labels_phrasings_intents_and_out_of_scope() -> None:
    entries = [_entry("a", "billing"), _entry("b", "billing"), _entry("z", "billing", "zh")]
    vecs = np.eye(4, 3)
    x, y, labels = training_set(
        entries,
        vecs[:3],
        [0, 1, 2],
        [("billing", vecs[3]), (OUT_OF_SCOPE, vecs[0]), ("thanks", vecs[1]), ("other", vecs[2])],
        "en",
    )
    assert labels == ("a", "b", OUT_OF_SCOPE, SOCIAL)
    # a's phrasing, b's phrasing, the billing example (split over a and b), OOS, social;
    # the Chinese entry and the intent without entries are left out.
    assert y.tolist() == [
        [1, 0, 0, 0],
        [0, 1, 0, 0],
        [0.5, 0.5, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 0, 1],
    ]
    assert len(x) == 5


# --- on the shipped KB --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lang", "entry_id"),
    [
        ("the same purchase shows up on my bank app two times", "en", "en-billing-double"),
        (
            "I keep typing my password in wrong and now it refuses to let me in",
            "en",
            "en-password-locked",
        ),
        ("whatever I do I cannot recall the password I picked", "en", "en-password-forgot"),
        ("同一个订单银行卡被扣了两回钱", "zh", "zh-billing-double"),
        ("我想问下你们能不能送到香港去", "zh", "zh-delivery-weekend"),
    ],
)
def test_model_picks_the_right_entry_for_unseen_phrasings(
    scorer: LearnedScorer, e5: E5Embedder, text: str, lang: str, entry_id: str
) -> None:
    p = scorer.models[lang].prob_of(e5.embed_one(text))
    entries = {k: v for k, v in p.items() if k not in (OUT_OF_SCOPE, SOCIAL)}
    assert max(entries, key=lambda k: entries[k]) == entry_id


@pytest.mark.parametrize(
    ("text", "lang"),
    [("what's a good recipe for banana bread", "en"), ("帮我查一下明天的火车票", "zh")],
)
def test_model_knows_out_of_scope_questions(
    scorer: LearnedScorer, e5: E5Embedder, text: str, lang: str
) -> None:
    p = scorer.models[lang].prob_of(e5.embed_one(text))
    assert max(p, key=lambda k: p[k]) == OUT_OF_SCOPE


def test_rerank_keeps_the_favourite_score_and_lowers_the_others(
    scorer: LearnedScorer, retriever: HybridRetriever, e5: E5Embedder
) -> None:
    text = "the same purchase shows up on my bank app two times"
    vec = e5.embed_one(text)
    raw = retriever.search(text, vector=vec, lang="en", k=10)
    hits = scorer.rerank(raw, vec, "en")
    assert sorted(h.entry.id for h in hits) == sorted(h.entry.id for h in raw)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].entry.id == "en-billing-double"
    before = {h.entry.id: h.score for h in raw}
    assert hits[0].score == pytest.approx(before[hits[0].entry.id])
    assert all(h.score <= before[h.entry.id] + 1e-9 for h in hits)
    assert any(h.score < before[h.entry.id] - RERANK_WEIGHT for h in hits)
    assert [h.confidence for h in hits] == [
        next(r.confidence for r in raw if r.entry.id == h.entry.id) for h in hits
    ]


def test_rerank_without_a_model_or_vector_changes_nothing(
    scorer: LearnedScorer, retriever: HybridRetriever
) -> None:
    raw = retriever.search("where is my parcel", lang="en", k=5)
    assert scorer.rerank(raw, None, "en") == raw
    assert LearnedScorer({}).rerank(raw, np.ones(384, np.float32), "en") == raw


def test_weights_are_cached_by_content(
    default_kb: KnowledgeBase,
    classifier: IntentClassifier,
    scorer: LearnedScorer,
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    # The vectors the session's scorer embedded are not what is tested here: copied over.
    for vectors in cache_dir.glob("*-vectors-*.npz"):
        shutil.copy(vectors, tmp_path)
    first = LearnedScorer.for_dialog(default_kb, classifier, cache_dir=tmp_path)
    files = sorted(tmp_path.glob("learned-scorer-*.npz"))
    assert len(files) == 2  # one per language
    again = LearnedScorer.for_dialog(default_kb, classifier, cache_dir=tmp_path)
    assert first is not None and again is not None
    for lang in ("en", "zh"):
        np.testing.assert_allclose(first.models[lang].weights, again.models[lang].weights)
        assert first.models[lang].labels == again.models[lang].labels
    assert sorted(tmp_path.glob("learned-scorer-*.npz")) == files


# --- close calls: either ranking ------------------------------------------------------------


def _hit(entry_id: str, score: float) -> Hit:
    return Hit(_entry(entry_id, "x"), score, 0.99, 0.0, score, 1.0)


def test_a_close_call_in_the_retrieved_ranking_is_still_asked() -> None:
    retrieved = [_hit("a", 0.900), _hit("b", 0.898)]
    reranked = [_hit("a", 0.900), _hit("b", 0.880)]  # the model pulled them apart
    assert not choice.too_close(reranked, 0.45)
    assert choice.too_close_in_either(reranked, retrieved, 0.45)
    far = [_hit("a", 0.900), _hit("b", 0.850)]
    assert not choice.too_close_in_either(far, far, 0.45)


def test_a_strong_second_opinion_for_another_hit_is_a_rival() -> None:
    hits = [_hit("a", 0.90), _hit("b", 0.88), _hit("c", 0.85)]
    # The scorer prefers the third hit and gives the best one little: ask between a and c.
    rival = choice.rival(hits, {"a": 0.1, "b": 0.05, "c": choice.RIVAL_P})
    assert rival is not None and rival.entry.id == "c"
    # It agrees, is unsure, still gives the best hit enough, or prefers something not hit.
    assert choice.rival(hits, {"a": 0.6, "b": 0.3}) is None
    assert choice.rival(hits, {"a": 0.1, "b": choice.RIVAL_P - 0.01}) is None
    assert choice.rival(hits, {"a": choice.RIVAL_BEST_P + 0.01, "b": 0.6}) is None
    assert choice.rival(hits, {"a": 0.05, "out_of_scope": 0.9}) is None
    assert choice.rival(hits, None) is None and choice.rival([], {"a": 1.0}) is None


# --- vouching for a turn the retriever was unsure of ----------------------------------------


def _scorer_sure_of(entry_id: str, logit: float, off_topic: float = 0.0) -> LearnedScorer:
    """A model whose belief ignores the turn: ``entry_id`` at ``logit``, the out-of-scope
    class at ``off_topic`` and the social one at 0 (no other entry: the ranking stays the
    retriever's)."""
    labels = (entry_id, OUT_OF_SCOPE, SOCIAL)
    bias = np.array([logit, off_topic, 0.0], np.float32)
    zeros = np.zeros((384, 3), np.float32)
    return LearnedScorer({"en": SoftmaxModel(labels, zeros[:, 0], 1.0, zeros, bias)})


async def test_a_turn_the_scorer_vouches_for_is_answered_not_offered_a_colleague(
    retriever: HybridRetriever, classifier: IntentClassifier, e5: E5Embedder
) -> None:
    # Near no single phrasing of the warranty claim: the retriever's confidence falls short.
    text = "the coffee grinder died, it's under a year old"
    sure = _scorer_sure_of("en-warranty-claim", 3.0, -3.0)  # p = 0.95
    unsure = _scorer_sure_of("en-warranty-claim", -1.0, 2.0)  # p = 0.04, out of scope 0.84
    assert sure.vouches("en-warranty-claim", e5.embed_one(text), "en")
    assert not unsure.vouches("en-warranty-claim", e5.embed_one(text), "en")
    assert not sure.vouches("en-warranty-claim", None, "en")
    for scorer, source in ((sure, "kb"), (unsure, "fallback"), (None, "fallback")):
        manager = DialogManager(retriever, classifier, e5, scorer=scorer)
        reply = await manager.respond("vouch", text, lang="en")
        assert reply.source == source, (scorer, reply)
        if source == "kb":
            assert reply.kb_ids == ("en-warranty-claim",)
            assert reply.confidence == pytest.approx(manager.low_confidence)


async def test_an_unsure_turn_in_scope_is_asked_a_or_b_and_no_offers_a_colleague(
    retriever: HybridRetriever, classifier: IntentClassifier, e5: E5Embedder
) -> None:
    # The retriever falls short and the scorer vouches for nothing, but it does not take the
    # turn for out of scope (p 0.27, under manager.OOS_VETO_P): the caller is asked between
    # the best two entries.
    text = "the coffee grinder died, it's under a year old"
    in_scope = _scorer_sure_of("en-warranty-claim", -0.4, -0.5)  # p 0.29: no vouching
    manager = DialogManager(retriever, classifier, e5, scorer=in_scope)
    asked = await manager.respond("unsure", text, lang="en")
    assert asked.source == "clarify", asked
    question = " ".join([s async for s in asked.sentences])
    assert question.startswith("Just to check, do you mean"), question
    assert "warranty" in question.lower(), question  # the warranty claim is one of the two
    # "no" answers the question: neither, so a colleague is offered
    reply = await manager.respond("unsure", "no", lang="en")
    assert reply.source == "fallback", reply
    again = await manager.respond("unsure", "yes please", lang="en")
    assert again.handoff, again


@pytest.mark.parametrize(
    ("said", "lang", "picked"),
    [
        ("no", "en", choice.NEITHER),
        ("nope.", "en", choice.NEITHER),
        ("no, the second one", "en", "b"),
        ("不是", "zh", choice.NEITHER),
        ("不是，第一个", "zh", "a"),
        ("none of those", "en", choice.NEITHER),
    ],
)
def test_a_bare_no_answers_a_or_b_with_neither(said: str, lang: str, picked: str) -> None:
    assert choice.resolve(said, lang, ("a", "b"), []) == picked
