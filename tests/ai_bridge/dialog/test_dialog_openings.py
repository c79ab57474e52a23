"""reply_openings: the first sentences a reply can start with, per language."""

from __future__ import annotations

from kefu.ai_bridge.dialog.kb import KnowledgeBase
from kefu.ai_bridge.dialog.kb_formats import KbEntry
from kefu.ai_bridge.dialog.openings import reply_openings
from kefu.ai_bridge.dialog.phrases import say


def entry(i: int, answer: str, lang: str = "en") -> KbEntry:
    return KbEntry(id=f"e{i}", question=f"q{i}", answer=answer, intent="x", lang=lang)


def test_first_sentences_without_slots_and_the_canned_lines() -> None:
    openings = reply_openings(
        [
            entry(1, "Returns are free within 30 days. Print the label under My Orders."),
            entry(2, "You can track {order_number} live. We text you the link."),
            entry(3, "Returns are free within 30 days. Same first sentence, once."),
            entry(4, "标准配送需要三到五个工作日。加急配送一到两天。", "zh"),
        ]
    )
    en, zh = openings["en"], openings["zh"]
    assert en[0] == "Returns are free within 30 days."
    assert en.count("Returns are free within 30 days.") == 1
    assert not any("{" in line or "We text you" in line for line in en)
    assert zh[0] == "标准配送需要三到五个工作日。"
    assert say("fallback", "en") in en and say("handoff", "zh") in zh
    assert say("other_shop", "en") not in en  # names the shop: differs per call
    assert "Print the label under My Orders." not in en  # later sentences render in time


def test_the_bundled_knowledge_base_opens_with_most_of_its_answers(
    default_kb: KnowledgeBase,
) -> None:
    openings = reply_openings(default_kb.entries)
    for lang in ("en", "zh"):
        answers = [e for e in default_kb.entries if e.lang == lang]
        from_kb = [line for line in openings[lang] if any(line in e.answer for e in answers)]
        assert len(from_kb) >= 0.8 * len(answers)
