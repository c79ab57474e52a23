"""Phrasings framed with a product (augment.py), and what they teach the learned scorer.

The utterances here are written for these tests; none is in loadtest/eval, intents.json or
the KB.
"""

from __future__ import annotations

import pytest

from kefu.ai_bridge.dialog.augment import PRODUCTS, product_variants
from kefu.ai_bridge.dialog.e5 import E5Embedder
from kefu.ai_bridge.dialog.intents import IntentClassifier
from kefu.ai_bridge.dialog.kb import KbEntry, KnowledgeBase
from kefu.ai_bridge.dialog.learned import LearnedScorer
from kefu.ai_bridge.dialog.manager import OOS_VETO_P, DialogManager


def test_every_phrasing_gets_one_framed_variant_the_same_on_every_start() -> None:
    entries = [
        KbEntry(id="a", question="Can I pay in instalments?", answer="...", lang="en"),
        KbEntry(
            id="b", question="可以分期付款吗？", answer="…", lang="zh", alt_questions=("能分期吗",)
        ),
        KbEntry(id="c", question="Kann ich in Raten zahlen?", answer="...", lang="de"),
    ]
    texts, rows = product_variants(entries)
    assert rows == [0, 1, 1]  # no frames for German: left out
    assert texts == product_variants(entries)[0]
    assert "Can I pay in instalments" in texts[0] and "?" not in texts[0].split(",")[0]
    assert any(p in texts[0] for p in PRODUCTS["en"])
    assert "可以分期付款吗" in texts[1] and any(p in texts[1] for p in PRODUCTS["zh"])


@pytest.fixture(scope="module")
def plain_scorer(default_kb: KnowledgeBase, classifier: IntentClassifier) -> LearnedScorer:
    """The scorer trained without the product variants."""
    examples = {lang: classifier.labelled_examples(lang) for lang in ("en", "zh")}
    rows = default_kb.rows.tolist()
    return LearnedScorer.train(default_kb.entries, default_kb.vectors, rows, examples)


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("can I split the payment for a new dishwasher over a few months", "en"),
        ("我上周买的空调还没发货，怎么回事", "zh"),
    ],
)
def test_naming_a_product_no_longer_reads_as_out_of_scope(
    scorer: LearnedScorer, plain_scorer: LearnedScorer, e5: E5Embedder, text: str, lang: str
) -> None:
    vector = e5.embed_one(text)
    before = plain_scorer.out_of_scope_p(vector, lang)
    after = scorer.out_of_scope_p(vector, lang)
    assert before is not None and after is not None
    assert after < OOS_VETO_P <= before, (before, after)


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("do you stock leather recliners in grey", "en"),
        ("which of your laptops has the best battery", "en"),
        ("你们有没有卖皮沙发", "zh"),
    ],
)
def test_a_question_about_the_products_themselves_stays_out_of_scope(
    scorer: LearnedScorer, e5: E5Embedder, text: str, lang: str
) -> None:
    p = scorer.out_of_scope_p(e5.embed_one(text), lang)
    assert p is not None and p > 0.9


async def test_a_caller_who_names_the_product_is_answered(manager: DialogManager) -> None:
    text = "can I split the payment for a new dishwasher over a few months"
    reply = await manager.respond("augment", text, lang="en")
    assert reply.source == "kb" and reply.kb_ids == ("en-pay-instalments",), reply
