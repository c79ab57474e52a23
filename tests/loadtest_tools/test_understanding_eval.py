"""Static checks of the understanding evaluation set (loadtest/eval) and its scorer's rules.

No model is loaded: the KB files are only parsed, so this runs in well under a second.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from typing import Any

import pytest

from loadtest.understanding import (
    EVAL_DIR,
    HEADER,
    SOCIAL_LABELS,
    kb_entries,
    load_items,
    outcome,
    row,
    split_of,
    summarize,
)

STYLES = {
    "indirect",
    "colloquial",
    "irrelevant_detail",
    "hesitation",
    "self_correction",
    "asr_error",
    "numbers_spelled",
    "impatient",
    "short",
    "out_of_scope",
    "near_domain",
    "near_kb",
    "plain",
}
KEYS = {"text", "lang", "expect", "split", "style"}
MIN_ITEMS = {"en": 300, "zh": 150}
CJK = re.compile(r"[\u4e00-\u9fff]")


def _lines(lang: str) -> list[dict[str, Any]]:
    path = EVAL_DIR / f"understanding_{lang}.jsonl"
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _intent_names() -> set[str]:
    from kefu.ai_bridge.dialog.intents import load_examples

    return set(load_examples())


@pytest.fixture(scope="module")
def entries() -> dict[str, Any]:
    return kb_entries()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_schema_and_counts(lang: str) -> None:
    items = _lines(lang)
    assert len(items) >= MIN_ITEMS[lang]
    texts = [it["text"] for it in items]
    assert len(set(texts)) == len(texts), "duplicate utterances"
    for it in items:
        assert KEYS <= set(it) <= KEYS | {"accept", "batch"}, it
        assert it.get("batch", 1) in (1, 2), it
        assert it["lang"] == lang
        assert isinstance(it["text"], str) and it["text"] == it["text"].strip() and it["text"]
        assert it["split"] in ("dev", "heldout")
        assert it["style"] and set(it["style"]) <= STYLES, it
        assert ("out_of_scope" in it["style"]) <= (it["expect"] == "none"), it
        assert isinstance(it.get("accept", []), list)
        assert bool(CJK.search(it["text"])) == (lang == "zh"), it["text"]
    oos = sum(it["expect"] == "none" for it in items) / len(items)
    assert 0.12 <= oos <= 0.25, f"out-of-scope share {oos:.2f}"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_split_is_the_fixed_hash_and_about_40_60(lang: str) -> None:
    items = _lines(lang)
    for it in items:
        assert it["split"] == split_of(lang, it["text"]), it["text"]
    dev = sum(it["split"] == "dev" for it in items) / len(items)
    assert 0.3 <= dev <= 0.5, f"dev share {dev:.2f}"
    # both parts have out-of-scope items and enough in-scope ones to score
    for split in ("dev", "heldout"):
        part = [it for it in items if it["split"] == split]
        assert sum(it["expect"] == "none" for it in part) >= 10
        assert sum(it["expect"] != "none" for it in part) >= 50
    assert len(load_items(lang, "dev")) + len(load_items(lang, "heldout")) == len(items)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_label_exists(lang: str, entries: dict[str, Any]) -> None:
    intents = _intent_names()
    assert set(SOCIAL_LABELS) <= intents
    for it in _lines(lang):
        for label in (it["expect"], *it.get("accept", [])):
            if label == "none":
                assert label == it["expect"]
            elif label in entries:
                assert entries[label].lang == lang, (label, it["text"])
            else:
                assert label in intents, (label, it["text"])
                # only social turns (no KB entry) or an accepted plain handoff are intents
                assert label in SOCIAL_LABELS or label == "human_agent", label


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_kb_entry_is_asked_several_ways(lang: str, entries: dict[str, Any]) -> None:
    asked = Counter(it["expect"] for it in _lines(lang))
    for eid, e in entries.items():
        if e.lang == lang:
            assert asked[eid] >= 3, f"{eid} has {asked[eid]} utterances"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_near_kb_tag_marks_the_few_near_verbatim_kb_phrasings(
    lang: str, entries: dict[str, Any]
) -> None:
    def norm(s: str) -> str:
        return re.sub(r"[^\w]+", " ", s.lower()).strip()

    phrasings = [norm(p) for e in entries.values() if e.lang == lang for p in e.phrasings()]
    items = _lines(lang)
    for it in items:
        n = norm(it["text"])
        sim = max(difflib.SequenceMatcher(None, n, p).ratio() for p in phrasings)
        assert ("near_kb" in it["style"]) == (sim >= 0.85), (it["text"], round(sim, 2))
    near = sum("near_kb" in it["style"] for it in items)
    assert near / len(items) < 0.06, "the set drifted towards the KB's own wording"


def test_outcome_rules() -> None:
    item = {"expect": "en-refund-when", "accept": ["en-return-how"]}
    assert outcome(item, "en-refund-when") == "correct"
    assert outcome(item, "en-return-how") == "correct"
    assert outcome(item, "en-billing-double") == "wrong"
    assert outcome(item, "none") == "fallback"
    assert outcome(item, "human_agent") == "handoff"
    assert outcome(item, "en-human-complaint", handoff=True) == "handoff"
    assert outcome(item, "deny") == "reask"
    human = {"expect": "en-human-request", "accept": ["human_agent"]}
    assert outcome(human, "human_agent", handoff=True) == "correct"
    oos = {"expect": "none"}
    for got in ("none", "human_agent", "greeting", "affirm"):
        assert outcome(oos, got) == "correct"
    assert outcome(oos, "en-human-robot", handoff=True) == "correct"
    assert outcome(oos, "en-store-pickup") == "wrong"


def test_summary_and_row(entries: dict[str, Any]) -> None:
    def res(expect: str, got: str, intent: str, ms: float) -> dict[str, Any]:
        it = {"text": got, "expect": expect, "style": ["short"], "source": "kb"}
        got_outcome = outcome(it, got)
        return {**it, "got": got, "outcome": got_outcome, "intent": intent, "conf": 1.0, "ms": ms}

    results = [
        res("en-refund-when", "en-refund-when", "returns_refunds", 5.0),
        res("en-refund-when", "en-return-how", "returns_refunds", 6.0),
        res("en-order-where", "none", "unknown", 7.0),
        res("none", "none", "unknown", 8.0),
        res("none", "en-store-pickup", "store_locations", 9.0),
    ]
    s = summarize(results, entries, failures=True)
    assert s["answer_accuracy_pct"] == pytest.approx(33.3)
    assert s["intent_accuracy_pct"] == pytest.approx(66.7)
    assert s["correct_abstention_pct"] == 50.0
    assert s["wrong_answer_pct"] == 40.0
    assert s["no_answer_pct"] == pytest.approx(33.3)
    assert len(s["failures"]) == 3
    assert "failures" not in summarize(results, entries, failures=False)
    line = row("en", "dev", s)
    assert line.count("|") == HEADER.splitlines()[0].count("|")
