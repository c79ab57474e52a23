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


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("hang on, is this an actual human or a recording?", "en"),
        ("you're a bot, aren't you", "en"),
        ("is there a real person on the phones on saturday", "en"),
        ("接电话的是机器人还是真人", "zh"),
        ("我是不是在和人工智能聊天", "zh"),
        ("周日打过去有人工吗", "zh"),
        ("晚上八点以后还能找到人工吗", "zh"),
    ],
)
def test_asking_about_people_is_not_asking_for_one(
    classifier: IntentClassifier, text: str, lang: str
) -> None:
    """Whether the voice is a machine, or when people answer, is a question for the KB."""
    assert classifier.rule(text.lower(), lang) is None


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("are you a robot? just put me through to someone", "en"),
        ("I don't care if you're a machine, I want a real person", "en"),
        ("你是机器人吧 给我转人工", "zh"),
        ("我要跟真人说话", "zh"),
    ],
)
def test_asking_for_a_person_still_hands_over(
    classifier: IntentClassifier, text: str, lang: str
) -> None:
    assert classifier.rule(text.lower(), lang) == "human_agent"


def test_off_topic_is_unknown(classifier: IntentClassifier) -> None:
    assert classifier.classify("what is the boiling point of mercury", lang="en").intent == UNKNOWN


def test_without_embedder_english_falls_back_to_rules_only() -> None:
    c = IntentClassifier(None)
    assert c.classify("where is my order", lang="en").intent == UNKNOWN
    assert c.classify("I need a human", lang="en").intent == "human_agent"
    assert c.classify("我的快递到哪了", lang="zh").intent == "order_status"
