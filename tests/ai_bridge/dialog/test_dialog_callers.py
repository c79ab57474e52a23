"""Labelled callers' turns (callers.py): validation, import with the entries, and training.

The turns written here are for these tests; none is in loadtest/eval or the bundled files.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kefu.ai_bridge.dialog.callers import OUT_OF_SCOPE, CallerTurn, heard_as, read_callers
from kefu.ai_bridge.dialog.e5 import E5Embedder
from kefu.ai_bridge.dialog.intents import IntentClassifier
from kefu.ai_bridge.dialog.kb import (
    KbImportError,
    KnowledgeBase,
    default_kb_files,
    import_kb,
    parse_files,
)
from kefu.ai_bridge.dialog.learned import LearnedScorer

MD = """---
lang: en
---
## Where is my parcel?
id: parcel
intent: order_status
alt: Track my parcel
Check My Orders.

## 退款多久到账？
id: refund-zh
lang: zh
intent: returns_refunds
3到5个工作日。
"""


def _write(d: Path, name: str, lines: list[object]) -> Path:
    p = d / name
    p.write_text(
        "".join(
            (x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)) + "\n" for x in lines
        ),
        encoding="utf-8",
    )
    return p


def test_turns_import_with_their_entries_and_load_back(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "shop.md").write_text(MD, encoding="utf-8")
    _write(
        src,
        "shop.callers.jsonl",
        [
            {"text": "the box was meant to come tuesday and nothing", "label": "parcel"},
            {"text": "那个钱退了好几天了还没看到", "label": "refund-zh"},
            {"text": "do you do gift wrapping", "label": OUT_OF_SCOPE},
            {"text": "你们招不招人", "label": OUT_OF_SCOPE},
        ],
    )
    report = import_kb([src], tmp_path / "kb")  # the directory: entries and callers' turns
    assert (report.entries, report.callers) == (2, 4)
    kb = KnowledgeBase.load(tmp_path / "kb")
    assert [(c.label, c.lang) for c in kb.callers] == [
        ("parcel", "en"),
        ("refund-zh", "zh"),  # the entry's language
        (OUT_OF_SCOPE, "en"),  # detected from the text
        (OUT_OF_SCOPE, "zh"),
    ]
    assert kb.callers[0].source.endswith("shop.callers.jsonl:1")
    # The callers file is not read as entries, and the retriever does not index its turns.
    assert sorted(e.id for e in kb.entries) == ["parcel", "refund-zh"]
    assert all("gift wrapping" not in q for e in kb.entries for q in e.phrasings())


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "invalid JSON"),
        ('["a list"]', "JSON object"),
        ({"text": "where's my stuff", "label": "parcel", "mood": "cross"}, "unknown keys"),
        ({"text": "where's my stuff", "label": "parcels"}, "neither an entry id"),
        ({"text": "   ", "label": "parcel"}, "'text' must have"),
        ({"text": "x" * 501, "label": "parcel"}, "'text' must have"),
        ({"text": "where's my stuff", "label": 3}, "'label' must be a string"),
        ({"text": "where's my stuff", "label": "parcel", "lang": "fr"}, "lang 'fr'"),
    ],
)
def test_a_bad_line_names_file_and_line_and_imports_nothing(
    tmp_path: Path, line: object, message: str
) -> None:
    md = tmp_path / "shop.md"
    md.write_text(MD, encoding="utf-8")
    good = {"text": "has it left the warehouse", "label": "parcel"}
    bad = _write(tmp_path, "shop.callers.jsonl", [good, line])
    with pytest.raises(KbImportError, match=message) as err:
        import_kb([md, bad], tmp_path / "kb")
    assert (err.value.path, err.value.line) == (str(bad), 2)
    assert not (tmp_path / "kb").exists()


def test_the_bundled_turns_cover_every_entry_and_what_is_not_answered() -> None:
    files = default_kb_files()
    entries = parse_files(files)
    turns = read_callers([f for f in files if f.name.endswith(".callers.jsonl")], entries)
    per = Counter(c.label for c in turns)
    assert set(per) == {e.id for e in entries} | {OUT_OF_SCOPE}
    assert min(n for label, n in per.items() if label != OUT_OF_SCOPE) >= 15
    by_lang = Counter(c.lang for c in turns if c.label == OUT_OF_SCOPE)
    assert by_lang["en"] >= 100 and by_lang["zh"] >= 100
    # A turn is not one of the KB's own phrasings.
    own = {q.casefold() for e in entries for q in e.phrasings()}
    assert not [c.text for c in turns if c.text.casefold() in own]


def test_turns_are_embedded_without_their_fillers() -> None:
    turn = CallerTurn("um so like where's my parcel", "parcel", "en")
    assert heard_as([turn]) == ["where's my parcel"]


def test_the_scorer_learns_an_entry_from_callers_turns_alone(
    tmp_path: Path, e5: E5Embedder
) -> None:
    """An entry whose own phrasings share no words with how callers put it: trained on the
    callers' turns too, the scorer places a new caller's turn there."""
    md = """---
lang: en
---
## Is there a fee for dispatch?
id: ship-fee
intent: delivery_time
alt: What is the dispatch charge?
Delivery is free over 50 pounds.

## Can I alter my login?
id: login
intent: password_reset
alt: Modify my credentials
Use Forgot password on the sign-in page.
"""
    (tmp_path / "kb.md").write_text(md, encoding="utf-8")
    turns = [
        "how much do you lot want for getting it to my door",
        "is it extra to have the stuff brought round to mine",
        "what do I pay on top so a van drops it off",
        "do I get stung for postage if I order a lamp",
        "posting it to me, what's that going to set me back",
    ]
    other = [
        "I can't get into the app with my old password",
        "I want a new password, the old one was leaked",
        "signing in keeps failing, can I set a fresh password",
    ]
    _write(
        tmp_path,
        "kb.callers.jsonl",
        [{"text": t, "label": "ship-fee"} for t in turns]
        + [{"text": t, "label": "login"} for t in other],
    )
    probe = e5.embed_one("what's the charge to bring a fridge to my flat")

    def p_fee(with_callers: bool) -> float:
        files = [tmp_path / "kb.md"] + ([tmp_path / "kb.callers.jsonl"] if with_callers else [])
        import_kb(files, tmp_path / f"kb-{with_callers}", embedder=e5)
        kb = KnowledgeBase.load(tmp_path / f"kb-{with_callers}")
        intents = IntentClassifier(e5, {}, kb.entries, callers=kb.callers)
        scorer = LearnedScorer.for_dialog(kb, intents)
        assert scorer is not None
        return scorer.models["en"].prob_of(probe)["ship-fee"]

    without, trained = p_fee(False), p_fee(True)
    # The odds the scorer gives the entry grow several-fold (from a coin toss with softmax
    # regression; the network is already inclined by the two entries' own phrasings).
    odds = [p / (1.0 - p) for p in (without, trained)]
    assert trained > 0.5 and odds[1] > 5 * odds[0], (without, trained)
