"""Intent accuracy on a held-out set (utterances that are neither examples nor KB phrasings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kefu.ai_bridge.dialog.intents import UNKNOWN, IntentClassifier, load_examples
from kefu.ai_bridge.dialog.kb import KnowledgeBase

HELDOUT = Path(__file__).parent / "heldout_intents.jsonl"


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in HELDOUT.read_text(encoding="utf-8").splitlines() if line]


def test_heldout_set_is_big_bilingual_and_not_in_training(default_kb: KnowledgeBase) -> None:
    data = rows()
    assert len(data) >= 60
    assert {r["lang"] for r in data} == {"en", "zh"}
    seen = {t.casefold() for langs in load_examples().values() for v in langs.values() for t in v}
    seen |= {q.casefold() for e in default_kb.entries for q in e.phrasings()}
    assert not [r["text"] for r in data if r["text"].casefold() in seen]


def test_heldout_accuracy_at_least_85_percent(classifier: IntentClassifier) -> None:
    data = rows()
    wrong = []
    for r in data:
        got = classifier.classify(r["text"], lang=r["lang"])
        if got.intent != r["intent"]:
            wrong.append((r["text"], r["intent"], got.intent))
    accuracy = 1 - len(wrong) / len(data)
    print(f"held-out intent accuracy: {accuracy:.1%} ({len(data) - len(wrong)}/{len(data)})")
    assert accuracy >= 0.85, wrong


@pytest.mark.parametrize(
    ("text", "lang", "intent"),
    [
        ("agent", "en", "human_agent"),
        ("can I speak to a manager", "en", "human_agent"),
        ("could you hand me over to one of your staff", "en", "human_agent"),
        ("I'd like somebody from customer support", "en", "human_agent"),
        ("转人工", "zh", "human_agent"),
        ("yes please", "en", "affirm"),
        ("nope", "en", "deny"),
        ("不用了", "zh", "deny"),
        ("你好", "zh", "greeting"),
    ],
)
def test_rules(classifier: IntentClassifier, text: str, lang: str, intent: str) -> None:
    got = classifier.classify(text, lang=lang)
    assert (got.intent, got.method) == (intent, "rule")


def test_off_topic_is_unknown(classifier: IntentClassifier) -> None:
    assert classifier.classify("what is the boiling point of mercury", lang="en").intent == UNKNOWN


def test_without_embedder_english_falls_back_to_rules_only() -> None:
    c = IntentClassifier(None)
    assert c.classify("where is my order", lang="en").intent == UNKNOWN
    assert c.classify("I need a human", lang="en").intent == "human_agent"
    assert c.classify("我的快递到哪了", lang="zh").intent == "order_status"
